"""Re-scoring a finished run with another judge (``--rescore``, issue 15), against the stand-in endpoint.

The stand-in answers from the request content only, so a fresh run with the new judge is the exact reference: a
re-scored unit must get the very record that fresh run gets, while the target (and every other replayed role)
receives no request at all. ``judge2`` answers differently from ``judge1`` on the requests a test chooses (its
reply is drawn from the request plus a salt); a unit the new verdicts send down another path must end
``diverged`` and be listed, never scored.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.golden_runs import respond as golden_respond
from tests.run_files import VOLATILE as BASE_VOLATILE
from tests.run_files import unit_records
from tests.standin_endpoint import StandIn, generic_reply

VOLATILE = BASE_VOLATILE | {"session_id"}


def judge2_differs(tools: set[str] | None = None) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """``judge2`` replies differently from ``judge1`` to its structured requests of ``tools`` (None: to all)."""

    def respond(body: dict[str, Any]) -> dict[str, Any] | None:
        names = {t["function"]["name"] for t in body.get("tools") or []}
        if body.get("model") == "judge2" and (tools is None or names & tools):
            body = {**body, "messages": [*body["messages"], {"role": "system", "content": "judge2"}]}
        return golden_respond(body) or generic_reply(body)  # well-formed ATAD problems and entity labels

    return respond


def _run(out: Path, argv: list[str]) -> Path:
    from dyneval import cli as run

    before = set(out.iterdir()) if out.exists() else set()
    assert run.main(["--out", str(out), "--skip-preflight", *argv]) == 0
    (run_dir,) = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")]
    return run_dir


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def rescore_case(
    tmp_path: Path, protocol: str, roles: dict[str, str], judge_flag: str, respond, *extra: str
) -> tuple[Path, Path, Path, Counter]:
    """Source run (judge1), its re-score with judge2 at ``judge_flag``, and a fresh judge2 run: their folders, and
    the requests per model the re-score sent."""
    out = tmp_path / "runs"
    with StandIn(respond=respond) as standin:
        base = [f"--{role}={standin.spec(model)}" for role, model in roles.items()]
        source = _run(out, ["--protocol", protocol, *base, *extra])
        standin.requests.clear()
        rescored = _run(
            out, ["--protocol", protocol, "--rescore", source.name, f"{judge_flag}={standin.spec('judge2')}"]
        )
        sent = Counter(r.model for r in standin.requests)
        fresh = _run(out, ["--protocol", protocol, *base, f"{judge_flag}={standin.spec('judge2')}", *extra])
    return source, rescored, fresh, sent


def check_rescored(source: Path, rescored: Path, fresh: Path, sent: Counter) -> list[str]:
    """No request but the judges'; every unit re-scored as the fresh run scores it, or listed as diverged in
    summary and report. Returns the diverged units."""
    assert sent["judge2"] > 0 and set(sent) <= {"judge1", "judge2"}, sent  # judges only: no target, no student
    records, fresh_records = unit_records(rescored, VOLATILE), unit_records(fresh, VOLATILE)
    assert set(records) == set(unit_records(source, VOLATILE)) == set(fresh_records)
    summary = _summary(rescored)
    assert summary["rescored_from"] == source.name
    assert json.loads((rescored / "config.json").read_text())["rescored_from"] == source.name
    diverged = [u for u, r in records.items() if r["status"] == "diverged"]
    assert sorted(summary["diverged_units"]) == sorted(diverged)
    for unit, record in records.items():
        if unit not in diverged:  # llmeval names the model that answered: the replay of it
            assert record.pop("model", f"replay of {source.name}").startswith(f"replay of {source.name}")
            assert record == {k: v for k, v in fresh_records[unit].items() if k != "model"}, unit
    report = (rescored / "report.md").read_text()
    assert f"RE-SCORED from run {source.name}" in report and all(unit in report for unit in diverged)
    events = [json.loads(line) for line in (rescored / "events.jsonl").read_text().splitlines()]
    replayed = [e for e in events if e["role"] not in summary["judge_roles"]]
    assert replayed and all(e["cached"] for e in replayed)
    return diverged


def test_llmeval_rescore_sends_no_target_request_and_scores_as_a_fresh_run_with_the_new_judge(tmp_path):
    source, rescored, fresh, sent = rescore_case(
        tmp_path,
        "llmeval",
        {"target": "target", "evaluator": "judge1"},
        "--evaluator",
        judge2_differs(),
        "--limit",
        "2",
    )
    assert check_rescored(source, rescored, fresh, sent) == []
    # the new judge's scores, not the old ones
    assert unit_records(rescored, VOLATILE) != unit_records(source, VOLATILE)
    # S, R, per-paradigm and per-discipline scores; the leaderboard spans every session of the shared bank
    rescored_metrics, fresh_metrics = (
        {k: v for k, v in _summary(r)["metrics"].items() if k != "leaderboard"} for r in (rescored, fresh)
    )
    assert rescored_metrics == fresh_metrics and rescored_metrics["sessions_scored"] == 1


def test_interview_rescore_regrades_the_followups_and_keeps_the_sessions_path(tmp_path):
    """A grader that differs only on the follow-up grades: nothing later depends on them, so no session diverges
    and each one is re-scored exactly as a fresh run with that grader scores it."""
    source, rescored, fresh, sent = rescore_case(
        tmp_path,
        "interview",
        {"target": "target", "evaluator": "judge1"},
        "--grader",
        judge2_differs({"FollowUpGrade"}),
        "--limit",
        "3",
    )
    assert check_rescored(source, rescored, fresh, sent) == []
    assert unit_records(rescored, VOLATILE) != unit_records(source, VOLATILE)
    assert _summary(rescored)["metrics"] == _summary(fresh)["metrics"]


def test_llmeval_rescore_by_a_jury_instead_of_one_judge(tmp_path):
    """A judging parameter alone (--judge-jury) is a re-score too: the jury judges the replayed answers."""
    out = tmp_path / "runs"
    with StandIn(respond=judge2_differs()) as standin:
        jury = [standin.spec("judge1"), standin.spec("judge2"), standin.spec("judge2")]
        source = _run(
            out,
            [
                "--protocol",
                "llmeval",
                "--limit",
                "1",
                f"--target={standin.spec('target')}",
                f"--evaluator={standin.spec('judge1')}",
            ],
        )
        standin.requests.clear()
        rescored = _run(out, ["--protocol", "llmeval", "--rescore", source.name, "--judge-jury", *jury])
        sent = Counter(r.model for r in standin.requests)
        fresh = _run(
            out,
            [
                "--protocol",
                "llmeval",
                "--limit",
                "1",
                f"--target={standin.spec('target')}",
                f"--evaluator={standin.spec('judge1')}",
                "--judge-jury",
                *jury,
            ],
        )
    assert check_rescored(source, rescored, fresh, sent) == [] and sent["judge1"] > 0


def test_interview_rescore_lists_sessions_whose_retries_the_new_grader_changed_as_diverged(tmp_path):
    source, rescored, fresh, sent = rescore_case(
        tmp_path, "interview", {"target": "target", "evaluator": "judge1"}, "--grader", judge2_differs(), "--limit", "3"
    )
    diverged = check_rescored(source, rescored, fresh, sent)
    assert diverged  # the feedback depends on the grades, so the next target request is one never made
    assert _summary(rescored)["status_counts"]["diverged"] == len(diverged)
    assert "needs a full re-run" in unit_records(rescored, VOLATILE)[diverged[0]]["error"]


def test_judgeagent_rescore_with_other_verdicts_sends_no_target_request_and_lists_the_diverged_batches(tmp_path):
    """Other verdicts move the difficulty of the next extension round: those batches diverge, none is scored."""
    assert check_rescored(
        *rescore_case(
            tmp_path,
            "judgeagent",
            {"target": "target", "evaluator": "judge1"},
            "--evaluator",
            judge2_differs({"Verdict"}),
            "--limit",
            "2",
        )
    )


def test_atad_rescore_replays_teacher_and_student(tmp_path):
    check_rescored(
        *rescore_case(
            tmp_path,
            "atad",
            {"evaluator": "judge1", "student": "student"},
            "--orchestrator",
            judge2_differs(),
            "--limit",
            "3",
        )
    )


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--rescore", "no-such-run", "--evaluator", "x@http://127.0.0.1:9/v1"], "no run 'no-such-run'"),
        (["--rescore", "SOURCE"], "a re-score needs another judge"),
        (["--rescore", "SOURCE", "--resume", "SOURCE", "--evaluator", "x@http://127.0.0.1:9/v1"], "cannot --resume"),
        (
            ["--rescore", "SOURCE", "--evaluator", "x@http://127.0.0.1:9/v1", "--target", "y@http://127.0.0.1:9/v1"],
            "the target answers are replayed",
        ),
        (
            ["--rescore", "SOURCE", "--evaluator", "x@http://127.0.0.1:9/v1", "--trials", "2"],
            "was made with --trials 1, not 2",
        ),
    ],
)
def test_a_bad_rescore_is_one_line_and_exit_2_and_makes_no_run(tmp_path, capsys, argv, says):
    from dyneval import cli as run

    out = tmp_path / "runs"
    with StandIn() as standin:
        source = _run(
            out,
            [
                "--protocol",
                "interview",
                "--limit",
                "1",
                "--target",
                standin.spec("target"),
                "--evaluator",
                standin.spec("judge1"),
            ],
        )
        capsys.readouterr()
        standin.requests.clear()
        runs = set(out.iterdir())
        argv = [source.name if a == "SOURCE" else a for a in argv]
        assert run.main(["--protocol", "interview", "--out", str(out), *argv]) == 2
        assert standin.requests == []
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:") and says in err and "--rescore" in err
    assert set(out.iterdir()) == runs


def test_judgeagent_rescore_by_a_judge_that_agrees_replays_every_batch_to_its_end(tmp_path):
    """JudgeAgent's evaluator writes the extension questions and the feedback the validation asks about (seed 000,
    Sec. 3), so any change of its replies diverges a batch (the test above); a second judge that replies as the
    first did follows every batch to its end on replayed target answers alone."""
    source, rescored, fresh, sent = rescore_case(
        tmp_path,
        "judgeagent",
        {"target": "target", "evaluator": "judge1"},
        "--evaluator",
        judge2_differs(set()),
        "--limit",
        "2",
    )
    assert check_rescored(source, rescored, fresh, sent) == []
    statuses = {u: r["status"] for u, r in unit_records(rescored, VOLATILE).items()}
    assert statuses == {"batch-0001": "ok", "batch-0002": "ok"}


def test_a_protocol_without_target_answers_cannot_be_rescored(tmp_path, capsys):
    from dyneval import cli as run

    assert (
        run.main(
            [
                "--protocol",
                "judgecheck",
                "--out",
                str(tmp_path),
                "--rescore",
                "any-run",
                "--evaluator",
                "x@http://127.0.0.1:9/v1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--rescore" in err and "judgecheck has no stored target answers" in err
    assert list(tmp_path.iterdir()) == []


def test_a_rescore_pings_only_the_judges_before_it_starts(tmp_path):
    from dyneval import cli as run

    out = tmp_path / "runs"
    with StandIn() as standin:
        source = _run(
            out,
            [
                "--protocol",
                "llmeval",
                "--limit",
                "1",
                f"--target={standin.spec('target')}",
                f"--evaluator={standin.spec('judge1')}",
            ],
        )
        standin.requests.clear()
        assert (
            run.main(
                [
                    "--protocol",
                    "llmeval",
                    "--out",
                    str(out),
                    "--rescore",
                    source.name,
                    f"--evaluator={standin.spec('judge2')}",
                ]
            )
            == 0
        )  # with the pre-flight ping
        assert {r.model for r in standin.requests} == {"judge2"}
