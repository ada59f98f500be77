"""pass^k and the flip rate of a run with ``--trials K`` (:mod:`runtime.trials`), per model or agent under test.

Each trial of an item gives a verdict (:class:`runtime.protocol.TrialVerdict`): correct, wrong or ungraded. For
an item with ``n`` graded trials of which ``c`` are correct:

* **pass^k** (τ-bench, Yao et al. 2024): the chance that k trials of the item all succeed, estimated without bias
  by ``C(c, k) / C(n, k)``, averaged over the items with at least k graded trials; pass^1 is the share of correct
  trials.
* **flip rate**: the share of the items with two or more graded trials whose verdicts differ between trials.

An ungraded verdict (the judge failed) and a trial whose unit failed (the agent raised, timed out, an endpoint
fault) give no verdict: they count neither for nor against the target; each measure's denominator is the items
that keep enough graded trials, and the ungraded and failed trials are counted beside it.

Intervals: items are the repeated unit, the protocol's independent units their clusters (one item each, but
JudgeAgent's batch of questions). pass^k takes :func:`results.stats.clustered_mean_share`, the Korn-Graubard exact
interval at the cluster design effect, its effective size capped at the independent 0/1 outcomes the items'
estimates rest on (an item's disjoint runs of k trials); the flip rate, a 0/1 per item, the exact binomial interval
(the same at the cluster design effect where items share clusters). ``bench/coverage.py`` measured 95-100 % from 7
items of 4 trials on, where the cluster-robust t and the bootstrap over items covered 90 % (``docs/statistics.md``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from math import comb
from typing import Any

from dyneval.results.stats import Estimate, clustered_mean_share, proportion, summary_entries
from dyneval.runtime.protocol import RESULT_STATUSES, Protocol

FLIP = "flip_rate"
#: The pass^k headlines by path, as ``--fail-under`` names them (``trials.target.pass^2=0.5``).
PASS_K = "trials.*.pass^*"
#: The subject of a protocol with one model under test (its role); others are named by their model.
TARGET = "target"


@dataclass
class ItemTrials:
    """The verdicts one item got over its trials (None: ungraded), and the cluster it belongs to."""

    cluster: str
    verdicts: list[bool | None] = field(default_factory=list)

    @property
    def graded(self) -> list[bool]:
        return [v for v in self.verdicts if v is not None]


def pass_hat(correct: int, graded: int, k: int) -> float:
    """τ-bench's unbiased estimate of an item's pass^k from ``correct`` of ``graded`` trials: C(c, k) / C(n, k)."""
    return comb(correct, k) / comb(graded, k)


def estimates(items: list[ItemTrials], trials: int) -> dict[str, Estimate | None]:
    """pass^1 .. pass^``trials`` and the flip rate over ``items``, each with its interval (None: no item has enough
    graded trials)."""
    return {**{f"pass^{k}": pass_k(items, k) for k in range(1, trials + 1)}, FLIP: flip_rate(items)}


def pass_k(items: list[ItemTrials], k: int) -> Estimate | None:
    """pass^k over the items with at least ``k`` graded trials."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    observations = 0
    for item in items:
        graded = item.graded
        if len(graded) >= k:
            sums[item.cluster] += pass_hat(sum(graded), len(graded), k)
            counts[item.cluster] += 1
            observations += len(graded) // k
    return _estimate(sums, counts, observations)


def flip_rate(items: list[ItemTrials]) -> Estimate | None:
    """The share of the items with two or more graded trials whose verdicts differ."""
    flips: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        graded = item.graded
        if len(graded) >= 2:
            flips[item.cluster] += float(len(set(graded)) > 1)
            counts[item.cluster] += 1
    if counts and all(n == 1 for n in counts.values()):  # independent 0/1 items: the exact binomial interval
        return proportion(int(sum(flips.values())), len(counts), "items")
    return _estimate(flips, counts, sum(counts.values()))


def _estimate(sums: dict[str, float], counts: dict[str, int], observations: int) -> Estimate | None:
    clusters = list(counts)
    label = "items" if all(counts[c] == 1 for c in clusters) else "clusters of items"
    return clustered_mean_share([sums[c] for c in clusters], [counts[c] for c in clusters], observations, label)


def trial_metrics(protocol: Protocol, records: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    """``{"trials": ..., "intervals": ..., "separable": ...}`` for ``summary["metrics"]``: per subject pass^k for
    k = 1 .. ``trials`` and the flip rate, each with its denominator, the ungraded verdicts and failed trials."""
    by_subject: dict[str, dict[str, ItemTrials]] = defaultdict(dict)
    ungraded: dict[str, int] = defaultdict(int)
    failed = 0
    for record in records:
        if record.get("status") not in RESULT_STATUSES:
            failed += 1
            continue
        for v in protocol.trial_verdicts(record):
            item = by_subject[v.subject].setdefault(v.item, ItemTrials(v.cluster))
            item.verdicts.append(v.correct)
            ungraded[v.subject] += v.correct is None
    subjects: dict[str, Any] = {}
    found: dict[str, Estimate | None] = {}
    for subject, items in by_subject.items():
        measured = estimates(list(items.values()), trials)
        subjects[subject] = {
            **{name: e.estimate if e else None for name, e in measured.items()},
            "n": {name: e.n if e else 0 for name, e in measured.items()},
            "items": len(items),
            "graded_trials": sum(len(i.graded) for i in items.values()),
            "ungraded_trials": ungraded[subject],
        }
        found.update({f"trials.{subject}.{name}": e for name, e in measured.items()})
    return {
        "trials": {"k": trials, "failed_trials": failed, "subjects": subjects},
        **summary_entries(found),
    }


def trial_headlines(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline rows of a run with trials (:func:`results.view.data.headline_metrics`): per subject pass^k
    for each k, then the flip rate, each with its denominator and what it leaves out."""
    found = metrics.get("trials")
    if not found:
        return []
    intervals = metrics.get("intervals") or {}
    rows = []
    for subject, measured in found["subjects"].items():
        left_out = (
            f"{_count(measured['ungraded_trials'], 'ungraded verdict')} and "
            f"{_count(found['failed_trials'], 'failed trial')} left out"
        )
        of = "" if subject == TARGET else f" of {subject}"
        for name, n in measured["n"].items():
            if measured.get(name) is None:
                continue
            k = name.removeprefix("pass^")
            path = f"trials.{subject}.{name}"
            rows.append(
                {
                    "name": f"{'flip rate' if name == FLIP else name}{of}",
                    "value": measured[name],
                    "definition": (
                        f"share of items whose verdicts differ between their trials ({found['k']} trials each)"
                        if name == FLIP
                        else f"chance that {k} trials of an item all succeed (τ-bench's pass^k): per item "
                        f"C(c, {k}) / C(n, {k}) of its n graded trials, c correct, averaged over the items"
                    ),
                    "denominator": f"{n} items with {'2' if name == FLIP else k} or more graded trials; {left_out}",
                    "path": path,
                    "interval": intervals.get(path),
                    "metric": f"trials.*.{name}",
                    "entry": None if subject == TARGET else subject,
                }
            )
    return rows


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
