"""The Python API (issue 15): ``run.evaluate`` called as a user would from a notebook, against the stand-in.

It runs a protocol with the command line's options by their Python names and returns the results (summary,
records, run folder) instead of printing them and returning an exit code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dyneval.state.errors import InputError
from tests.standin_endpoint import StandIn

REPO = Path(__file__).resolve().parents[1]


def test_evaluate_returns_the_summary_and_records_the_command_line_run_writes(tmp_path, capsys):
    from dyneval import evaluate
    from dyneval.cli import main

    with StandIn() as standin:
        result = evaluate(
            "interview",
            target=standin.spec("target"),
            evaluator=standin.spec("judge"),
            out=str(tmp_path / "api"),
            limit=2,
            max_questions=1,
            skip_preflight=True,
        )
        assert capsys.readouterr().out == ""  # quiet: the results are returned, not printed
        assert (
            main(
                [
                    "--protocol",
                    "interview",
                    "--target",
                    standin.spec("target"),
                    "--evaluator",
                    standin.spec("judge"),
                    "--out",
                    str(tmp_path / "cli"),
                    "--limit",
                    "2",
                    "--max-questions",
                    "1",
                    "--skip-preflight",
                ]
            )
            == 0
        )
    (cli,) = [p for p in (tmp_path / "cli").iterdir() if p.is_dir()]
    assert result.run_dir.parent == tmp_path / "api" and result.run_id == result.run_dir.name
    assert result.summary == json.loads((result.run_dir / "summary.json").read_text())
    assert result.metrics == result.summary["metrics"] and result.stopped is None
    assert [r["status"] for r in result.records] == ["ok", "ok"]
    cli_records = {json.loads(line)["unit_id"]: json.loads(line) for line in (cli / "results.jsonl").open()}
    assert [r["unit_id"] for r in result.records] == [json.loads(u)["id"] for u in (cli / "units.jsonl").open()]
    for record in result.records:
        assert {k: v for k, v in record.items() if k not in ("wall_s", "usage")} == {
            k: v for k, v in cli_records[record["unit_id"]].items() if k not in ("wall_s", "usage")
        }
    assert json.loads((result.run_dir / "config.json").read_text())["params"] == {"max_questions": 1}


def test_evaluate_returns_a_run_its_budget_stopped_and_resumes_it(tmp_path):
    from dyneval import evaluate

    with StandIn() as standin:
        options = dict(
            target=standin.spec("target"),
            evaluator=standin.spec("judge"),
            out=str(tmp_path),
            limit=2,
            skip_preflight=True,
            concurrency=1,
        )
        stopped = evaluate("interview", max_calls=3, **options)
        assert stopped.stopped and "--max-calls 3" in stopped.stopped["budget"]
        assert stopped.summary["usage"]["calls"] == 3 and len(stopped.records) < 2
        resumed = evaluate("interview", resume=stopped.run_id, max_calls=10**6, **options)
    assert resumed.run_dir == stopped.run_dir and resumed.stopped is None
    assert [r["status"] for r in resumed.records] == ["ok", "ok"]


def test_evaluate_rescores_a_run_with_another_judge(tmp_path):
    from dyneval import evaluate

    with StandIn() as standin:
        first = evaluate(
            "llmeval",
            target=standin.spec("target"),
            evaluator=standin.spec("judge"),
            out=str(tmp_path),
            limit=1,
            skip_preflight=True,
        )
        standin.requests.clear()
        again = evaluate("llmeval", rescore=first.run_id, evaluator=standin.spec("judge2"), out=str(tmp_path))
        assert {r.model for r in standin.requests} == {"judge2"}
    assert again.summary["rescored_from"] == first.run_id and again.summary["diverged_units"] == []


@pytest.mark.parametrize(
    "options, says",
    [
        ({"targett": "x@http://127.0.0.1:9/v1"}, "unknown option(s) targett"),
        ({"max_questions": 0}, "--max-questions"),
        ({"rescore": "no-such-run", "evaluator": "x@http://127.0.0.1:9/v1"}, "no run 'no-such-run'"),
        # the executor is the command line's: Ray without its database is refused, not run on threads instead
        ({"executor": "ray", "target": "x@http://127.0.0.1:9/v1"}, "--executor ray needs --postgres-dsn"),
    ],
)
def test_bad_options_raise_an_input_error_before_anything_runs(tmp_path, options, says):
    from dyneval import evaluate

    with pytest.raises(InputError) as error:
        evaluate("interview", out=str(tmp_path / "runs"), skip_preflight=True, **options)
    assert says in str(error.value)
    assert not (tmp_path / "runs").exists()


def test_a_rescore_stopped_by_its_budget_resumes_still_replaying_the_target(tmp_path):
    from dyneval import evaluate

    with StandIn() as standin:
        first = evaluate(
            "interview",
            target=standin.spec("target"),
            evaluator=standin.spec("judge"),
            out=str(tmp_path),
            limit=2,
            skip_preflight=True,
            concurrency=1,
        )
        standin.requests.clear()
        stopped = evaluate(
            "interview",
            rescore=first.run_id,
            evaluator=standin.spec("judge2"),
            out=str(tmp_path),
            skip_preflight=True,
            max_calls=2,
            concurrency=1,
        )
        assert stopped.stopped and stopped.summary["rescored_from"] == first.run_id
        resumed = evaluate("interview", resume=stopped.run_id, max_calls=10**6, out=str(tmp_path), skip_preflight=True)
        assert "target" not in {r.model for r in standin.requests}
    assert resumed.summary["rescored_from"] == first.run_id and resumed.stopped is None
    assert len(resumed.records) == 2


def test_evaluate_runs_a_mode_without_units_and_takes_one_file_for_a_list_option(tmp_path):
    """ATAD's --evaluate mode with ``benchmark=`` one path (the flag takes several), then llmeval's leaderboard."""
    from dyneval import evaluate
    from tests.golden_runs import respond

    with StandIn(respond=respond) as standin:
        scored = evaluate(
            "atad",
            evaluate=[standin.spec("examinee")],
            evaluator=standin.spec("judge"),
            benchmark=str(REPO / "samples" / "atad" / "benchmark.jsonl"),
            out=str(tmp_path),
            skip_preflight=True,
        )
        assert {r.model for r in standin.requests} == {"examinee"}  # scored in code against the answer keys
    assert scored.records and all(r["status"] == "ok" for r in scored.records)
    board = evaluate("llmeval", leaderboard=True, out=str(tmp_path), skip_preflight=True)
    assert board.records == [] and "leaderboard" in board.summary and board.metrics == {}
