"""``dyneval --compare RUN_A RUN_B ...``: one page for several runs of one protocol.

The page opens with the paired differences: for each per-unit numeric outcome (:mod:`results.view.adapters`), the
mean difference between each run and the first over the units both hold results for, with a seeded 95 % bootstrap
interval of the mean difference (``scipy.stats.bootstrap``, percentile method, units resampled). Runs are named by
short labels (A, B, ...) with a legend (run id, date, what differs between them); the units whose status or outcome
changed link to their drill-downs in each run's ``view.html`` (``#unit=ID``); the headline metrics with their
intervals follow, and every metric of each ``summary.json`` last.
"""

from __future__ import annotations

import json
import math
import os
import string
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dyneval.results.view.adapters import adapter
from dyneval.results.view.data import _flat, headline_metrics
from dyneval.results.view.page import VIEW_FILE, write_page
from dyneval.results.view.paths import Relative
from dyneval.runtime.protocol import RESULT_STATUSES
from dyneval.state.errors import InputError
from dyneval.stores.files import writable
from dyneval.stores.rundir import RunDir, finished_run
from dyneval.stores.runfiles import ConfigFile, SummaryFile

#: Bootstrap resamples and seed of the paired intervals (fixed: the same runs give the same page).
RESAMPLES, SEED, CONFIDENCE = 9999, 0, 0.95


def resolve_runs(refs: list[str], out: str) -> list[RunDir]:
    """Each reference is a run folder or a run id under ``out``; every one must hold a ``summary.json``."""
    if len(refs) < 2:
        raise InputError("give at least two runs to compare", setting="--compare")
    runs = [finished_run(ref, out, "--compare") for ref in refs]
    if len({r.path.resolve() for r in runs}) < len(runs):
        raise InputError("a run is named twice", setting="--compare")
    protocols = {r.name: r.protocol for r in runs}
    if len(set(protocols.values())) > 1:
        raise InputError(
            "runs of different protocols cannot be compared: " + ", ".join(f"{k} is {v}" for k, v in protocols.items()),
            setting="--compare",
        )
    return runs


def mean_difference_ci(diffs: list[float]) -> tuple[float | None, float | None]:
    """Seeded percentile-bootstrap interval of the mean of paired differences; None below two pairs."""
    if len(diffs) < 2:
        return None, None
    if len(set(diffs)) == 1:  # every resample has the same mean
        return diffs[0], diffs[0]
    import numpy as np
    from scipy.stats import bootstrap

    res = bootstrap(
        (np.asarray(diffs),),
        np.mean,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        random_state=np.random.default_rng(SEED),
    )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (None, None) if math.isnan(low) or math.isnan(high) else (low, high)


def _outcomes(protocol: str, records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """unit id -> outcome name -> value, for the units holding results."""
    spec = adapter(protocol)
    return {
        r["unit_id"]: {name: f(r) for name, f in spec.outcomes.items()}
        for r in records
        if r.get("status") in RESULT_STATUSES
    }


def labels(count: int) -> list[str]:
    """Short run labels: A, B, ..., Z, then R27, R28, ..."""
    return [string.ascii_uppercase[i] if i < 26 else f"R{i + 1}" for i in range(count)]


def _differences(summaries: list[SummaryFile], configs: list[ConfigFile]) -> list[str]:
    """Per run, what tells it apart from the others: the models and parameters that are not the same in all."""

    def facts(summary: SummaryFile, config: ConfigFile) -> dict[str, str]:
        out = {f"{role}: {model}": "" for role, model in summary.models.items()}
        out.update({f"{k}={json.dumps(v)}": "" for k, v in config.params.items()})
        return out

    every = [facts(s, c) for s, c in zip(summaries, configs)]
    for fs, c in zip(every, configs):  # a prompt any run replaced (--prompts): its file's hash, or the shipped one
        for name in sorted({n for c in configs for n in c.prompt_overrides}):
            fs[f"judge prompt differs: {name} {c.prompt_overrides.get(name, 'shipped')[:12]}"] = ""
    common = set.intersection(*(set(f) for f in every)) if every else set()
    return [", ".join(f for f in fs if f not in common) or "(same models and parameters)" for fs in every]


def _with_interval(m: dict[str, Any] | None) -> dict[str, Any] | None:
    if m is None:
        return None
    interval = m.get("interval") or {}
    return {
        "value": m["value"],
        "low": interval.get("low"),
        "high": interval.get("high"),
        "n": interval.get("n"),
        "denominator": m["denominator"],
    }


def compare_payload(runs: Sequence[RunDir | Path], page_dir: Path | None = None) -> dict[str, Any]:
    """The comparison page's data; links to the runs' views are relative to ``page_dir`` (default: the folder
    holding the first run)."""
    dirs = [r if isinstance(r, RunDir) else RunDir(r) for r in runs]
    page_dir = Path(page_dir) if page_dir is not None else dirs[0].path.parent
    summaries = [r.summary() or SummaryFile() for r in dirs]
    protocol = dirs[0].protocol
    names = labels(len(dirs))
    records = [r.records() for r in dirs]
    outcomes = [_outcomes(protocol, rs) for rs in records]
    outcome_names = [
        n
        for n in adapter(protocol).outcomes  # those some run has a value of
        if any(values[n] is not None for o in outcomes for values in o.values())
    ]
    views = [os.path.relpath(r.path / VIEW_FILE, page_dir) for r in dirs]

    heads = [{m["path"]: m for m in headline_metrics(adapter(protocol), s.metrics)} for s in summaries]
    paths = list(dict.fromkeys(p for h in heads for p in h))
    headline = [
        {"name": next(h[p]["name"] for h in heads if p in h), "values": [_with_interval(h.get(p)) for h in heads]}
        for p in paths
    ]
    flats = [dict(_flat(s.metrics)) for s in summaries]
    raw = [[k, *[flat.get(k) for flat in flats]] for k in dict.fromkeys(k for f in flats for k in f)]

    paired = []
    for i in range(1, len(dirs)):
        for name in outcome_names:
            pairs = [
                (a, b)
                for u in outcomes[i]
                if u in outcomes[0]
                and (a := outcomes[i][u][name]) is not None
                and (b := outcomes[0][u][name]) is not None
            ]
            if not pairs:
                continue
            diffs = [a - b for a, b in pairs]
            low, high = mean_difference_ci(diffs)
            paired.append(
                {
                    "outcome": name,
                    "run": names[i],
                    "baseline": names[0],
                    "n": len(pairs),
                    "mean": sum(a for a, _ in pairs) / len(pairs),
                    "mean_baseline": sum(b for _, b in pairs) / len(pairs),
                    "diff": sum(diffs) / len(diffs),
                    "low": low,
                    "high": high,
                }
            )

    statuses = [{r["unit_id"]: r.get("status") for r in rs} for rs in records]
    shared = [u for u in statuses[0] if all(u in s for s in statuses[1:])]
    unit_diffs = []
    for unit in dict.fromkeys(u for s in statuses for u in s):
        row_status = [s.get(unit) for s in statuses]
        row_values = [[o.get(unit, {}).get(name) for o in outcomes] for name in outcome_names]
        if len(set(row_status)) > 1 or any(len({json.dumps(v) for v in vals}) > 1 for vals in row_values):
            unit_diffs.append(
                {
                    "unit": unit,
                    "values": [*row_status, *[v for vals in row_values for v in vals]],
                    "links": [f"{view}#unit={unit}" if unit in s else None for view, s in zip(views, statuses)],
                }
            )
    differs = _differences(summaries, [r.config() for r in dirs])
    payload = {
        "kind": "compare",
        "title": f"{protocol}: {' vs '.join(r.name for r in dirs)}",
        "protocol": protocol,
        "notes": [f"{label}: {s.smoke_test_warning}" for label, s in zip(names, summaries) if s.smoke_test_warning]
        + [f"{label}: INTERRUPTED, a partial run" for label, s in zip(names, summaries) if s.interrupted],
        "runs": [
            {
                "label": label,
                "run_id": r.name,
                "started": r.started,
                "units": s.units,
                "statuses": ", ".join(f"{k}={v}" for k, v in sorted(s.status_counts.items())),
                "differs": d,
                "view": view,
            }
            for label, r, s, d, view in zip(names, dirs, summaries, differs, views)
        ],
        "paired_note": (
            f"Per-unit outcomes of units that hold results (status ok or ungraded) in both runs, "
            f"paired by unit id (the same seed question, batch, problem, item or session slot), "
            f"difference = run - {names[0]}. Interval: {CONFIDENCE:.0%} percentile bootstrap of the mean "
            f"difference over units ({RESAMPLES} resamples, seed {SEED}); none below two units."
        ),
        "paired": paired,
        "headline": headline,
        "metrics_note": "Each run's summary.json, every metric.",
        "metrics": raw,
        "shared_units": len(shared),
        "unit_headers": [*[f"status {n}" for n in names], *[f"{o} {n}" for o in outcome_names for n in names]],
        "unit_diffs": unit_diffs,
    }
    return Relative(page_dir, out=page_dir)(payload)


def write_compare(refs: list[str], out: str, dest: Path | None = None) -> Path:
    """Check the runs, then write the comparison page (default ``<out>/compare-<time>.html``); its path."""
    runs = resolve_runs(refs, out)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path = dest or Path(out) / f"compare-{stamp}.html"
    payload = compare_payload(runs, path.parent)
    with writable(path.parent, "--compare"):
        return write_page(path, payload)
