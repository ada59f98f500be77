"""``dyneval --compare RUN_A RUN_B ...``: one page for several runs of one protocol.

Metrics side by side (the protocol's headline metrics first), paired differences of the per-unit numeric outcomes
(:mod:`runtime.view.adapters`) between each run and the first over the units both hold results for, with a seeded
95 % bootstrap interval of the mean difference (``scipy.stats.bootstrap``, percentile method, units resampled),
and the units whose status or outcome changed.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dyneval.runtime.protocol import RESULT_STATUSES
from dyneval.runtime.view.adapters import adapter
from dyneval.runtime.view.data import _flat, headline_metrics, latest_records, read_json
from dyneval.runtime.view.page import write_page
from dyneval.state.errors import InputError

#: Bootstrap resamples and seed of the paired intervals (fixed: the same runs give the same page).
RESAMPLES, SEED, CONFIDENCE = 9999, 0, 0.95


def resolve_runs(refs: list[str], out: str) -> list[Path]:
    """Each reference is a run folder or a run id under ``out``; every one must hold a ``summary.json``."""
    if len(refs) < 2:
        raise InputError("give at least two runs to compare", setting="--compare")
    dirs = []
    for ref in refs:
        path = Path(ref) if Path(ref).is_dir() else Path(out) / ref
        if not (path / "summary.json").is_file():
            raise InputError(f"no finished run {ref!r} (no summary.json in {path})", setting="--compare")
        dirs.append(path)
    if len({p.resolve() for p in dirs}) < len(dirs):
        raise InputError("a run is named twice", setting="--compare")
    protocols = {p.name: read_json(p / "summary.json").get("protocol") for p in dirs}
    if len(set(protocols.values())) > 1:
        raise InputError("runs of different protocols cannot be compared: "
                         + ", ".join(f"{k} is {v}" for k, v in protocols.items()), setting="--compare")
    return dirs


def mean_difference_ci(diffs: list[float]) -> tuple[float | None, float | None]:
    """Seeded percentile-bootstrap interval of the mean of paired differences; None below two pairs."""
    if len(diffs) < 2:
        return None, None
    if len(set(diffs)) == 1:  # every resample has the same mean
        return diffs[0], diffs[0]
    from scipy.stats import bootstrap
    import numpy as np

    res = bootstrap((np.asarray(diffs),), np.mean, n_resamples=RESAMPLES, confidence_level=CONFIDENCE,
                    method="percentile", random_state=np.random.default_rng(SEED))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (None, None) if math.isnan(low) or math.isnan(high) else (low, high)


def _outcomes(protocol: str, records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """unit id -> outcome name -> value, for the units holding results."""
    spec = adapter(protocol)
    return {r["unit_id"]: {name: f(r) for name, f in spec.outcomes.items()} for r in records
            if r.get("status") in RESULT_STATUSES}


def compare_payload(run_dirs: list[Path]) -> dict[str, Any]:
    summaries = [read_json(p / "summary.json") for p in run_dirs]
    protocol = summaries[0].get("protocol") or ""
    ids = [p.name for p in run_dirs]
    records = [latest_records(p) for p in run_dirs]
    outcomes = [_outcomes(protocol, rs) for rs in records]
    names = list(adapter(protocol).outcomes)

    heads = [{m["path"]: m for m in headline_metrics(adapter(protocol), s.get("metrics") or {})} for s in summaries]
    flats = [dict((k, v) for k, v in _flat(s.get("metrics") or {})) for s in summaries]
    paths = list(dict.fromkeys(p for h in heads for p in h))
    metrics = [[next(h[p]["name"] for h in heads if p in h), *[flat.get(p) for flat in flats]] for p in paths]
    metrics += [[k, *[flat.get(k) for flat in flats]] for k in dict.fromkeys(k for f in flats for k in f)
                if k not in paths]

    paired = []
    for i in range(1, len(run_dirs)):
        for name in names:
            pairs = [(outcomes[i][u][name], outcomes[0][u][name]) for u in outcomes[i] if u in outcomes[0]
                     and outcomes[i][u][name] is not None and outcomes[0][u][name] is not None]
            if not pairs:
                continue
            diffs = [a - b for a, b in pairs]
            low, high = mean_difference_ci(diffs)
            paired.append({"outcome": name, "run": ids[i], "baseline": ids[0], "n": len(pairs),
                           "mean": sum(a for a, _ in pairs) / len(pairs),
                           "mean_baseline": sum(b for _, b in pairs) / len(pairs),
                           "diff": sum(diffs) / len(diffs), "low": low, "high": high})

    statuses = [{r["unit_id"]: r.get("status") for r in rs} for rs in records]
    shared = [u for u in statuses[0] if all(u in s for s in statuses[1:])]
    unit_diffs = []
    for unit in dict.fromkeys(u for s in statuses for u in s):
        row_status = [s.get(unit) for s in statuses]
        row_values = [[o.get(unit, {}).get(name) for o in outcomes] for name in names]
        if len(set(row_status)) > 1 or any(len({json.dumps(v) for v in vals}) > 1 for vals in row_values):
            unit_diffs.append({"unit": unit, "values": [*row_status, *[v for vals in row_values for v in vals]]})
    return {
        "kind": "compare",
        "title": f"{protocol}: {' vs '.join(ids)}",
        "protocol": protocol,
        "notes": [f"{run}: {s['smoke_test_warning']}" for run, s in zip(ids, summaries) if s.get("smoke_test_warning")]
        + [f"{run}: INTERRUPTED, a partial run" for run, s in zip(ids, summaries) if s.get("interrupted")],
        "runs": [{"run_id": run, "units": s.get("units"),
                  "statuses": ", ".join(f"{k}={v}" for k, v in sorted((s.get("status_counts") or {}).items())),
                  "models": ", ".join(f"{k}: {v}" for k, v in (s.get("models") or {}).items())}
                 for run, s in zip(ids, summaries)],
        "metrics_note": "Each run's summary.json; the protocol's headline metrics first.",
        "metrics": metrics,
        "paired_note": (f"Per-unit outcomes of units that hold results (status ok or ungraded) in both runs, "
                        f"paired by unit id (the same seed question, batch, problem, item or session slot), "
                        f"difference = run - vs. Interval: {CONFIDENCE:.0%} percentile bootstrap of the mean "
                        f"difference over units ({RESAMPLES} resamples, seed {SEED}); none below two units."),
        "paired": paired,
        "shared_units": len(shared),
        "unit_headers": [*[f"status: {r}" for r in ids], *[f"{n}: {r}" for n in names for r in ids]],
        "unit_diffs": unit_diffs,
    }


def write_compare(refs: list[str], out: str, dest: Path | None = None) -> Path:
    """Check the runs, then write the comparison page (default ``<out>/compare-<time>.html``); its path."""
    dirs = resolve_runs(refs, out)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = dest or Path(out) / f"compare-{stamp}.html"
    return write_page(path, compare_payload(dirs))
