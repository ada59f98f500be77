"""What a finished command tells a CI job: its documented exit codes, and the ``--fail-under METRIC=VALUE``
thresholds on a protocol's headline metrics (the metrics the viewer and report show first, by their paths in
``summary.json``'s ``metrics``)."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

from dyneval.results.state_checks import PATH as STATE_CHECK
from dyneval.results.trials import PASS_K
from dyneval.results.view.adapters import adapter
from dyneval.results.view.data import headline_metrics
from dyneval.state.errors import InputError

#: Exit codes, stable across releases (the README's table).
EXIT_OK = 0  # every unit finished ok (and every --fail-under threshold met)
EXIT_INTERNAL = 1  # an internal error (a traceback: please report it)
EXIT_BAD_INPUT = 2  # bad input: one line naming the file, record, field or flag; nothing was spent
EXIT_BUDGET = 3  # --max-calls / --max-tokens / --max-cost reached: partial report, resumable
EXIT_UNITS_FAILED = (
    4  # the run ended, but some units ended failed (infra_error, error, model_error), ungraded or missing
)
EXIT_BELOW_THRESHOLD = 5  # a --fail-under threshold was not met (or its metric has no value)
EXIT_INFRA = 6  # an endpoint or store failed after its retries outside any unit (e.g. a knowledge-graph build)
EXIT_INTERRUPTED = 130  # Ctrl-C: partial report, resumable
EXIT_TERMINATED = 143  # SIGTERM (128 + 15, the convention): stopped as after Ctrl-C, partial report, resumable

#: Unit statuses that count as finished for the exit code (``diverged``: a re-score's new verdicts led elsewhere,
#: which is that re-score's finding, not a failure).
FINE_STATUSES = frozenset({"ok", "diverged"})


@dataclass(frozen=True)
class Threshold:
    """``--fail-under METRIC=VALUE``: the run fails when the metric is below VALUE. A ``*`` in METRIC (as in the
    protocol's metric names, e.g. ``table1.*.avg``) requires it of every key."""

    metric: str
    minimum: float

    def misses(self, summary: dict[str, Any], protocol: str) -> list[str]:
        """One line per headline value below the threshold (or absent: a metric without a value is not met)."""
        found = [
            m
            for m in headline_metrics(adapter(protocol), summary.get("metrics") or {})
            if fnmatch.fnmatchcase(m["path"], self.metric)
        ]
        if not found:
            return [f"{self.metric} has no value in this run (nothing graded?), needed >= {self.minimum:g}"]
        out = []
        for m in found:
            value = m["value"]
            if not isinstance(value, (int, float)) or math.isnan(value) or value < self.minimum:
                out.append(f"{m['path']} = {value} ({m['denominator'] or 'n unknown'}) is below {self.minimum:g}")
        return out


def parse_thresholds(specs: list[str] | None, protocol: str) -> list[Threshold]:
    """The ``--fail-under`` values, checked before the run: ``NAME=NUMBER`` with NAME a headline metric path of
    ``protocol`` (a ``*`` path as declared, or one key of it), a pass^k of ``--trials`` (``trials.target.pass^2``)
    or ``--state-check``'s share (``state_check.share``)."""
    out = []
    names = [m.path for m in adapter(protocol).metrics] + [PASS_K, STATE_CHECK]  # --trials', --state-check's
    for spec in specs or []:
        name, eq, raw = spec.partition("=")
        try:
            minimum = float(raw)
        except ValueError:
            minimum = math.nan
        if not eq or not name or math.isnan(minimum):
            raise InputError(f"{spec!r} is not METRIC=NUMBER", field="--fail-under")
        if not any(name == path or fnmatch.fnmatchcase(name, path) for path in names):
            known = ", ".join(names) or "none"
            raise InputError(f"{name!r} is not a headline metric of {protocol} (one of: {known})", field="--fail-under")
        out.append(Threshold(name, minimum))
    return out


def unfinished_units(summary: dict[str, Any]) -> dict[str, int]:
    """Status -> count of the units that did not finish ok (from ``summary.json``'s ``status_counts``)."""
    return {s: n for s, n in (summary.get("status_counts") or {}).items() if s not in FINE_STATUSES and n}
