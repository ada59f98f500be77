"""The one data layer: every user file a protocol reads (datasets, benchmarks, banks, knowledge bases).

Reading (:func:`read_records`, :func:`read_text`):

* Formats by suffix: ``.jsonl``/``.ndjson`` (one JSON object per line); ``.json`` (an array of objects, an
  object per line, or one object mapping ids to record objects, as PubMedQA ships); ``.csv``/``.tsv``
  (the standard :mod:`csv` module on text opened with ``newline=""``, so quoted fields keep their commas,
  tabs and line breaks byte-exact, CRLF included; a ``.csv`` whose header has semicolons and no comma is
  semicolon-delimited); ``.parquet`` only when ``pyarrow`` is installed.
* Text is strict UTF-8; a leading byte-order mark is dropped (a BOM-prefixed CSV header maps correctly).
  Non-UTF-8 bytes (UTF-16 with or without a byte-order mark included), compressed files (gzip, ZIP, xz,
  zstd), a NUL byte, empty files, files without records and a key given twice in one JSON object raise
  :class:`InputError` naming the file, the line or byte offset where it applies, and the flag.
* JSON may nest lists and objects at most :data:`MAX_NESTING` levels deep (:func:`parse_bounded`, also used for
  config files): deeper is refused naming the record and its field (the record only where the parser's own
  recursion gave out first, near 1,000 levels); the check itself recurses nowhere.
* Record numbers in messages: the line number for JSON Lines, the 1-based position in a JSON array or a
  Parquet file, the data row (header not counted) in CSV/TSV, the id for an id-keyed JSON object.

Field mapping (:class:`FieldMap`, the ``--fields`` flag, after inspect_ai's ``FieldSpec``): canonical name
= the user's column, e.g. ``question=Question,answer=Final Answer``. Unknown canonical names are rejected
with the valid ones listed; names in ``joinable`` may join several columns with ``+``
(``references=para_a+para_b``). Unmapped names read the column of the same name.

Typed validation (:meth:`FieldMap.validate`): the protocol's pydantic model of its canonical fields, using
these value types (explicit rules, never a silent ``str()``):

* :data:`Text` - a string only (questions, solutions, documents). A number, boolean, object or list is an
  error: a number where a question is expected is a broken record, not a question.
* :data:`Scalar` - a string, a number or a boolean (answers, ids, levels): ``42`` is a legitimate math
  answer. Numbers and booleans become their JSON spelling (``42``, ``2.5``, ``true``); an object or a list
  is an error.
* :data:`Texts` - a list of scalars (reference paragraphs): a single string is one item, nested lists are
  flattened in order, nulls are skipped; an object anywhere is an error.

Errors: :class:`InputError` with ``file=``, ``record=``, ``field=`` (see :func:`input_error`; a record's
field is the user's column name, and the message says ``(as question)`` when ``--fields`` renamed it). A
missing field lists the fields the record does have.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from dyneval.state.errors import InputError
from dyneval.stores.library_logs import HUGGING_FACE, through_root_logger

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
TEXT_SUFFIXES = (".txt", ".md")
#: How deep lists and objects may nest in one JSON value (a JSONL line, a .json file, a config file). Real records
#: nest a few levels; far deeper is a broken generator, and Python's TOML and YAML parsers overflow at a few
#: hundred levels, its JSON parser near a thousand.
MAX_NESTING = 100
#: Leading bytes of compressed files (none can start UTF-8 text): such a file must be decompressed first.
_COMPRESSED = {
    b"\x1f\x8b": "gzip-compressed",
    b"PK\x03\x04": "a ZIP archive",
    b"\xfd7zXZ\x00": "xz-compressed",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
}
M = TypeVar("M", bound=BaseModel)


def input_error(
    message: str,
    *,
    flag: str,
    file: str | Path | None = None,
    record: int | str | None = None,
    field: str | None = None,
) -> InputError:
    """The one-line :class:`InputError` of this layer.

    An error about a whole file or flag names the flag as its field (so a value that came from a config file or
    an environment variable can be re-blamed on it); a record's error ends with the flag in brackets.
    """
    name = str(file) if file is not None else None
    if record is None and field is None:
        return InputError(message, file=name, field=flag)
    return InputError(f"{message} [{flag}]", file=name, record=record, field=field)


# -- value types -------------------------------------------------------------------------------


def value_kind(value: Any) -> str:
    """How a message names a value it refuses: its kind and a short JSON rendering (``a list ["a", "b"]``)."""
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"a non-finite number ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, dict):
        return "an object " + _short(value)
    if isinstance(value, (list, tuple)):
        return "a list " + _short(value)
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise PydanticCustomError("text_type", "expected text, got {kind}", {"kind": value_kind(value)})


def scalar_text(value: Any) -> str:
    """A string as is; a number or boolean in its JSON spelling; anything else is an error."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return json.dumps(value)
    raise PydanticCustomError("scalar_type", "expected text or a number, got {kind}", {"kind": value_kind(value)})


def _texts(value: Any) -> list[str]:
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif v is not None:
            try:
                out.append(scalar_text(v))
            except PydanticCustomError:
                raise PydanticCustomError(
                    "texts_type", "expected text or a list of texts; found {kind}", {"kind": value_kind(v)}
                ) from None

    walk(value)
    return out


Text = Annotated[str, BeforeValidator(_text)]
Scalar = Annotated[str, BeforeValidator(scalar_text)]
Texts = Annotated[list[str], BeforeValidator(_texts)]


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One record of a user file: ``n`` is its number in messages (see the module docstring)."""

    file: str
    n: int | str
    data: dict[str, Any]
    flag: str = "--data"

    def error(self, message: str, field: str | None = None) -> InputError:
        return input_error(message, flag=self.flag, file=self.file, record=self.n, field=field)

    def found(self) -> str:
        """The fields this record has (for "missing field" messages)."""
        names = [str(k) for k, v in self.data.items() if not _blank(v)]
        return ", ".join(names) if names else "no non-empty field"


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _utf16_without_bom(data: bytes) -> bool:
    """Text saved as UTF-16 without a byte-order mark: its first characters are ASCII, each beside a NUL byte."""
    head = data[: min(len(data), 64) // 2 * 2]
    return len(head) >= 4 and any(not any(head[i::2]) and all(head[1 - i :: 2]) for i in (0, 1))


def _decode(data: bytes, path: Path, flag: str) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise input_error(
            "UTF-16 text (byte-order mark at byte offset 0); save the file as UTF-8", flag=flag, file=path
        )
    if _utf16_without_bom(data):
        raise input_error(
            "UTF-16 text (a NUL byte beside each character, no byte-order mark); save the file as UTF-8",
            flag=flag,
            file=path,
        )
    packed = next((kind for magic, kind in _COMPRESSED.items() if data.startswith(magic)), None)
    if packed:
        raise input_error(f"binary file ({packed}), not text; decompress it first", flag=flag, file=path)
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    nul = data.find(b"\x00", start)
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise input_error(
            f"NUL byte at line {line} (byte offset {nul}): a binary file, or text with a stray NUL to remove",
            flag=flag,
            file=path,
        )
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise input_error(
            f"not UTF-8 text (byte 0x{data[start + exc.start]:02x} at byte offset "
            f"{start + exc.start}); save the file as UTF-8",
            flag=flag,
            file=path,
        ) from None


def _existing(path: str | Path, flag: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise input_error("file not found", flag=flag, file=p)
    if not p.is_file():
        raise input_error("not a file", flag=flag, file=p)
    return p


def read_text(path: str | Path, *, flag: str) -> str:
    """The whole text of a UTF-8 file (BOM dropped, line endings kept); empty, binary or non-UTF-8 = error."""
    p = _existing(path, flag)
    text = _decode(p.read_bytes(), p, flag)
    if not text.strip():
        raise input_error("file is empty", flag=flag, file=p)
    return text


def read_records(path: str | Path, *, flag: str = "--data") -> list[Record]:
    """Every record of a JSONL / JSON / CSV / TSV / Parquet file, as :class:`Record` (at least one)."""
    return list(iter_records(path, flag=flag))


def iter_records(path: str | Path, *, flag: str = "--data") -> Iterator[Record]:
    """:func:`read_records` a record at a time, so that a caller that keeps a part of each record never holds
    every record whole (a 20,000-problem ATAD benchmark parsed at once was most of the evaluation's peak
    memory); the file's type is checked before the first record, an empty file after the last."""
    p = _existing(path, flag)
    kind = FORMATS.get(p.suffix.lower())
    if kind is None:
        raise input_error(
            f"unsupported file type {p.suffix or '(no suffix)'!r}; use {', '.join(FORMATS)}", flag=flag, file=p
        )
    if kind == "parquet":
        records = _parquet(p, flag)
    else:
        text = read_text(p, flag=flag)
        if kind in ("csv", "tsv"):
            records = _delimited(text, p, flag, "\t" if kind == "tsv" else _csv_delimiter(text))
        elif kind == "json" and text.lstrip()[:1] in ("[", "{") and not _object_per_line(text):
            records = _json_document(text, p, flag)
        else:
            records = _json_lines(text, p, flag)
        del text  # the generators hold it while they read
    empty = True
    for record in records:
        empty = False
        yield record
    if empty:
        raise input_error("file holds no records", flag=flag, file=p)


def hf_records(dataset_id: str, split: str) -> list[Record]:
    """Every record of a Hugging Face dataset ``NAME[:CONFIG]`` (a hub id from the local cache, or a local folder
    of data files), as :class:`Record` (at least one). Needs the ``[hub]`` extra (``datasets``)."""
    try:
        import datasets
    except ImportError:
        raise input_error(
            "reading a Hugging Face dataset needs the [hub] extra: pip install 'dyneval[hub]'", flag="--hf-dataset"
        ) from None
    datasets.disable_progress_bars()  # its "Generating split" bars: not in a run's display
    through_root_logger(HUGGING_FACE)  # its records: to the run's library.log (runtime.library_output)
    name, _, config = dataset_id.partition(":")
    try:
        ds = datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the user's input to fix
        message = " ".join(str(exc).split())
        raise input_error(f"cannot load {dataset_id!r} split {split!r}: {message}", flag="--hf-dataset") from None
    records = [Record(f"hf:{dataset_id}", n, dict(r), "--hf-dataset") for n, r in enumerate(ds, 1)]
    if not records:
        raise input_error("dataset holds no records", flag="--hf-dataset", file=f"hf:{dataset_id}")
    return records


def _object_per_line(text: str) -> bool:
    """A ``.json`` file whose first line is a complete JSON value is read as one object per line."""
    first = text.lstrip().split("\n", 1)[0].strip()
    try:
        parse_bounded(json.loads, first)
    except (json.JSONDecodeError, TooDeep):
        return False
    return first.startswith("{") and first != text.strip()


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a key given twice in one object would silently lose a value."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class TooDeep(ValueError):
    """Lists and objects nested deeper than :data:`MAX_NESTING`. ``path``: the first two keys or 0-based indexes
    on the way to the first container too deep; empty when the parser's own recursion overflowed first."""

    def __init__(self, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(f"nested deeper than {MAX_NESTING} levels of lists and objects")
        self.path = path


def check_nesting(value: Any) -> None:
    """:class:`TooDeep` when lists and dicts nest deeper than :data:`MAX_NESTING` in ``value`` (the value itself
    is level 1); an iterative walk, so no depth and no cycle (YAML aliases) can overflow it."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_NESTING:
            raise TooDeep(path)
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, path if len(path) == 2 else (*path, key)))


def parse_bounded(parse: Callable[[str], Any], text: str) -> Any:
    """``parse(text)`` within the nesting limit: :class:`TooDeep` when the value nests too deep, or when the
    parser's recursion overflows first (JSON past ~1,000 levels, TOML and YAML past a few hundred)."""
    try:
        value = parse(text)
    except RecursionError:
        raise TooDeep() from None
    check_nesting(value)
    return value


_loads = partial(json.loads, object_pairs_hook=_unique_keys)


def _json(text: str) -> Any:
    """JSON within the nesting limit (a text with too few brackets to reach it, most lines, skips the walk)."""
    return _loads(text) if text.count("[") + text.count("{") <= MAX_NESTING else parse_bounded(_loads, text)


def _too_deep(exc: TooDeep, p: Path, flag: str, n: int | str | None = None) -> InputError:
    """Where a JSON value nests too deep: record ``n`` (a JSONL line), else the record the path of a JSON file
    starts with (its 1-based position or id); the field is the record's key on the path."""
    path = list(exc.path)
    if n is None and path:
        first = path.pop(0)
        n = first + 1 if isinstance(first, int) else first
    field = path[0] if path and isinstance(path[0], str) else None
    return input_error(str(exc), flag=flag, file=p, record=n, field=field)


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` (universal newlines, as ``io.StringIO(text, newline=None)`` reads them), one at a
    time without their ends: a StringIO holds four bytes per character (74 MB for an 18 MB benchmark)."""
    start = 0
    for end in _NEWLINE.finditer(text):
        yield text[start : end.start()]
        start = end.end()
    if start < len(text):
        yield text[start:]


def _json_lines(text: str, p: Path, flag: str) -> Iterator[Record]:
    for n, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        try:
            value = _json(line)
        except json.JSONDecodeError as exc:
            raise input_error(f"not valid JSON ({exc.msg}, column {exc.colno})", flag=flag, file=p, record=n) from None
        except _DuplicateKey as exc:
            raise input_error("key given twice in one object", flag=flag, file=p, record=n, field=str(exc)) from None
        except TooDeep as exc:
            raise _too_deep(exc, p, flag, n) from None
        if not isinstance(value, dict):
            raise input_error(f"a record must be a JSON object, got {value_kind(value)}", flag=flag, file=p, record=n)
        yield Record(str(p), n, value, flag)


def _json_document(text: str, p: Path, flag: str) -> Iterator[Record]:
    try:
        data = _json(text)
    except json.JSONDecodeError as exc:
        raise input_error(
            f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})", flag=flag, file=p
        ) from None
    except _DuplicateKey as exc:
        raise input_error(f"key {str(exc)!r} given twice in one object", flag=flag, file=p) from None
    except TooDeep as exc:
        raise _too_deep(exc, p, flag) from None
    if isinstance(data, list):
        for n, value in enumerate(data, 1):
            if not isinstance(value, dict):
                raise input_error(
                    f"a record must be a JSON object, got {value_kind(value)}", flag=flag, file=p, record=n
                )
            yield Record(str(p), n, value, flag)
        return
    if data and all(isinstance(v, dict) for v in data.values()):
        for key, value in data.items():
            yield Record(str(p), key, {"id": key, **value}, flag)
        return
    raise input_error(
        "a JSON file must hold an array of record objects, one object per line, or an object "
        "mapping ids to record objects",
        flag=flag,
        file=p,
    )


def _csv_delimiter(text: str) -> str:
    """``;`` for a CSV whose header line has semicolons and no comma (spreadsheets in locales with a decimal comma
    write them so, and MMLU-Redux ships its CSVs so), else ``,``. A wrong guess cannot pass unseen: the header's
    columns are then not the names ``--fields`` and the protocol's fields look for."""
    header = text.split("\n", 1)[0]
    return ";" if ";" in header and "," not in header else ","


def _delimited(text: str, p: Path, flag: str, delimiter: str) -> Iterator[Record]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise input_error(
                f"duplicate column name(s) {', '.join(map(repr, dupes))} in the header",
                flag=flag,
                file=p,
                record="header",
            )
        for n, row in enumerate(reader, 1):
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise input_error(
                    f"{len(row)} values but the header has {len(header)} columns "
                    f"({'check quoting' if len(row) > len(header) else 'missing values'})",
                    flag=flag,
                    file=p,
                    record=n,
                )
            yield Record(str(p), n, dict(zip(header, row)), flag)
    except csv.Error as exc:
        raise input_error(
            f"malformed {'TSV' if delimiter == chr(9) else 'CSV'} ({exc}) near line {reader.line_num}",
            flag=flag,
            file=p,
        ) from None


def _parquet(p: Path, flag: str) -> Iterator[Record]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type information
    except ImportError:
        raise input_error(
            "reading .parquet needs pyarrow (pip install pyarrow), or convert the file to JSONL or CSV",
            flag=flag,
            file=p,
        ) from None
    try:
        rows = pq.read_table(p).to_pylist()
    except Exception as exc:  # noqa: BLE001 - any reader failure is the user's file to fix
        raise input_error(f"not a readable Parquet file ({exc})", flag=flag, file=p) from None
    for n, row in enumerate(rows, 1):
        yield Record(str(p), n, row, flag)


# -- field mapping -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldMap:
    """Canonical field name -> the user's column(s) (``--fields``); see the module docstring."""

    sources: Mapping[str, tuple[str, ...]]
    flag: str = "--fields"
    joinable: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(
        cls, spec: str | None, canonical: Sequence[str], *, flag: str = "--fields", joinable: Collection[str] = ()
    ) -> FieldMap:
        """``"question=Q,answer=A"`` -> a map; unknown names, empty or repeated mappings are errors."""
        sources: dict[str, tuple[str, ...]] = {name: (name,) for name in canonical}
        given: set[str] = set()
        for part in (p.strip() for p in (spec or "").split(",")):
            if not part:
                continue
            key, sep, value = (s.strip() for s in part.partition("="))
            cols = tuple(v.strip() for v in value.split("+") if v.strip()) if sep else ()
            if key not in canonical:
                raise input_error(
                    f"unknown field name {key!r} in {part!r}; valid names: {', '.join(canonical)}", flag=flag
                )
            if not cols:
                raise input_error(f"bad mapping {part!r}; use NAME=COLUMN", flag=flag)
            if len(cols) > 1 and key not in joinable:
                raise input_error(
                    f"{key!r} takes one column, got {value!r}"
                    + (f" (only {', '.join(sorted(joinable))} join columns with +)" if joinable else ""),
                    flag=flag,
                )
            if key in given:
                raise input_error(f"{key!r} is mapped twice", flag=flag)
            given.add(key)
            sources[key] = cols
        return cls(sources=sources, flag=flag, joinable=frozenset(joinable))

    def label(self, name: str) -> str:
        """How messages name a canonical field: the user's column(s), ``+``-joined."""
        return "+".join(self.sources[name])

    def error(self, rec: Record, name: str, message: str) -> InputError:
        """An error about canonical field ``name`` of ``rec`` (says which field a renamed column stands for)."""
        used = "" if self.sources[name] == (name,) else f"(as {name}) "
        return rec.error(used + message, field=self.label(name))

    def values(self, rec: Record) -> dict[str, Any]:
        """Canonical name -> value for the fields the record has (blank values count as absent).

        A joinable field mapped to several columns gives the list of their values in column order (``None``
        for a column the record lacks), so a blank column is never silently skipped.
        """
        out: dict[str, Any] = {}
        for name, cols in self.sources.items():
            if all(_blank(rec.data.get(c)) for c in cols):
                continue
            out[name] = [rec.data.get(c) for c in cols] if len(cols) > 1 else rec.data[cols[0]]
        return out

    def missing(self, rec: Record, name: str, why: str | None = None) -> InputError:
        """The error for a required field the record lacks or leaves empty (``missing`` / ``empty``, then ``why``),
        listing the fields it has."""
        absent = not any(c in rec.data for c in self.sources[name])
        state = ("missing" if absent else "empty") + (f" ({why})" if why else "")
        hint = f"; map it with {self.flag} {name}=COLUMN" if absent and name not in self.given else ""
        return self.error(rec, name, f"{state}; this record has: {rec.found()}{hint}")

    @property
    def given(self) -> set[str]:
        return {n for n, cols in self.sources.items() if cols != (n,)}

    def validate(self, schema: type[M], rec: Record, values: Mapping[str, Any] | None = None) -> M:
        """``schema`` filled from the record's mapped values (or ``values``); the first error as InputError."""
        values = self.values(rec) if values is None else values
        try:
            return schema.model_validate(dict(values))
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else None
            if name is not None and name in self.sources:
                if err["type"] == "missing":
                    raise self.missing(rec, name) from None
                raise self.error(rec, name, err["msg"]) from None
            raise rec.error(err["msg"], field=name) from None
