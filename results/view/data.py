"""A run directory read into the viewer's payload: metrics, the unit table, and each unit's drill-down.

The run is read through :class:`stores.rundir.RunDir`. The unit table's columns are the unit id, its outcome
(the protocol's outcome columns from :mod:`results.view.adapters`, then record fields named like an outcome), its
status, every other short scalar field of the records, its usage, and last the unit's ``meta`` keys from the plan
(hidden until chosen in the page's column chooser). A unit's drill-down holds the protocol's sections, every list
or mapping field of its record as a table, and every LLM exchange of the unit in the order of ``events.jsonl``.
No absolute path reaches the page (:mod:`results.view.paths`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dyneval.results.state_checks import state_check_headlines
from dyneval.results.trials import trial_headlines
from dyneval.results.view.adapters import adapter, dig, interval_of, leaves
from dyneval.results.view.paths import Relative
from dyneval.state.viewer import Adapter, Section
from dyneval.stores.rundir import EVENTS, NOT_FINISHED, RunDir
from dyneval.stores.runfiles import SummaryFile

#: Longest text kept in the page per string (the page stays small; the run's files keep everything).
MAX_TEXT = 20_000
#: Record fields shown elsewhere (columns, usage) or not worth a drill-down table.
_SKIP = {"unit_id", "meta", "status", "usage", "traceback", "wall_s"}
#: Record fields that are a unit's outcome, shown right after the protocol's own outcome columns.
OUTCOME_FIELDS = ("verdict", "correct", "score", "stars")
#: The usage columns, after the record's fields.
USAGE = ("calls", "tokens", "wall s")
#: Event fields shown per exchange, in this order (plus ``cached`` / ``cache_hit`` when an event has them).
EVENT_FIELDS = (
    "role",
    "model",
    "step",
    "attempt",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "queue_s",
    "error",
)


def clip(text: str) -> str:
    """A text longer than :data:`MAX_TEXT` cut, saying how much of it the run's files still hold."""
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters in the run's files]"
    return text


def _scalar(value: Any) -> bool:
    """A value short enough for a table cell (longer texts stay in the unit's drill-down)."""
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 60)


def _flat(metrics: Any) -> list[list[Any]]:
    """Every metric leaf as a row; a list holding more than short values as JSON text."""
    return [
        [name, json.dumps(value, default=str) if isinstance(value, list) and not all(map(_scalar, value)) else value]
        for name, value in leaves(metrics or {})
    ]


def _denominator(value: Any) -> str:
    if isinstance(value, dict) and "n" in value:
        return f"n={value['n']}" + (f", {value['ungraded']} ungraded" if value.get("ungraded") is not None else "")
    return "" if value is None else f"n={value}"


def headline_metrics(spec: Adapter, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The protocol's headline metrics present in this summary, with definitions, denominators and the 95 %
    intervals the run wrote; after each judge-based one that ``--calibration`` corrected, its judge-calibrated row
    (:func:`calibration_row`)."""
    out = []
    corrected = _calibrated(metrics)
    for m in spec.metrics:
        for key, value, n in _expanded(metrics, m.path, m.n):
            if value is not None:
                path = m.path if key is None else m.path.replace("*", key)
                entry = _entry_name(metrics, m.path, key)
                row = {
                    "name": m.label.format(key=key, name=entry),
                    "value": value,
                    "definition": m.definition,
                    "denominator": _denominator(n),
                    "path": path,
                    "interval": interval_of(metrics, path),  # {"low", "high", "n", "method", ...} or None
                    "metric": m.path,  # as declared (a * path unexpanded)
                    "entry": entry,  # what the * stands for (a model), None without one
                }
                out.append(row)
                if path in corrected:
                    out.append(calibration_row(metrics["judge_calibration"], path, row))
    for path, found in corrected.items():
        if path not in {row["path"] for row in out} and found.get("raw"):
            raw = found["raw"]
            row = {
                "name": f"{found['name']}: raw",
                "value": raw["estimate"],
                "definition": "share of the answers the judge decided that it judged correct",
                "denominator": f"{raw['n']} judged answers",
                "path": f"judge_calibration.{path}",
                "interval": raw,
                "metric": f"judge_calibration.{path}",
                "entry": None,
            }
            out += [row, calibration_row(metrics["judge_calibration"], path, row)]
    return out + trial_headlines(metrics) + state_check_headlines(metrics)


def _calibrated(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Metric path -> its ``--calibration`` entry (:mod:`results.calibration.run`); a run calibrated before every
    headline metric was (one share of the judged answers) gives that one."""
    cal = metrics.get("judge_calibration") or {}
    if "metrics" in cal:
        return dict(cal["metrics"])
    if "calibrated" in cal:
        return {cal["metric"]: {"name": cal["metric"], "raw": cal["raw"], "calibrated": cal["calibrated"]}}
    return {}


def calibration_row(cal: dict[str, Any], path: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The judge-calibrated row of the metric at ``path`` (the row ``raw`` shows it as the run reported it): its
    value and interval, or why it is not corrected; the judge's agreement with the labels in the definition."""
    found = _calibrated({"judge_calibration": cal})[path]["calibrated"]
    agree = cal["agreement"]
    kappa = (
        f", Cohen's kappa {agree['kappa']:.2f} [{agree['kappa_low']:.2f}, {agree['kappa_high']:.2f}]"
        if agree.get("kappa") is not None
        else ""
    )
    rates = "".join(
        f", {name} {agree[key]:.2f}" for name, key in (("Se", "sensitivity"), ("Sp", "specificity")) if agree.get(key)
    )
    agreement = (
        f"the judge ({cal['judge']}) agrees with {agree['labels']} human labels on {agree['share']:.0%} of them"
        f"{kappa}{rates}"
    )
    labels = found["labels"]
    corrected = found.get("estimate") is not None
    how = cal.get(
        "method", "Rogan-Gladen correction, bias-corrected percentile bootstrap over units and labels jointly"
    )
    return {
        "name": f"{raw['name'].removesuffix(': raw')}: judge-calibrated ({labels} labels)",
        "value": found["estimate"] if corrected else f"not corrected: {found.get('note')}",
        "definition": (
            f"the row above corrected for the judge's error measured on the labels ({how}); its interval "
            f"includes the judge's error; {agreement}"
            if corrected
            else f"not corrected: {found.get('note')}; {agreement}"
        ),
        "denominator": f"{raw['denominator']}, {labels} labelled",
        "path": f"judge_calibration.{path}.calibrated",
        "metric": f"judge_calibration.{path}.calibrated",
        "entry": None,
        "interval": {**found, "n": labels, "method": "joint bootstrap over units and labels"} if corrected else None,
    }


def _member(mapping: Any, key: str) -> Any:
    """``mapping[key]``; None where there is no such key or ``mapping`` is no mapping."""
    return mapping.get(key) if isinstance(mapping, dict) else None


def _entry_name(metrics: dict[str, Any], path: str, key: str | None) -> str | None:
    """How a person knows the entry a ``*`` stands for: its ``name`` (judgecheck: a judge's model), else its key."""
    entry = _member(dig(metrics, path.partition("*")[0].rstrip(".")), key) if key is not None else None
    return str(entry.get("name", key)) if isinstance(entry, dict) else key


def _expanded(metrics: dict[str, Any], path: str, n: str | None) -> list[tuple[str | None, Any, Any]]:
    """(key, value, denominator) of a metric path, once per key of the mapping a ``*`` stands for (keys may
    hold dots, e.g. model URLs, so they are looked up, never re-split)."""
    if "*" not in path:
        return [(None, dig(metrics, path), dig(metrics, n) if n else None)]

    def at(dotted: str, key: str) -> Any:
        head, _, tail = dotted.partition("*")
        inner = _member(dig(metrics, head.rstrip(".")), key)
        return dig(inner, tail.lstrip(".")) if tail.strip(".") else inner

    keys = dig(metrics, path.partition("*")[0].rstrip("."))
    return [(key, at(path, key), at(n, key) if n else None) for key in keys] if isinstance(keys, dict) else []


def _columns(records: Iterable[dict[str, Any]], spec: Adapter) -> tuple[list[str], list[str]]:
    """The unit table's columns and those hidden until chosen, in one pass over the records: the unit id, the
    protocol's outcome columns some record has, the record fields named like an outcome, the status, the other
    fields short in every record, the usage, then the meta keys short in some record (hidden)."""
    meta: dict[str, None] = {}
    present: set[str] = set()
    fields: dict[str, bool] = {}  # a field some record has (not None), in order of appearance -> short in every one
    for r in records:
        meta.update((k, None) for k, v in (r.get("meta") or {}).items() if _scalar(v))
        present.update(k for k, f in spec.columns.items() if k not in present and f(r) is not None)
        for k, v in r.items():
            if k not in _SKIP and k not in spec.replaces and v is not None:
                fields[k] = fields.get(k, True) and _scalar(v)
    lead = [k for k in spec.columns if k in present] + [k for k in OUTCOME_FIELDS if fields.get(k)]
    columns = dict.fromkeys(["unit", *lead, "status"])
    columns.update((k, None) for k, short in fields.items() if short)
    columns.update(dict.fromkeys(USAGE))
    hidden = [k for k in meta if k not in columns]
    return [*columns, *hidden], hidden


def _row(record: dict[str, Any], columns: list[str], spec: Adapter) -> dict[str, Any]:
    usage = record.get("usage") or {}
    values = {
        "unit": record["unit_id"],
        "status": record.get("status"),
        "calls": usage.get("calls"),
        "tokens": (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0),
        "wall s": record.get("wall_s"),
    }
    for name in columns:
        if name in values:
            continue
        if name in spec.columns:
            values[name] = spec.columns[name](record)
        elif name in record:
            values[name] = record[name]
        else:
            values[name] = (record.get("meta") or {}).get(name)
    return {c: values.get(c) for c in columns}


def _field_sections(record: dict[str, Any], spec: Adapter) -> list[Section]:
    """Every list or mapping field of the record as a table; short scalars in one 'fields' table (the fields the
    protocol's columns and sections show under another name left out)."""
    out: list[Section] = []
    skip = _SKIP | set(spec.replaces)
    scalars = [[k, v] for k, v in record.items() if k not in skip and not isinstance(v, (dict, list))]
    if scalars:
        out.append({"title": "Record fields", "headers": ["field", "value"], "rows": scalars})
    for key, value in record.items():
        if key in skip or not value or not isinstance(value, (dict, list)):
            continue
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            headers = list(dict.fromkeys(k for v in value for k in v))
            out.append(
                {"title": f"record: {key}", "headers": headers, "rows": [[v.get(h) for h in headers] for v in value]}
            )
        elif isinstance(value, dict):
            out.append(
                {"title": f"record: {key}", "headers": ["key", "value"], "rows": [[k, v] for k, v in value.items()]}
            )
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
    out["messages"] = [{"role": m.get("role"), "content": texts(m.get("content"))} for m in event.get("messages") or []]
    out["output"] = event.get("output")
    agent = event.get("agent")
    if agent:  # an agent target's turn (runtime.agents.chat): its thread, what it was sent, what it emitted
        out["agent"] = {
            "thread_id": agent.get("thread_id"),
            "thread": agent.get("thread"),
            "usage": agent.get("usage"),
            "sent": texts(agent.get("sent")),
            "emitted": agent.get("emitted") or [],
        }
    return out


def run_parts(run_dir: Path, extra_sections: dict[str, list[Section]] | None = None) -> dict[str, Any]:
    """Everything ``view.html`` shows of one run, as JSON-ready data; the units and the long texts are iterators
    that read the run's files a unit at a time, so :func:`results.view.page.write_page` writes a page of any size
    in bounded memory (an exchange's place in ``events.jsonl`` is kept per unit, not the exchange)."""
    run = RunDir(run_dir)
    summary, config = run.summary() or SummaryFile(), run.config()
    protocol = config.protocol
    spec = adapter(protocol)
    if extra_sections is None and spec.run_sections is not None:
        extra_sections = spec.run_sections(run.path, config, run.records())
    units = run.units()
    relative = Relative(run.path)

    def shown(value: Any) -> Any:
        return relative(value, clip)

    def pairs() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(record, plan line)``; a record written before its unit's meta was kept gets the plan's meta; a
        planned unit without a record is "not finished"."""
        for record, unit in units.done():
            record.setdefault("meta", unit.get("meta") or {})
            yield record, unit
        for unit in units.unfinished():
            yield {"unit_id": unit["id"], "status": NOT_FINISHED, "meta": unit.get("meta") or {}}, unit

    log, texts = run.file(EVENTS), Texts()
    places: dict[str, list[int]] = {}
    for offset, e in log.scan():  # texts numbered in the log's order
        places.setdefault(str(e.get("unit")), []).append(offset)
        for m in e.get("messages") or []:
            texts(m.get("content"))
    columns, hidden = _columns((r for r, _ in pairs()), spec)

    def exchanges(unit: str) -> list[dict[str, Any]]:
        return [_exchange(e, texts) for e in log.read(places.get(unit, []))]

    def unit_rows() -> Iterator[dict[str, Any]]:
        for r, unit in pairs():
            yield shown(
                {
                    "id": r["unit_id"],
                    "row": _row(r, columns, spec),
                    "input": unit.get("input"),
                    "error": r.get("error"),
                    "sections": [
                        *spec.sections(r, unit.get("input") or {}),
                        *(extra_sections or {}).get(r["unit_id"], []),
                        *_field_sections(r, spec),
                    ],
                    "events": exchanges(r["unit_id"]),
                }
            )

    metrics = summary.metrics
    return {
        **shown(
            {
                "kind": "run",
                "title": f"{protocol} run {run.name}",
                "protocol": protocol,
                "run_id": run.name,
                "notes": [n for n in [summary.smoke_test_warning, _interrupted_note(summary.interrupted)] if n],
                "overview": [
                    ["units", summary.units],
                    ["statuses", ", ".join(f"{k}={v}" for k, v in sorted(summary.status_counts.items()))],
                    ["ungraded verdicts", summary.ungraded_verdicts],
                    *[[f"model: {role}", model] for role, model in summary.models.items()],
                    *[[f"LLM {k}", v] for k, v in summary.usage.items()],
                ],
                "headline": headline_metrics(spec, metrics),
                "metrics": _flat(metrics),
                "columns": columns,
                "hidden": hidden,
            }
        ),
        "units": unit_rows(),
        "outside": shown(exchanges("-")),
        "texts": map(shown, texts.items()),
    }


def run_payload(run_dir: Path, extra_sections: dict[str, list[Section]] | None = None) -> dict[str, Any]:
    """Everything ``view.html`` shows of one run, as JSON-ready data (:func:`run_parts` with its lists whole)."""
    return {k: list(v) if isinstance(v, Iterator) else v for k, v in run_parts(run_dir, extra_sections).items()}


def _interrupted_note(interrupted: dict[str, Any] | None) -> str | None:
    if not interrupted:
        return None
    return (
        f"INTERRUPTED: a partial run; {interrupted.get('unfinished_units')} units are not finished. "
        f"Continue with: {interrupted.get('resume')}"
    )
