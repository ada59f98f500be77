"""Reading user input files with one clear error per bad record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from runtime.errors import InputError


def jsonl_objects(path: Path, lines: Iterator[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of a JSONL file.

    A line that is not a JSON object raises :class:`InputError` naming the file and record.
    ``lines`` reads already loaded text instead of opening ``path``.
    """
    def numbered(source: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
        for n, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({exc.msg})", file=str(path), record=n) from None
            if not isinstance(value, dict):
                raise InputError("a record must be a JSON object", file=str(path), record=n)
            yield n, value

    if lines is not None:
        yield from numbered(lines)
        return
    with Path(path).open(encoding="utf-8") as fh:
        yield from numbered(fh)
