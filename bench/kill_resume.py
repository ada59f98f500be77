"""kill -9 at random moments, resume until done: does any unit end differently from an uninterrupted run?

Runs ``run.py --protocol interview`` in subprocesses against the stand-in endpoint
(``tests/standin_endpoint.py``: answers depend only on the request content). First
one uninterrupted run (the reference); then chains: start a run, ``kill -9`` it
after a random number of requests (plus a random fraction of a call), resume it,
kill it again ..., and finally resume it to the end. Each kill is one trial.

Per unit, a chain must end with exactly one final record, equal to the reference's
(timings and usage aside); the unit's calls (distinct request contents from the
event log, in order; a request in flight at a kill never reached the log, a call
of a node that had not saved its writes is repeated after the resume) equal the
reference's; the summary metrics equal the reference's; and the chain sent no
request content the reference did not (the stand-in's own log).

    python bench/kill_resume.py [--trials 30] [--budget-s 300] [--repo PATH]

``--repo`` runs another checkout's run.py (e.g. a ``git worktree`` of an older
commit) to measure it the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FINAL = {"ok", "model_error"}
_VOLATILE = {"wall_s", "usage", "traceback"}


@dataclass
class Outcome:
    """What a set of chains showed."""

    kills: int = 0
    chains: int = 0
    sessions: int = 0
    units: int = 0
    wrong_units: list[str] = field(default_factory=list)  # final record or calls differ from the reference
    metric_mismatches: int = 0
    unknown_requests: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.kills} kills in {self.chains} chains ({self.sessions} sessions, {self.seconds:.0f} s): "
            f"{len(self.wrong_units)} of {self.units} units ended differently from the uninterrupted run, "
            f"{self.metric_mismatches} summaries with other metrics, "
            f"{self.unknown_requests} request contents the reference never sent"
        )


class Standin:
    """``python -m tests.standin_endpoint`` in a subprocess, logging every request to a file."""

    def __init__(self, log: Path, latency: float) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.standin_endpoint", "--log", str(log), "--latency", str(latency)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()

    def count(self) -> int:
        return self.log.read_bytes().count(b"\n") if self.log.exists() else 0

    def keys(self, start: int = 0) -> set[str]:
        lines = self.log.read_text().splitlines()[start:] if self.log.exists() else []
        return {json.loads(line)["key"] for line in lines}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def session(
    repo: Path, args: list[str], standin: Standin, kill_after: int | None, pause_s: float, timeout_s: float = 120
) -> bool:
    """Run ``run.py args``; kill -9 it once the stand-in saw ``kill_after`` more requests. True if it was killed."""
    start = standin.count()
    proc = subprocess.Popen(
        [sys.executable, "run.py", *args],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "300"},
    )
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_after is not None and standin.count() - start >= kill_after:
                time.sleep(pause_s)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    return True
            time.sleep(0.003)
        if proc.poll() is None:
            raise TimeoutError(f"run.py {' '.join(args)} did not end in {timeout_s} s")
    finally:
        if proc.poll() is None:
            proc.kill()
        stderr = proc.stderr.read()
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"run.py {' '.join(args)} exited {proc.returncode}: {stderr[-2000:]}")
    return False


def _run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir() and not d.name.startswith("_")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # an older version may leave a torn line
    return out


def unit_view(run_dir: Path) -> tuple[dict[str, list[dict]], dict[str, list[str]], dict[str, Any]]:
    """Final records per unit, distinct calls per unit (in order), summary metrics."""
    finals: dict[str, list[dict]] = {}
    for r in _lines(run_dir / "results.jsonl"):
        if r.get("status") in FINAL:
            finals.setdefault(r["unit_id"], []).append({k: v for k, v in r.items() if k not in _VOLATILE})
    calls: dict[str, list[str]] = {}
    for e in _lines(run_dir / "events.jsonl"):
        if e.get("error") is None and e.get("unit") != "-":
            key = hashlib.sha256(json.dumps([e["step"], e["messages"]], sort_keys=True).encode()).hexdigest()
            seq = calls.setdefault(e["unit"], [])
            if key not in seq:
                seq.append(key)
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    return finals, calls, metrics


def run_trials(
    trials: int,
    budget_s: float,
    work: Path,
    repo: Path = REPO,
    kills_per_chain: int = 6,
    seed: int = 0,
    latency: float = 0.01,
) -> Outcome:
    rng = random.Random(seed)
    outcome = Outcome()
    started = time.monotonic()
    standin = Standin(work / "standin.jsonl", latency)
    try:
        base = [
            "--protocol",
            "interview",
            "--target",
            f"target@{standin.url}",
            "--evaluator",
            f"judge@{standin.url}",
            "--concurrency",
            "2",
        ]
        ref_out = work / "reference"
        first = standin.count()
        session(repo, [*base, "--out", str(ref_out)], standin, None, 0)
        reference_keys = standin.keys(first)
        ref_finals, ref_calls, ref_metrics = unit_view(_run_dir(ref_out))
        while outcome.kills < trials and time.monotonic() - started < budget_s:
            outcome.chains += 1
            out = work / f"chain-{outcome.chains}"
            first = standin.count()
            args = [*base, "--out", str(out)]
            for _ in range(kills_per_chain):
                outcome.sessions += 1
                killed = session(repo, args, standin, rng.randint(1, 20), rng.uniform(0, 3 * latency))
                if not killed:
                    break
                outcome.kills += 1
                args = ["--protocol", "interview", "--resume", _run_dir(out).name, "--out", str(out)]
            else:
                outcome.sessions += 1
                session(repo, args, standin, None, 0)
            finals, calls, metrics = unit_view(_run_dir(out))
            for uid, expected in ref_finals.items():
                outcome.units += 1
                if finals.get(uid) != expected or calls.get(uid) != ref_calls.get(uid):
                    outcome.wrong_units.append(f"chain-{outcome.chains}/{uid}")
            outcome.metric_mismatches += metrics != ref_metrics
            outcome.unknown_requests += len(standin.keys(first) - reference_keys)
    finally:
        standin.close()
    outcome.seconds = time.monotonic() - started
    return outcome


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30, help="kills to make")
    parser.add_argument("--budget-s", type=float, default=300, help="start no new chain after this many seconds")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose run.py is measured")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_trials(args.trials, args.budget_s, Path(tmp), repo=args.repo.resolve(), seed=args.seed)
    print(outcome.line())
    for unit in outcome.wrong_units:
        print("  differs:", unit)


if __name__ == "__main__":
    main()
