"""ATAD peak memory against the size of the run: generation runs by problems, evaluation runs by answers.

    python -m bench.atad_memory [--sizes 300,2100] [--answers 700,2100,20000] [--concurrency 16] [--latency 0]

Every size is a full CLI run (``python run.py --protocol atad ...``) in a subprocess against the
content-deterministic stand-in endpoint (``bench.speed``'s, ``--latency`` seconds per request), so the figures
include the run, its summary (Table 1's intervals) and its report, nothing simulated:

* generation (``--sizes``, problems): ``--per-task ceil(N/7) --limit N``, every role on the stand-in;
* evaluation (``--answers``, answers): ``--evaluate examinee@stand-in --benchmark FILE`` over a benchmark of N
  distinct finalized problems (the shipped sample's seven, one per task, each repeated with a numbered sentence
  so that no two are copies), one answer each. The report phase is the run's own ``writing summary and report:
  done in X s`` line: its share of the run's wall is printed per size.

A row per size: peak RSS of the run process in MB (``ru_maxrss`` of that child alone, from ``os.wait4``, so
neither the stand-in nor an earlier run counts) and its wall seconds; then the ratio of the largest size's peak to
the smallest's. Targets (docs/statistics.md): evaluation peak at 20,000 answers within 1.2x of 700, report phase
under 10 % of the wall at 700.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.speed import ROLES, _env, standin  # noqa: E402
from bench.tables import table  # noqa: E402

SAMPLE = REPO / "samples" / "atad" / "benchmark.jsonl"
WRITING = re.compile(r"writing summary and report: done in ([0-9.]+) s")


def number_first_text(problem: Any, k: int) -> bool:
    """Append `` (k)`` to the first text of ``problem`` (depth first); False where it holds none."""
    items = problem.items() if isinstance(problem, dict) else enumerate(problem) if isinstance(problem, list) else []
    for key, value in items:
        if isinstance(value, str):
            problem[key] = f"{value} ({k})"
            return True
        if number_first_text(value, k):
            return True
    return False


def write_benchmark(path: Path, problems: int) -> None:
    """``problems`` distinct finalized problems: the sample's seven in turn, the k-th copy's first text numbered
    (``(k)``) so that every problem differs from the others."""
    sample = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as out:
        for i in range(problems):
            item = json.loads(json.dumps(sample[i % len(sample)]))
            k = i // len(sample)
            item["id"] = f"{item['id']}-{k}"
            for key in ("problem", "base_problem"):
                number_first_text(item[key], k)
            out.write(json.dumps(item) + "\n")


def measure(argv: list[str]) -> tuple[float, float, str]:
    """Peak RSS (MB), wall seconds and stdout of one run (``RuntimeError`` with its stderr if it fails)."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        started = time.time()
        proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - started
        if os.waitstatus_to_exitcode(status) != 0:
            stderr.seek(0)
            raise RuntimeError(f"{' '.join(argv[2:6])} exited {status}: {stderr.read()[-2000:]}")
        stdout.seek(0)
        return usage.ru_maxrss / 1024, wall, stdout.read()  # kB on Linux


def generation(problems: int, url: str, concurrency: int, out: str) -> list[str]:
    return [
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


def evaluation(answers: int, url: str, concurrency: int, out: str) -> list[str]:
    bench = Path(out) / "benchmark.jsonl"
    write_benchmark(bench, answers)
    return [
        sys.executable,
        "run.py",
        "--protocol",
        "atad",
        "--evaluate",
        f"examinee@{url}",
        "--benchmark",
        str(bench),
        "--concurrency",
        str(concurrency),
        "--skip-preflight",
        "--out",
        str(Path(out) / "runs"),
    ]


def sizes(text: str) -> list[int]:
    return sorted(int(x) for x in text.split(",") if x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,2100", help="generation: problems per run, comma separated ('' skips)")
    parser.add_argument("--answers", default="700,2100,20000", help="evaluation: answers per run ('' skips)")
    parser.add_argument("--concurrency", type=int, default=16, help="units in flight at once")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request at the stand-in")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; stand-in latency {args.latency}s per request")
    with standin(args.latency) as url:
        for name, make, counted in (
            ("generation", generation, sizes(args.sizes)),
            ("evaluation", evaluation, sizes(args.answers)),
        ):
            if not counted:
                continue
            rows, peaks = [], {}
            for n in counted:
                with tempfile.TemporaryDirectory() as out:
                    peaks[n], wall, stdout = measure(make(n, url, args.concurrency, out))
                found = WRITING.search(stdout)
                writing = float(found.group(1)) if found else float("nan")
                rows.append([n, f"{peaks[n]:.0f}", f"{wall:.1f}", f"{writing:.1f}", f"{100 * writing / wall:.1f} %"])
            unit = "problems" if name == "generation" else "answers"
            table(
                f"ATAD {name}: peak RSS of the run process",
                [unit, "peak RSS MB", "wall s", "report phase s", "report share of wall"],
                rows,
            )
            print(
                f"\npeak RSS at {counted[-1]} / at {counted[0]} {unit}: {peaks[counted[-1]] / peaks[counted[0]]:.2f}\n"
            )


if __name__ == "__main__":
    main()
