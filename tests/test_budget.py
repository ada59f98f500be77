"""Run budgets (``--max-calls``, ``--max-tokens``, issue 15) against the stand-in endpoint.

A budgeted run stops launching requests once the budget is spent, lets the requests in flight finish (at most one
per unit in flight beyond the budget), writes a partial summary and report that say the budget stopped it, exits
with code 3, and a ``--resume`` with a higher budget ends with the very results of an unbudgeted run.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dyneval.runtime import stop
from tests.run_files import unit_records
from tests.standin_endpoint import StandIn

CONCURRENCY = 2


def _interview(out: Path, standin: StandIn, *extra: str) -> tuple[int, Path]:
    from dyneval import cli as run

    before = set(out.iterdir()) if out.exists() else set()
    code = run.main(
        [
            "--protocol",
            "interview",
            "--limit",
            "3",
            "--out",
            str(out),
            "--skip-preflight",
            "--concurrency",
            str(CONCURRENCY),
            "--target",
            standin.spec("target"),
            "--evaluator",
            standin.spec("evaluator"),
            *extra,
        ]
    )
    (run_dir,) = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")] or [None]
    return code, run_dir


@pytest.mark.parametrize("flag, limit", [("--max-calls", 10), ("--max-tokens", 250)])
def test_a_spent_budget_stops_the_run_within_one_round_and_a_resume_with_more_ends_as_an_unbudgeted_run(
    tmp_path, capsys, flag, limit
):
    from dyneval import cli as run

    # An idle thread pool of the caller's (a library's, a notebook's) is alive throughout: a stopped run returns
    # its code to an in-process caller, it does not end the caller's process (only the command exits past threads).
    with ThreadPoolExecutor(1) as idle, StandIn(latency_s=0.02) as standin:
        idle.submit(int).result()
        _, full = _interview(tmp_path / "full", standin)
        full_usage = json.loads((full / "summary.json").read_text())["usage"]
        standin.requests.clear()

        code, stopped = _interview(tmp_path / "runs", standin, flag, str(limit))
        assert code == run.EXIT_BUDGET
        sent = len(standin.requests)
        summary = json.loads((stopped / "summary.json").read_text())
        spent = (
            summary["usage"]["calls"]
            if flag == "--max-calls"
            else summary["usage"]["prompt_tokens"] + summary["usage"]["completion_tokens"]
        )
        per_call = 1 if flag == "--max-calls" else 25  # the stand-in reports 20 + 5 tokens per reply
        assert limit <= spent <= limit + CONCURRENCY * per_call  # at most the requests already in flight beyond it
        assert sent == summary["usage"]["calls"] < full_usage["calls"]
        assert summary["interrupted"]["budget"] and f"{flag} {limit}" in summary["interrupted"]["budget"]
        assert "the budget is spent" in (stopped / "report.md").read_text()
        out = capsys.readouterr().out
        assert "budget is spent" in out and f"{flag} {limit}" in out and "--resume" in out
        assert not stop.stopped()  # a node called next in this process (an app importing ours) is not refused

        code, resumed = _interview(tmp_path / "runs", standin, "--resume", stopped.name, flag, str(10**6))
    assert code == 0 and resumed is None  # the resume continues in the stopped run's own folder
    assert unit_records(stopped) == unit_records(full)
    assert json.loads((stopped / "summary.json").read_text())["interrupted"] is None


def test_a_budget_of_zero_or_text_is_one_line_and_exit_2(tmp_path, capsys):
    from dyneval import cli as run

    for value, says in (("0", "greater than or equal to 1"), ("many", "invalid int")):
        assert run.main(["--protocol", "interview", "--out", str(tmp_path), "--max-calls", value]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--max-calls" in err and says in err


def test_the_budget_is_read_from_the_environment(tmp_path, capsys, monkeypatch):
    from dyneval import cli as run

    monkeypatch.setenv("DYNEVAL_MAX_TOKENS", "0")
    assert run.main(["--protocol", "interview", "--out", str(tmp_path)]) == 2
    assert "DYNEVAL_MAX_TOKENS" in capsys.readouterr().err
