"""Run files a kill can cut: whole files written atomically, JSONL logs whose torn last line is dropped.

A JSONL log is only ever appended to, by one process (a Ray run's workers' exchanges reach ``events.jsonl``
through its driver), one ``write`` of ``line + "\\n"`` per record or batch of records. A kill can cut the last
write short; :func:`drop_torn_tail` removes such a line (and says so) before the next append, so every append
starts on a fresh line and a torn record never swallows the one written after it. A folder the user cannot write
is bad input naming it (:func:`writable`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dyneval.state.errors import InputError

_BLOCK = 1 << 16


def write_atomic(path: Path, text: str | Iterable[str], mode: int = 0o666) -> None:
    """Replace ``path`` with ``text`` (or its pieces, written as they come) in one step (temp file in the same
    folder, created with ``mode`` (less the umask where it is the default), then rename; removed if a piece
    fails)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        if mode != 0o666:
            os.fchmod(fd, mode)  # a temp file left by a killed writer keeps its mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.writelines([text] if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


@contextlib.contextmanager
def writable(folder: Path, setting: str) -> Iterator[None]:
    """Writing in ``folder``: a folder the user cannot write (read-only, another owner's, a full disk) is bad input
    naming it and the flag that chose it, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"cannot write in {folder} ({exc.strerror or exc})", setting=setting) from None


def parse_record(line: bytes) -> dict[str, Any] | None:
    """The record one JSONL line holds, or ``None`` when the line is not a whole JSON object (cut by a kill, not
    UTF-8, or nested past the parser's depth)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return record if isinstance(record, dict) else None


def drop_torn_tail(path: Path) -> str | None:
    """Cut off a last line without its newline that is not a whole record; return what was done, if anything.

    A last record that is whole but lacks only its newline gets the newline.
    """
    if not path.exists():
        return None
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        start = size
        while start > 0:  # find the start of the last line, reading backwards block by block
            block_start = max(0, start - _BLOCK)
            fh.seek(block_start)
            nl = fh.read(start - block_start).rfind(b"\n")
            if nl >= 0:
                start = block_start + nl + 1
                break
            start = block_start
        fh.seek(start)
        tail = fh.read()
        if parse_record(tail) is not None:
            fh.write(b"\n")
            return None
        fh.truncate(start)
    return f"{path.name}: dropped a last line cut short by a kill ({len(tail)} bytes)"


def json_line(record: dict[str, Any]) -> str:
    """One record as one JSON line, its newline included."""
    return json.dumps(record, ensure_ascii=False, default=str) + "\n"


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one JSON line (:func:`append_text`)."""
    append_text(path, json_line(record))


def append_text(path: Path, lines: str) -> None:
    """Append whole JSON lines in one ``write`` (a buffered text write splits a long line over several)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(lines.encode())
        while view:  # a regular file takes the whole text at once; a signal could still cut a write short
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def read_records(path: Path, problems: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The records of a JSONL log; a line that is not a record is skipped and described in ``problems``."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if (record := parse_record(line)) is not None:
                yield record
            elif problems is not None:
                problems.append(f"{path.name}: line {number} is not a whole JSON record; skipped")


def user_cache_folder() -> Path:
    """``$XDG_CACHE_HOME/dyneval`` (``~/.cache/dyneval``): the user's cache for every run (responses, exported
    models)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dyneval"
