"""ATAD peak memory against the number of problems: one entry point, figures and their ratio measured in this run.

    python -m bench.atad_memory [--sizes 300,2100] [--concurrency 16] [--latency 0]

Each size is ``python run.py --protocol atad --per-task ceil(N/7) --limit N --skip-preflight`` in a subprocess
against the content-deterministic stand-in endpoint (``bench.speed``'s, ``--latency`` seconds per request), every
role on it. A row per size: problems, peak RSS of the run process in MB (``ru_maxrss`` of that child alone, from
``os.wait4``, so neither the stand-in nor an earlier run counts) and its wall seconds; then the ratio of the largest
size's peak to the smallest's (the run keeps no per-problem data beyond what its summary needs, so about 1).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.speed import ROLES, _env, standin  # noqa: E402
from bench.tables import table  # noqa: E402


def peak_rss(problems: int, url: str, concurrency: int) -> tuple[float, float]:
    """Peak RSS (MB) and wall seconds of one ATAD run of ``problems`` problems."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as stderr:
        argv = [
            sys.executable,
            "run.py",
            "--protocol",
            "atad",
            "--per-task",
            str(-(-problems // 7)),
            "--limit",
            str(problems),
            "--concurrency",
            str(concurrency),
            "--skip-preflight",
            "--out",
            out,
            *[x for role in ROLES for x in (f"--{role}", f"{role}@{url}")],
        ]
        started = time.time()
        proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - started
        if proc.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(f"atad at {problems} problems exited {proc.returncode}: {stderr.read()[-2000:]}")
    return usage.ru_maxrss / 1024, wall  # kB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,2100", help="problems per run, comma separated")
    parser.add_argument("--concurrency", type=int, default=16, help="units in flight at once")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request at the stand-in")
    args = parser.parse_args()
    sizes = sorted(int(x) for x in args.sizes.split(",") if x)
    print(f"machine: {os.cpu_count()} cores; stand-in latency {args.latency}s per request")
    rows, peaks = [], {}
    with standin(args.latency) as url:
        for problems in sizes:
            peaks[problems], wall = peak_rss(problems, url, args.concurrency)
            rows.append([problems, args.concurrency, f"{peaks[problems]:.0f}", f"{wall:.1f}"])
    table("ATAD peak RSS of the run process", ["problems", "concurrency", "peak RSS MB", "wall s"], rows)
    print(f"\npeak RSS at {sizes[-1]} / at {sizes[0]} problems: {peaks[sizes[-1]] / peaks[sizes[0]]:.2f}")


if __name__ == "__main__":
    main()
