"""A run's headline metrics as a person reads them: ``value [low, high] (n=..., method)`` and the smallest
difference a run of this size separates. The console summary and every protocol's report show them this way.

Values come from ``summary["metrics"]`` as the protocol's :class:`results.view.adapters.Adapter` names them, their
intervals and separable differences from ``metrics["intervals"]`` / ``metrics["separable"]``
(:mod:`results.stats`); a metric whose record holds its own ``low``/``high`` (judgecheck's measures) shows those.
A protocol that declares how a metric's interval is computed (``Metric.interval``) gets it computed here
(:func:`declared_intervals`, called when its summary is built).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dyneval.results.numbers import interval_text, number
from dyneval.results.stats import mean, proportion, summary_entries
from dyneval.results.view.adapters import adapter, dig, interval_of
from dyneval.results.view.data import headline_metrics
from dyneval.runtime.protocol import with_results
from dyneval.state.blocks import Block, Table, Text
from dyneval.state.viewer import Adapter

SEPARABILITY = (
    "Smallest separable difference: how far apart two targets must be for two runs of this size to "
    "tell them apart (two-sided test at 95 % confidence with 80 % power), from this run's own "
    "variance: (z_0.975 + z_0.8) x sqrt(2) x sd / sqrt(n), n = the independent units (clusters where "
    "units share questions). For the units a difference you name needs: dyneval --detect D --pilot "
    "RUN_DIR (docs/statistics.md)."
)


@dataclass(frozen=True)
class Headline:
    label: str
    path: str
    value: Any
    definition: str
    denominator: str
    interval: dict[str, Any] | None
    separable: dict[str, Any] | None
    #: the metric's declared path (a ``*`` unexpanded) and what its ``*`` stands for here (None without one)
    metric: str = ""
    entry: str | None = None


def declared_intervals(spec: Adapter, metrics: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """``metrics`` with the value, interval and separable difference of each declared metric whose ``interval``
    dyneval computes (:data:`state.viewer.IntervalMethod`) and the protocol's summary left without one: over the
    units holding results that have its ``outcome`` (a user's protocol need not write any statistics)."""
    for m in spec.metrics:
        if m.interval is None or "*" in m.path or interval_of(metrics, m.path) is not None:
            continue
        outcome = spec.outcomes[m.outcome]
        values = [v for r in with_results(records) if (v := outcome(r)) is not None]
        estimate = proportion(int(sum(values)), len(values), "units") if m.interval == "proportion" else None
        if m.interval == "mean":
            estimate = mean(values, "units")
        if estimate is None:
            continue
        *parents, leaf = m.path.split(".")
        target = metrics
        for key in parents:
            target = target.setdefault(key, {})
        target.setdefault(leaf, estimate.estimate)
        for part, entries in summary_entries({m.path: estimate}).items():
            metrics.setdefault(part, {}).update(entries)
    return metrics


def _own_interval(metrics: dict[str, Any], path: str) -> dict[str, Any] | None:
    """A measure that carries ``low``/``high`` and its ``method`` beside its ``value`` (judgecheck's intervals over
    items)."""
    if not path.endswith(".value"):
        return None
    found = dig(metrics, path[: -len(".value")])
    if isinstance(found, dict) and found.get("low") is not None and found.get("high") is not None:
        return {
            "estimate": found.get("value"),
            "low": found["low"],
            "high": found["high"],
            "n": found.get("n"),
            "level": 0.95,
            "method": found.get("method"),
        }
    return None


def headlines(protocol: str, metrics: dict[str, Any]) -> list[Headline]:
    """The protocol's headline metrics present in ``metrics``, each with its interval and separable difference."""
    out = []
    for m in headline_metrics(adapter(protocol), metrics):
        out.append(
            Headline(
                m["name"],
                m["path"],
                m["value"],
                m["definition"],
                m["denominator"],
                m["interval"] or _own_interval(metrics, m["path"]),
                (metrics.get("separable") or {}).get(m["path"]),
                m["metric"],
                m["entry"],
            )
        )
    return out


def method_text(interval: dict[str, Any] | None) -> str:
    """``n=6, cluster-robust-t over 1 batches``: the denominator and how the interval was computed."""
    if not interval:
        return ""
    text = f"n={interval.get('n')}, {interval.get('method')}"
    if interval.get("units") is not None:
        text += f" over {interval['units']} {interval.get('unit', 'clusters')}"
    return text


def value_text(h: Headline) -> str:
    """``0.917 [0.75, 1] (n=6, cluster-robust-t over 2 batches)``."""
    method = method_text(h.interval)
    return f"{number(h.value)} {interval_text(h.interval)}" + (f" ({method})" if method else "")


def separable_text(separable: dict[str, Any] | None) -> str:
    """``0.31 (sd 0.42, 30 sessions)``, or why the run cannot tell."""
    if not separable:
        return "n/a"
    if separable.get("difference") is None:
        return f"n/a: {separable.get('note', 'no variance')}"
    scale = f", as a {separable['scale']}" if separable.get("scale") else ""
    return (
        f"{number(separable['difference'])} (sd {number(separable['sd'])}, {separable['n']} "
        f"{separable.get('unit', 'units')}{scale})"
    )


def report_blocks(protocol: str, metrics: dict[str, Any]) -> list[Block]:
    """The headline table of a protocol's report: value with its 95 % interval, n and method, the smallest
    separable difference and the definition, then how the separable difference is computed."""
    rows = [
        [h.label, value_text(h), h.denominator, separable_text(h.separable), h.definition]
        for h in headlines(protocol, metrics)
    ]
    if not rows:
        return [Text("No headline metric has a value in this run (nothing graded).")]
    return [
        Table(
            [
                "metric",
                "value [95 % interval] (n, method)",
                "denominator",
                "smallest separable difference",
                "definition",
            ],
            rows,
            caption="Headline metrics with their 95 % intervals",
        ),
        Text(SEPARABILITY),
    ]
