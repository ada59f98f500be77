"""A run directory read into the viewer's payload: metrics, the unit table, and each unit's drill-down.

The unit table's columns come from the records themselves (``results.jsonl``: status, the unit's ``meta`` from
``units.jsonl``, every short scalar field) plus the protocol's own columns (:mod:`runtime.view.adapters`); a
unit's drill-down holds the protocol's sections, every list or mapping field of its record as a table, and every
LLM exchange of the unit in the order of ``events.jsonl``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from dyneval.runtime.view.adapters import Adapter, Section, adapter, dig, leaves, llmeval_answers
from dyneval.stores.files import parse_record, read_records

#: Longest text kept in the page per string (the page stays small; the run's files keep everything).
MAX_TEXT = 20_000
#: Record fields shown elsewhere (columns, usage) or not worth a drill-down table.
_SKIP = {"unit_id", "meta", "status", "usage", "traceback", "wall_s"}
#: Event fields shown per exchange, in this order (plus ``cached`` / ``cache_hit`` when an event has them).
EVENT_FIELDS = ("role", "model", "step", "attempt", "prompt_tokens", "completion_tokens", "latency_s", "queue_s",
                "error")


def clip(value: Any) -> Any:
    """Strings longer than :data:`MAX_TEXT` cut, saying how much of it the run's files still hold."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + f"\n[... {len(value) - MAX_TEXT} more characters in the run's files]"
    if isinstance(value, dict):
        return {k: clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clip(v) for v in value]
    return value


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return list(read_records(path, [])) if path.exists() else []


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def latest_records(run_dir: Path) -> list[dict[str, Any]]:
    """The last record of each unit (a resumed run appends a unit's newer record), in plan order."""
    latest = {r["unit_id"]: r for r in read_jsonl(run_dir / "results.jsonl") if "unit_id" in r}
    order = [u["id"] for u in read_jsonl(run_dir / "units.jsonl") if "id" in u]
    return [latest[i] for i in order if i in latest] + [r for i, r in latest.items() if i not in set(order)]


def _scalar(value: Any) -> bool:
    """A value short enough for a table cell (longer texts stay in the unit's drill-down)."""
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 60)


def _flat(metrics: Any) -> list[list[Any]]:
    """Every metric leaf as a row; a list holding more than short values as JSON text."""
    return [[name, json.dumps(value, default=str) if isinstance(value, list) and not all(map(_scalar, value))
             else value] for name, value in leaves(metrics or {})]


def _denominator(value: Any) -> str:
    if isinstance(value, dict) and "n" in value:
        return f"n={value['n']}" + (f", {value['ungraded']} ungraded" if value.get("ungraded") is not None else "")
    return "" if value is None else f"n={value}"


def headline_metrics(spec: Adapter, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The protocol's headline metrics present in this summary, with definitions and denominators."""
    out = []
    for m in spec.metrics:
        for key, value, n in _expanded(metrics, m.path, m.n):
            if value is not None:
                out.append({"name": m.label.format(key=key), "value": value, "definition": m.definition,
                            "denominator": _denominator(n),
                            "path": m.path if key is None else m.path.replace("*", key)})
    return out


def _expanded(metrics: dict[str, Any], path: str, n: str | None) -> list[tuple[str | None, Any, Any]]:
    """(key, value, denominator) of a metric path, once per key of the mapping a ``*`` stands for (keys may
    hold dots, e.g. model URLs, so they are looked up, never re-split)."""
    if "*" not in path:
        return [(None, dig(metrics, path), dig(metrics, n) if n else None)]

    def at(dotted: str, key: str) -> Any:
        head, _, tail = dotted.partition("*")
        inner = (dig(metrics, head.rstrip(".")) or {}).get(key)
        return dig(inner, tail.lstrip(".")) if tail.strip(".") else inner

    keys = dig(metrics, path.partition("*")[0].rstrip(".")) or {}
    return [(key, at(path, key), at(n, key) if n else None) for key in keys]


def _columns(records: Iterable[dict[str, Any]], spec: Adapter) -> list[str]:
    """The unit table's columns, in one pass over the records: unit, status, the meta keys short in some record,
    the protocol's columns some record has, then the fields short in every record."""
    meta: dict[str, None] = {}
    present: set[str] = set()
    fields: dict[str, bool] = {}  # a field some record has (not None), in order of appearance -> short in every one
    for r in records:
        meta.update((k, None) for k, v in (r.get("meta") or {}).items() if _scalar(v))
        present.update(k for k, f in spec.columns.items() if k not in present and f(r) is not None)
        for k, v in r.items():
            if k not in _SKIP and v is not None:
                fields[k] = fields.get(k, True) and _scalar(v)
    columns = dict.fromkeys(["unit", "status", *meta])
    columns.update((k, None) for k in spec.columns if k in present)
    columns.update((k, None) for k, short in fields.items() if short)
    return [*columns, "calls", "tokens", "wall s"]


def _row(record: dict[str, Any], columns: list[str], spec: Adapter) -> dict[str, Any]:
    usage = record.get("usage") or {}
    values = {"unit": record["unit_id"], "status": record.get("status"), "calls": usage.get("calls"),
              "tokens": (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0),
              "wall s": record.get("wall_s")}
    for name in columns:
        if name in values:
            continue
        if name in spec.columns:
            values[name] = spec.columns[name](record)
        elif name in (record.get("meta") or {}):
            values[name] = record["meta"][name]
        else:
            values[name] = record.get(name)
    return {c: values.get(c) for c in columns}


def _field_sections(record: dict[str, Any]) -> list[Section]:
    """Every list or mapping field of the record as a table; short scalars in one 'fields' table."""
    out: list[Section] = []
    scalars = [[k, v] for k, v in record.items() if k not in _SKIP and not isinstance(v, (dict, list))]
    if scalars:
        out.append({"title": "Record fields", "headers": ["field", "value"], "rows": scalars})
    for key, value in record.items():
        if key in _SKIP or not value or not isinstance(value, (dict, list)):
            continue
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            headers = list(dict.fromkeys(k for v in value for k in v))
            out.append({"title": f"record: {key}", "headers": headers,
                        "rows": [[v.get(h) for h in headers] for v in value]})
        elif isinstance(value, dict):
            out.append({"title": f"record: {key}", "headers": ["key", "value"],
                        "rows": [[k, v] for k, v in value.items()]})
        else:
            out.append({"title": f"record: {key}", "headers": ["value"], "rows": [[v] for v in value]})
    return out


class Texts:
    """Long message texts stored once per page (a system prompt recurs in every exchange of its step);
    a message holds ``{"ref": i}`` into :meth:`items` instead. The texts wait in a temporary file, only their
    digests stay in memory."""

    LONG = 200

    def __init__(self) -> None:
        self._spool = tempfile.TemporaryFile("w+", encoding="utf-8")
        self._index: dict[bytes, int] = {}

    def __call__(self, content: Any) -> Any:
        if not isinstance(content, str) or len(content) < self.LONG:
            return content
        key = hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key not in self._index:
            self._index[key] = len(self._index)
            self._spool.write(json.dumps(content) + "\n")  # ASCII, one line
        return {"ref": self._index[key]}

    def items(self) -> Iterator[str]:
        """The texts in the order of their refs (read once: the file is gone after)."""
        with self._spool:
            self._spool.seek(0)
            for line in self._spool:
                yield json.loads(line)


def _exchange(event: dict[str, Any], texts: Texts) -> dict[str, Any]:
    out = {k: event.get(k) for k in EVENT_FIELDS}
    for flag in ("cached", "cache_hit"):
        if flag in event:
            out["cache hit"] = event[flag]
    out["messages"] = [{"role": m.get("role"), "content": texts(m.get("content"))}
                       for m in event.get("messages") or []]
    out["output"] = event.get("output")
    return out


class _Jsonl:
    """A JSONL run file read by byte offsets: :meth:`scan` notes where each record starts, :meth:`read` reads
    records back when they are needed (lines that are not records are skipped, as :func:`read_jsonl` does)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def scan(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if not self.path.exists():
            return
        offset = 0
        with self.path.open("rb") as fh:
            for line in fh:
                if line.strip() and (record := parse_record(line)) is not None:
                    yield offset, record
                offset += len(line)

    def read(self, offsets: Iterable[int | None]) -> Iterator[dict[str, Any]]:
        """The records at ``offsets`` (``{}`` for ``None``)."""
        with (self.path.open("rb") if self.path.exists() else contextlib.nullcontext()) as fh:
            for offset in offsets:
                if offset is None:
                    yield {}
                    continue
                fh.seek(offset)
                yield json.loads(fh.readline())


class _Units:
    """The view's units, only their places in the run files in memory: the last record of each unit (plan order,
    then units not in the plan), then the planned units without a record ("not finished")."""

    def __init__(self, run_dir: Path) -> None:
        self.results, self.plan = _Jsonl(run_dir / "results.jsonl"), _Jsonl(run_dir / "units.jsonl")
        self.latest = {r["unit_id"]: offset for offset, r in self.results.scan() if "unit_id" in r}
        self.planned = {u["id"]: offset for offset, u in self.plan.scan() if "id" in u}
        self.done = [i for i in self.planned if i in self.latest] + [i for i in self.latest if i not in self.planned]
        self.left = [i for i in self.planned if i not in self.latest]

    def __iter__(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(record, plan line)`` pairs; a record written before its unit's meta was kept gets the plan's meta."""
        plan = self.plan.read(self.planned.get(i) for i in self.done)
        for record, unit in zip(self.results.read(self.latest[i] for i in self.done), plan):
            record.setdefault("meta", unit.get("meta") or {})
            yield record, unit
        for i, unit in zip(self.left, self.plan.read(self.planned[i] for i in self.left)):
            yield {"unit_id": i, "status": "not finished", "meta": unit.get("meta") or {}}, unit


def run_parts(run_dir: Path, extra_sections: dict[str, list[Section]] | None = None) -> dict[str, Any]:
    """Everything ``view.html`` shows of one run, as JSON-ready data; the units and the long texts are iterators
    that read the run's files a unit at a time, so :func:`runtime.view.page.write_page` writes a page of any size
    in bounded memory (an exchange's place in ``events.jsonl`` is kept per unit, not the exchange)."""
    run_dir = Path(run_dir)
    summary = read_json(run_dir / "summary.json")
    config = read_json(run_dir / "config.json")
    protocol = summary.get("protocol") or config.get("protocol") or ""
    spec = adapter(protocol)
    if extra_sections is None and protocol == "llmeval":
        extra_sections = llmeval_answers(run_dir, config, latest_records(run_dir))
    units = _Units(run_dir)
    log, texts = _Jsonl(run_dir / "events.jsonl"), Texts()
    places: dict[str, list[int]] = {}
    for offset, e in log.scan():  # texts numbered in the log's order
        places.setdefault(str(e.get("unit")), []).append(offset)
        for m in e.get("messages") or []:
            texts(m.get("content"))
    columns = _columns((r for r, _ in units), spec)

    def exchanges(unit: str) -> list[dict[str, Any]]:
        return [_exchange(e, texts) for e in log.read(places.get(unit, []))]

    def unit_rows() -> Iterator[dict[str, Any]]:
        for r, unit in units:
            yield clip({"id": r["unit_id"], "row": _row(r, columns, spec), "input": unit.get("input"),
                        "error": r.get("error"),
                        "sections": [*spec.sections(r), *(extra_sections or {}).get(r["unit_id"], []),
                                     *_field_sections(r)],
                        "events": exchanges(r["unit_id"])})

    metrics = summary.get("metrics") or {}
    return {**clip({
        "kind": "run",
        "title": f"{protocol} run {run_dir.name}",
        "protocol": protocol,
        "run_id": run_dir.name,
        "notes": [n for n in [summary.get("smoke_test_warning"),
                              _interrupted_note(summary.get("interrupted"))] if n],
        "overview": [["units", summary.get("units")],
                     ["statuses", ", ".join(f"{k}={v}" for k, v in sorted((summary.get("status_counts")
                                                                           or {}).items()))],
                     ["ungraded verdicts", summary.get("ungraded_verdicts")],
                     *[[f"model: {role}", model] for role, model in (summary.get("models") or {}).items()],
                     *[[f"LLM {k}", v] for k, v in (summary.get("usage") or {}).items()]],
        "headline": headline_metrics(spec, metrics),
        "metrics": _flat(metrics),
        "columns": columns}),
        "units": unit_rows(), "outside": clip(exchanges("-")), "texts": map(clip, texts.items())}


def run_payload(run_dir: Path, extra_sections: dict[str, list[Section]] | None = None) -> dict[str, Any]:
    """Everything ``view.html`` shows of one run, as JSON-ready data (:func:`run_parts` with its lists whole)."""
    return {k: list(v) if isinstance(v, Iterator) else v for k, v in run_parts(run_dir, extra_sections).items()}


def _interrupted_note(interrupted: dict[str, Any] | None) -> str | None:
    if not interrupted:
        return None
    return (f"INTERRUPTED: a partial run; {interrupted.get('unfinished_units')} units are not finished. "
            f"Continue with: {interrupted.get('resume')}")
