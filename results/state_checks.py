"""The share of an agent target's threads whose final state passed the user's ``--state-check``
(:mod:`runtime.agents.state_check`), with its interval and what it leaves out.

Each unit's record holds one verdict per agent thread (``state_checks``: correct, wrong, or ungraded when the check
raised or returned no verdict). The share is over the graded ones; threads of one planned unit (its trials, the
interview's single-turn thread) form a cluster, so the interval is :func:`results.stats.clustered_share` (the
exact interval at the cluster design effect; the exact binomial interval when each unit has one thread).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dyneval.results.stats import clustered_share, proportion, summary_entries
from dyneval.runtime.trials import trial_of

PATH = "state_check.share"


def state_check_metrics(records: list[dict[str, Any]], check: str) -> dict[str, Any]:
    """``{"state_check": ..., "intervals": ..., "separable": ...}`` for ``summary["metrics"]`` (empty when no record
    holds a check)."""
    hits: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    ungraded = 0
    for record in records:
        for verdict in (record.get("state_checks") or {}).values():
            if verdict["verdict"] == "ungraded":
                ungraded += 1
                continue
            cluster = trial_of(record)[0]
            hits[cluster] += verdict["verdict"] == "correct"
            counts[cluster] += 1
    if not counts and not ungraded:
        return {}
    units = list(counts)
    if all(counts[u] == 1 for u in units):
        estimate = proportion(sum(hits.values()), len(units), "threads")
    else:
        estimate = clustered_share([hits[u] for u in units], [counts[u] for u in units], "threads", "units")
    return {
        "state_check": {
            "check": check,
            "share": estimate.estimate if estimate else None,
            "n": sum(counts.values()),
            "ungraded": ungraded,
        },
        **summary_entries({PATH: estimate}),
    }


def state_check_headlines(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline row of ``--state-check`` (:func:`results.view.data.headline_metrics`)."""
    found = metrics.get("state_check")
    if not found or found.get("share") is None:
        return []
    return [
        {
            "name": "State check",
            "value": found["share"],
            "definition": f"share of the agent's threads whose final state {found['check']} passed",
            "denominator": f"{found['n']} checked threads; {found['ungraded']} ungraded (the check raised or "
            "gave no verdict), left out",
            "path": PATH,
            "interval": (metrics.get("intervals") or {}).get(PATH),
            "metric": PATH,
            "entry": None,
        }
    ]
