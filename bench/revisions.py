"""Calls per second of two (or more) git revisions, measured in one run (issue 14): how the per-call figures in the
commit messages of a speed change were obtained.

    python -m bench.revisions REV [REV ...] [--runs 4] [--concurrency 16] [--per-task 30]

Each revision is checked out into a temporary git worktree (run by this interpreter, whose virtualenv serves them
all); every round runs ATAD once per revision, in turn, against one stand-in endpoint at zero latency
(``bench.speed``'s, in its own process), so a noisy moment of a shared machine falls on all of them alike. Per
revision: the calls per second of each run's units phase, their median, the median CPU milliseconds per call in
the units phase (the run's /proc time, as ``bench.speed``'s ``calls`` part) and the ratio of the median calls/s
to the first revision's.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bench.speed as speed  # noqa: E402
from bench.tables import table  # noqa: E402


def units_phase(checkout: Path, url: str, concurrency: int, per_task: int) -> dict[str, float]:
    """One ATAD run of ``checkout`` (its ``run.py``): its units phase's figures (``bench.speed.units_phase_cpu``)."""
    speed.REPO = checkout
    try:
        with tempfile.TemporaryDirectory() as out:
            run = speed.run_cli("atad", ["--per-task", str(per_task)], url, concurrency, Path(out))
    finally:
        speed.REPO = REPO
    return speed.units_phase_cpu(run, concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revisions", nargs="+", help="git revisions (the first is the reference of the ratios)")
    parser.add_argument("--runs", type=int, default=4, help="rounds (one run of each revision per round)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--per-task", type=int, default=30, help="ATAD problems per task")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {rev: [] for rev in args.revisions}
    with tempfile.TemporaryDirectory() as trees:
        checkouts = {}
        for i, rev in enumerate(args.revisions):
            checkouts[rev] = Path(trees) / f"rev{i}"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(checkouts[rev]), rev], check=True
            )
        try:
            with speed.standin(0.0) as url:
                for _ in range(args.runs):
                    for rev in args.revisions:
                        results[rev].append(units_phase(checkouts[rev], url, args.concurrency, args.per_task))
        finally:
            for checkout in checkouts.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(checkout)], check=False)
    reference = statistics.median(r["calls_per_s"] for r in results[args.revisions[0]])
    rows: list[list[Any]] = []
    for rev, runs in results.items():
        median = statistics.median(r["calls_per_s"] for r in runs)
        rows.append(
            [
                rev,
                " ".join(f"{r['calls_per_s']:.0f}" for r in runs),
                f"{median:.0f}",
                f"{statistics.median(r['cpu_ms_per_call'] for r in runs):.2f}",
                f"{median / reference:.2f}",
            ]
        )
    table(
        f"ATAD calls/s at zero latency, --concurrency {args.concurrency}, {args.runs} rounds",
        ["revision", "calls/s per run", "median", "CPU ms/call (median)", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
