"""A resumed run keeps the setup it was made with: a changed model, seed or parameter is refused (issue 15).

Finished units keep their old answers and verdicts; resuming with another evaluator would judge the rest with a
second judge and report one number over both. Settings that do not change an answer (concurrency) may change.
"""

from __future__ import annotations

import json

import pytest

from tests.standin_endpoint import StandIn


@pytest.fixture(scope="module")
def standin():
    with StandIn() as server:
        yield server


@pytest.fixture()
def finished_run(tmp_path, monkeypatch, standin):
    """An interview run of one seed question, finished, against the stand-in (target and evaluator roles)."""
    from dyneval import cli as run

    monkeypatch.setenv("DYNEVAL_TARGET", standin.spec("target"))
    monkeypatch.setenv("DYNEVAL_EVALUATOR", standin.spec("evaluator"))
    out = tmp_path / "runs"
    assert run.main(["--protocol", "interview", "--limit", "1", "--out", str(out), "--skip-preflight"]) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return out, run_dir


def _resume(out, run_dir, *extra: str) -> int:
    from dyneval import cli as run

    return run.main(
        ["--protocol", "interview", "--resume", run_dir.name, "--out", str(out), "--skip-preflight", *extra]
    )


@pytest.mark.parametrize(
    "extra, blamed",
    [
        (["--evaluator", "other@http://127.0.0.1:9/v1"], "--evaluator"),
        (["--seed", "5"], "--seed"),
        (["--max-retries", "3"], "--max-retries"),
    ],
)
def test_resume_with_a_changed_model_seed_or_parameter_is_refused_before_any_request(
    finished_run, standin, capsys, extra, blamed
):
    out, run_dir = finished_run
    config_before = (run_dir / "config.json").read_text()
    capsys.readouterr()
    standin.requests.clear()
    assert _resume(out, run_dir, *extra) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {blamed}") and "start a new run" in err[0], err
    assert standin.requests == []
    assert (run_dir / "config.json").read_text() == config_before


def test_a_changed_model_from_the_environment_is_blamed_on_the_variable(finished_run, monkeypatch, capsys):
    out, run_dir = finished_run
    monkeypatch.setenv("DYNEVAL_EVALUATOR", "other@http://127.0.0.1:9/v1")
    capsys.readouterr()
    assert _resume(out, run_dir) == 2
    err = capsys.readouterr().err
    assert "DYNEVAL_EVALUATOR" in err and "evaluator model" in err and "'other'" in err


def test_resume_with_the_same_setup_and_another_concurrency_goes_ahead_without_redoing_work(finished_run, standin):
    out, run_dir = finished_run
    results_before = (run_dir / "results.jsonl").read_text()
    standin.requests.clear()
    assert _resume(out, run_dir, "--concurrency", "4") == 0
    # the one unit was finished: no target call, no new result (the report's overall summary is written again)
    assert [r.model for r in standin.requests if r.model != "evaluator"] == []
    assert (run_dir / "results.jsonl").read_text() == results_before
    assert json.loads((run_dir / "summary.json").read_text())["status_counts"] == {"ok": 1}
