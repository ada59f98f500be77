"""Seconds to summarize a judge check (every measure with its bootstrap interval), the code of an earlier revision
against this checkout's, measured in one run.

    python -m bench.judgecheck_summary [--items 1000] [--resamples 1000] [--old REV]

A simulated pairwise judge (both orders, one repeat; right 75 % of the time, a verdict unusable now and then)
over ``--items`` labelled items in four categories; each side computes what ``summarize`` computes per judge
(the measures, per-class scores in both orders, accuracy by category) at ``--resamples`` resamples. The earlier
revision's ``protocols/judgecheck/metrics.py`` (default: the last one that resampled in a Python loop) is read
from git and loaded beside this checkout's. Prints each side's seconds, their ratio, and whether every value and
interval bound agrees (both draw the same resamples).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tables import table  # noqa: E402
from dyneval.protocols.judgecheck import metrics  # noqa: E402
from dyneval.state.judgecheck import SCALES  # noqa: E402

#: The last revision whose judge-check bootstrap drew its resamples one by one in Python.
LOOPED = "6c75a45"


def old_metrics(rev: str) -> ModuleType:
    """``protocols/judgecheck/metrics.py`` of ``rev``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:protocols/judgecheck/metrics.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "judgecheck_metrics_old.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("judgecheck_metrics_old", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def items(n: int, seed: int = 0) -> list[tuple[str, str, str, dict[tuple[int, str], str | None]]]:
    """(id, category, label, verdicts) of ``n`` simulated pairs."""
    rng = np.random.default_rng(seed)
    scale = SCALES["pairwise"]
    out = []
    for i in range(n):
        label = scale[rng.integers(3)]
        verdicts: dict[tuple[int, str], str | None] = {}
        for order in ("original", "swapped"):
            draw = rng.random()
            verdicts[0, order] = None if draw < 0.02 else label if draw < 0.77 else scale[rng.integers(3)]
        out.append((f"i{i}", f"c{i % 4}", label, verdicts))
    return out


def summarize(module: ModuleType, data: list[Any], resamples: int) -> tuple[float, dict[str, Any]]:
    """Seconds for what ``summarize`` computes per judge, and the values."""
    obs = [module.Obs(i, c, label, dict(v)) for i, c, label, v in data]
    start = time.perf_counter()
    got = {
        "measures": module.measures(obs, pairwise=True, swapped=True, ordinal=False, resamples=resamples, seed=0),
        "per_class": {
            order: module.per_class(obs, SCALES["pairwise"], order=order, resamples=resamples, seed=0)
            for order in ("original", "swapped")
        },
        "by_category": module.by_category(obs, swapped=True, resamples=resamples, seed=0),
    }
    return time.perf_counter() - start, got


def values(tree: Any, path: str = "") -> dict[str, Any]:
    """Every ``value``, ``low`` and ``high`` of a summary tree, by path."""
    if isinstance(tree, dict):
        if "value" in tree:
            return {f"{path}.{k}": tree[k] for k in ("value", "low", "high")}
        return {k: v for key, sub in tree.items() for k, v in values(sub, f"{path}.{key}").items()}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--old", default=LOOPED, help="the earlier revision (default: %(default)s)")
    args = parser.parse_args()
    data = items(args.items)
    new_seconds, new = summarize(metrics, data, args.resamples)
    old_seconds, old = summarize(old_metrics(args.old), data, args.resamples)
    a, b = values(old), values(new)
    same = a.keys() == b.keys() and all(
        (a[k] is None and b[k] is None) or (a[k] is not None and b[k] is not None and abs(a[k] - b[k]) < 1e-9)
        for k in a
    )
    table(
        f"Judge-check summary of {args.items} pairs at {args.resamples} resamples",
        ["code", "seconds", "old / new"],
        [
            [f"old ({args.old})", f"{old_seconds:.2f}", ""],
            ["new (this checkout)", f"{new_seconds:.2f}", f"{old_seconds / new_seconds:.1f}x"],
        ],
    )
    print(f"every value and interval bound equal (to 1e-9): {same} ({len(b)} numbers)")


if __name__ == "__main__":
    main()
