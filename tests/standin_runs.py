"""Small real runs of each protocol through the CLI against the stand-in endpoint (as the golden runs make them,
:mod:`tests.golden_runs`), kept on disk so a test reads their ``summary.json``, records and report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dyneval import cli
from tests.golden_runs import CASES, _clean_environment, respond, run_cli
from tests.standin_endpoint import StandIn

#: The golden cases, JudgeAgent with two batches (one batch has no spread between batches), and judgecheck with a
#: jury of two judges in the pairwise mode (accuracy in both orders) and in the correctness mode.
RUNS: dict[str, list[str]] = {
    **{name: args for name, args in CASES.items() if name != "judgeagent"},
    "judgeagent": ["--protocol", "judgeagent", "--limit", "2", "--concurrency", "2"],
    "judgecheck_pairwise": [
        "--protocol",
        "judgecheck",
        "--judge",
        "pairwise",
        "--limit",
        "6",
        "--jury",
        "judge_one@{URL}",
        "judge_two@{URL}",
        "--bootstrap-resamples",
        "200",
    ],
    "judgecheck_correctness": [
        "--protocol",
        "judgecheck",
        "--judge",
        "interview.grader",
        "--limit",
        "6",
        "--bootstrap-resamples",
        "200",
    ],
}


def run(name: str, workdir: Path) -> Path:
    """Run ``RUNS[name]`` against a fresh stand-in; the run's directory."""
    out = workdir / name
    with StandIn(respond=respond) as standin, _clean_environment():
        run_cli(name, RUNS[name], standin, out)
    return next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_"))


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def records(run_dir: Path) -> list[dict[str, Any]]:
    """The last record of each unit."""
    latest = {}
    for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            latest[r["unit_id"]] = r
    return list(latest.values())


def two_unit_interview(out: Path) -> int:
    """The exit code of an interview run of two units (two questions each) into ``out``, against a fresh stand-in
    (no pre-flight)."""
    with StandIn() as standin:
        return cli.main(
            ["--protocol", "interview", "--target", standin.spec("t"), "--evaluator", standin.spec("j")]
            + ["--out", str(out), "--limit", "2", "--max-questions", "2", "--skip-preflight"]
        )
