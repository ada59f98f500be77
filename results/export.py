"""``dyneval --export RUN --format csv|jsonl|parquet``: a finished run's results as tables for a spreadsheet, pandas
or a warehouse.

``units.<format>``: one row per unit, its latest record flattened (nested objects become dotted columns, lists a JSON
text). ``items.<format>``, where the protocol has per-item results inside a unit (JudgeAgent's base and extension
questions, an interview's answers): one row per item with its unit id. Both go to ``RUN/export/``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dyneval.results.view.adapters import adapter, leaves
from dyneval.state.errors import InputError
from dyneval.stores.files import writable
from dyneval.stores.rundir import finished_run

FORMATS: tuple[str, ...] = ("csv", "jsonl", "parquet")


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [1]}`` -> ``{"a.b": 1, "c": "[1]"}``: scalars kept, lists as JSON text."""
    return {
        name: json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, list) else value
        for name, value in leaves(record)
    }


def tables(protocol: str, records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``units`` (each record flattened) and ``items`` (each per-item result of ``protocol`` with its unit id) rows."""
    items_of = adapter(protocol).items
    return {
        "units": [flatten(r) for r in records],
        "items": [flatten({"unit_id": r["unit_id"], **item}) for r in records for item in items_of(r)],
    }


def export_run(ref: str, out: str, fmt: str) -> list[Path]:
    """Write ``units`` (and ``items`` where the protocol has them) of the run ``ref`` (a run folder, or a run id
    under ``out``) in ``fmt``; return the files written. A damaged run, or an ``export`` folder that cannot be
    written, is bad input (``InputError``) and leaves no file of this export behind."""
    if fmt not in FORMATS:
        raise InputError(f"{fmt!r} is not one of {', '.join(FORMATS)}", setting="--format")
    run = finished_run(ref, out, "--export")
    if fmt == "parquet":
        _pyarrow()  # refused before anything is written
    dest = run.path / "export"
    written: dict[Path, Path] = {}  # each file is written beside its place, then moved there once all are written
    found = tables(run.protocol, run.records())  # every record read (a damaged one refused) before a file is made
    with writable(dest, "--export"), cleared(written):
        dest.mkdir(exist_ok=True)
        for name, rows in found.items():
            if name == "items" and not rows:
                continue
            path = dest / f"{name}.{fmt}"
            written[path] = dest / f".{path.name}.{os.getpid()}.tmp"
            WRITERS[fmt](written[path], rows)
        for path, tmp in written.items():
            os.replace(tmp, path)
    return list(written)


@contextlib.contextmanager
def cleared(written: dict[Path, Path]) -> Iterator[None]:
    """Remove the temporary files of ``written`` (place -> temporary file) when the export fails."""
    try:
        yield
    except BaseException:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
        raise


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every column of ``rows`` in order of first appearance."""
    return list(dict.fromkeys(key for row in rows for key in row))


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_columns(rows))
        writer.writeheader()
        writer.writerows(rows)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    """One typed column per field: numbers and booleans keep their type; a column mixing kinds is text."""
    pa = _pyarrow()
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type hints (no py.typed)

    columns = {}
    for name in _columns(rows):
        values = [row.get(name) for row in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds <= {int, float} and kinds or kinds in ({bool}, {str}):
            columns[name] = values
        else:
            columns[name] = [None if v is None else str(v) for v in values]
    pq.write_table(pa.table(columns), path)


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise InputError(
            "parquet needs pyarrow: pip install 'dyneval[parquet]' (or use --format csv or jsonl)", setting="--format"
        ) from None
    return pyarrow


WRITERS = {"csv": _write_csv, "jsonl": _write_jsonl, "parquet": _write_parquet}
