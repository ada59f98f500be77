"""Jury judging inside the interview's grader and JudgeAgent's judge (``--judge-jury``): the majority verdict of
the jury models counts; a member that gives no usable verdict does not vote; a vote without a majority leaves the
answer ungraded as a split (counted, never correct or wrong)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from dyneval.nodes.interview.grader import by_jury, grade_response
from dyneval.nodes.judgeagent.judging import grade_reply
from dyneval.protocols.interview import InterviewProtocol
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.judgecheck import SPLIT, jury_vote
from tests.conftest import make_services
from tests.fakes import ScriptedChat
from tests.test_interview_world import interviewer, math_seed, simulated_interviewee

JURY = [f"judge-{x}@http://127.0.0.1:9/v1" for x in "abc"]
SEED = {"task": "generic", "question": "Name the largest planet.", "solution": "Jupiter", "answer": "Jupiter"}


def member(verdict: str) -> ScriptedChat:
    """A jury member that always says ``correct`` or ``wrong``, or never gives a usable verdict (``broken``)."""

    def respond(messages, tool):
        if verdict == "broken":
            return {"nonsense": 1}  # not the schema, not even after the repair
        ok = verdict == "correct"
        return {"correct": ok, "error_type": "N/A" if ok else "Concept", "reason": f"says {verdict}"}

    return ScriptedChat(respond)


def _services(tmp_path, verdicts):
    return make_services(tmp_path, chats={ref: member(v) for ref, v in zip(JURY, verdicts)})


def _interview(tmp_path, verdicts):
    svc = _services(tmp_path, verdicts)
    return by_jury(svc, JURY, lambda g: grade_response(svc, SEED, SEED["question"], "", "Saturn, I think.", grader=g))


def _judgeagent(tmp_path, verdicts):
    svc = _services(tmp_path, verdicts)
    return grade_reply(
        svc, "Name the largest planet.", "Jupiter", "Saturn, I think.", None, step="base_judge", jury=JURY
    )


def test_jury_vote_counts_graded_members_only_and_a_tie_is_split():
    results = [{"verdict": "correct", "n": 0}, {"verdict": "wrong", "n": 1}, {"verdict": "wrong", "n": 2}]
    assert jury_vote(results) == ("wrong", results[1], "correct, wrong, wrong")
    results[2] = {"verdict": "ungraded", "n": 2}
    assert jury_vote(results)[0] == SPLIT and jury_vote(results)[2] == "correct, wrong, ungraded"
    assert jury_vote([{"verdict": "ungraded"}] * 3)[0] is None


def test_interview_two_of_three_majority_counts_with_its_tally(tmp_path):
    out = _interview(tmp_path, ("correct", "wrong", "correct"))
    assert (out["verdict"], out["correct"], out["graded_by"]) == ("correct", True, "grader")
    assert out["jury"] == "correct, wrong, correct" and out["reason"].startswith("jury (correct, wrong, correct)")


def test_interview_three_member_split_is_ungraded_never_correct_or_wrong(tmp_path):
    out = _interview(tmp_path, ("correct", "wrong", "broken"))  # the third fails: one vote each
    assert (out["verdict"], out["correct"], out["score"], out["graded_by"]) == ("ungraded", None, None, "split")
    assert "no majority (correct, wrong, ungraded)" in out["reason"]


def test_interview_a_failed_member_does_not_vote_and_all_failed_is_ungraded(tmp_path):
    out = _interview(tmp_path, ("broken", "wrong", "wrong"))
    assert (out["verdict"], out["correct"]) == ("wrong", False) and out["jury"] == "ungraded, wrong, wrong"
    out = _interview(tmp_path / "all", ("broken", "broken", "broken"))
    assert (out["verdict"], out["graded_by"]) == ("ungraded", "ungraded")


def test_judgeagent_majority_split_and_member_failure(tmp_path):
    out = _judgeagent(tmp_path / "a", ("wrong", "correct", "wrong"))
    assert (out["verdict"], out["correct"], out["how"], out["jury"]) == (
        "wrong",
        False,
        "evaluator",
        "wrong, correct, wrong",
    )
    out = _judgeagent(tmp_path / "b", ("broken", "correct", "wrong"))
    assert (out["verdict"], out["correct"], out["how"]) == ("ungraded", None, "split")
    assert "no majority (ungraded, correct, wrong)" in out["error"]
    out = _judgeagent(tmp_path / "c", ("correct", "broken", "correct"))
    assert (out["verdict"], out["correct"], out["jury"]) == ("correct", True, "correct, ungraded, correct")


def test_judgeagent_code_decisions_need_no_jury(tmp_path):
    svc = _services(tmp_path, ("broken", "broken", "broken"))
    out = grade_reply(svc, "Pick one.", "B", "B", ["x", "y"], step="base_judge", jury=JURY)
    assert (out["verdict"], out["how"]) == ("correct", "code")
    assert all(not svc.chat_overrides[ref].calls for ref in JURY)


def test_an_interview_with_a_split_jury_stops_the_session_and_the_report_counts_the_split(tmp_path):
    data = tmp_path / "seeds.jsonl"
    data.write_text(json.dumps(math_seed(1)) + "\n")
    config = RunConfig(
        protocol="interview",
        out=str(tmp_path / "runs"),
        params={"data": str(data), "judge_jury": JURY, "single_turn_judge": False},
    )
    chats = {
        "target": simulated_interviewee(1.0, salt="jury"),
        "evaluator": ScriptedChat(interviewer),
        **{ref: member(v) for ref, v in zip(JURY, ("correct", "wrong", "broken"))},
    }
    run = open_run(
        InterviewProtocol(),
        config,
        run_id=None,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    summary = execute(InterviewProtocol(), run, skip_preflight=True)
    m = summary["metrics"]
    assert m["graded_by"] == {"split": 1} and m["score@1"] is None
    assert m["denominators"]["score@1"] == {"n": 0, "ungraded": 1}
    record = json.loads((run.run_dir / "results.jsonl").read_text().splitlines()[0])
    assert "the grader jury split" in record["stopped"]
    assert "or (1 of them) the grader jury split without a majority" in (run.run_dir / "report.md").read_text()


@pytest.mark.parametrize("protocol", ["interview", "judgeagent"])
def test_a_bad_jury_reference_exits_2_naming_the_flag_before_anything_is_created(tmp_path, capsys, protocol):
    from dyneval.cli import main

    out = tmp_path / "runs"
    assert main(["--protocol", protocol, "--judge-jury", "local", "nonsense", "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--judge-jury" in err and "nonsense" in err and "\n" not in err
    assert not out.exists()
