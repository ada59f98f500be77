"""Ungraded work is re-judged on resume (issue 11) through the batch runner, for the protocols' own
``ungraded()``: a run whose judge failed records its units as ``ungraded`` (not final); ``--resume`` with a
working judge re-judges them from the checkpoint before the first ungraded verdict, and every unit ends
exactly as in a run whose judge never failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from tests.fakes import ScriptedChat
from tests.test_interview_world import grader, interviewer, math_seed, simulated_interviewee
from tests.test_judgeagent_support import FakeEvaluator, write_kb


class Switch:
    """A responder that returns unusable structured output while ``broken`` is set."""

    def __init__(self, responder: Any, broken: bool, tool: str | None = None) -> None:
        self.responder, self.broken, self.tool = responder, broken, tool

    def __call__(self, messages: list, tool: dict | None) -> Any:
        if self.broken and tool and (self.tool is None or tool["function"]["name"] == self.tool):
            return {"nonsense": True}
        return self.responder(messages, tool)


def _records(run: Any) -> dict[str, dict[str, Any]]:
    lines = (run.run_dir / "results.jsonl").read_text().splitlines()
    return {r["unit_id"]: r for r in map(json.loads, lines)}  # the latest record per unit


def _interview(tmp_path: Path, out: str, grade: Switch, run_id: str | None = None) -> Any:
    data = tmp_path / "seeds.jsonl"
    data.write_text("".join(json.dumps(math_seed(i)) + "\n" for i in range(3)))
    config = RunConfig(
        protocol="interview",
        out=str(tmp_path / out),
        concurrency=1,
        params={"data": str(data), "max_retries": 1, "max_questions": 2, "summarize": False},
    )
    chats = {
        "target": simulated_interviewee(0.5, salt="resume"),
        "evaluator": ScriptedChat(interviewer),
        "grader": ScriptedChat(grade),
    }
    from dyneval.protocols.interview import InterviewProtocol

    run = open_run(
        InterviewProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    execute(InterviewProtocol(), run, skip_preflight=True)
    return run


def _sessions(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        u: (
            r["status"],
            [(i["attempt"], i["verdict"]) for i in r["seed_interactions"]],
            [(i["q"], i["verdict"]) for i in r["followup_results"]],
            r["single_turn"].get("verdict"),
        )
        for u, r in records.items()
    }


def test_interview_sessions_stopped_by_a_failing_grader_are_rejudged_on_resume(tmp_path):
    clean = _sessions(_records(_interview(tmp_path, "clean", Switch(grader, broken=False))))
    failing = Switch(grader, broken=True)
    first = _interview(tmp_path, "runs", failing)
    stopped = _records(first)
    assert {r["status"] for r in stopped.values()} == {"ungraded"}
    assert all(r["stopped"] and not r["followup_results"] for r in stopped.values())
    failing.broken = False
    resumed = _records(_interview(tmp_path, "runs", failing, run_id=first.run_dir.name))
    assert _sessions(resumed) == clean
    assert {r["status"] for r in resumed.values()} == {"ok"}


def _judgeagent(tmp_path: Path, evaluator: Switch, run_id: str | None = None) -> Any:
    from dyneval.protocols.judgeagent import JudgeAgentProtocol

    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "questions.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"Who built the Voss Canal, case {i}?", "answer": "Mira Stolt"})
            + "\n"
            for i in range(4)
        )
    )
    config = RunConfig(
        protocol="judgeagent",
        out=str(tmp_path / "runs"),
        concurrency=1,
        params={"data": str(data), "kb": str(write_kb(tmp_path / "kb")), "batch_size": 2, "rounds": 1},
    )
    target = ScriptedChat(lambda m, t: "Mira Stolt built it" if "case 1" in str(m[-1].content) else "Harl")
    run = open_run(
        JudgeAgentProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides={"target": target, "evaluator": ScriptedChat(evaluator)},
        retry_sleep=lambda s: None,
    )
    execute(JudgeAgentProtocol(), run, skip_preflight=True)
    return run


def test_judgeagent_ungraded_answers_and_unvalidated_batches_are_redone_on_resume(tmp_path):
    judge = Switch(FakeEvaluator(verdict=True), broken=True, tool="Verdict")
    first = _judgeagent(tmp_path, judge)
    records = _records(first)
    assert {r["status"] for r in records.values()} == {"ungraded"}
    assert {b["verdict"] for r in records.values() for b in r["base"]} == {"ungraded"}
    judge.broken = False
    resumed = _records(_judgeagent(tmp_path, judge, run_id=first.run_dir.name))
    assert {r["status"] for r in resumed.values()} == {"ok"}
    assert [b["verdict"] for b in resumed["batch-0001"]["base"]] == ["correct", "correct"]
    assert all(v["verdict2"] != "ungraded" for r in resumed.values() for v in r["validation"])
    # a batch whose feedback failed is unvalidated: ungraded, and redone on resume
    feedback = Switch(FakeEvaluator(verdict=True), broken=True, tool="Feedback")
    second = _judgeagent(tmp_path / "fb", feedback)
    assert {r["status"] for r in _records(second).values()} == {"ungraded"}
    feedback.broken = False
    again = _records(_judgeagent(tmp_path / "fb", feedback, run_id=second.run_dir.name))
    assert {r["status"] for r in again.values()} == {"ok"}
    assert all(r["feedback"]["status"] == "ok" and len(r["validation"]) == 2 for r in again.values())


def test_llmeval_session_with_an_unusable_judge_is_ungraded_reported_and_rejudged_on_resume(tmp_path):
    from dyneval.protocols.llmeval.protocol import LLMEvalProtocol
    from dyneval.runtime.config_loader import load_config

    judge = Switch(lambda m, t: {"rating": 2, "reason": "fine"}, broken=True)
    chats = {"target": ScriptedChat(lambda m, t: "true. I am fairly sure."), "evaluator": ScriptedChat(judge)}

    def run_it(run_id: str | None = None) -> tuple[Any, dict[str, Any]]:
        config = load_config(
            "llmeval",
            config_file=None,
            environ={},
            flags={"out": str(tmp_path / "runs"), "params": {"near_dup_threshold": 0, "questions": 4}},
        )
        run = open_run(
            LLMEvalProtocol(),
            config,
            run_id=run_id,
            console=Console(quiet=True),
            chat_overrides=chats,
            retry_sleep=lambda s: None,
        )
        return run, execute(LLMEvalProtocol(), run, skip_preflight=True)

    first, summary = run_it()
    [record] = _records(first).values()
    assert record["status"] == "ungraded" and record["S"] is None and record["ungraded"] == 4
    m = summary["metrics"]
    assert m["S"] is None and m["answers_ungraded"] == 4 and m["sessions_without_score"] == 1
    assert "4 answer(s) in 1 session(s) are ungraded" in (first.run_dir / "report.md").read_text()
    judge.broken = False
    second, summary = run_it(first.run_dir.name)
    [record] = _records(second).values()
    assert record["status"] == "ok" and record["N"] == 4 and record["ungraded"] == 0 and record["S"] is not None
    assert summary["metrics"]["answers_ungraded"] == 0


def test_atad_unit_stopped_on_an_unusable_orchestrator_verdict_is_revalidated_on_resume(tmp_path):
    from dyneval.protocols.atad import AtadProtocol
    from tests.test_atad_support import World, orchestrator_chat, student_chat, teacher_chat

    world = World()
    approve = orchestrator_chat()
    orch = Switch(lambda m, t: approve.responder(m, t), broken=True, tool="Verdict")
    chats = {
        "teacher": teacher_chat(world),
        "orchestrator": ScriptedChat(orch),
        "student": student_chat(world, [False, False]),
    }
    params = {"tasks": "T1,T3", "per_task": 1}

    def run_it(run_id: str | None = None) -> tuple[Any, dict[str, Any]]:
        config = RunConfig(protocol="atad", out=str(tmp_path / "runs"), params=params, concurrency=1)
        run = open_run(
            AtadProtocol(),
            config,
            run_id=run_id,
            console=Console(quiet=True),
            chat_overrides=chats,
            retry_sleep=lambda s: None,
        )
        return run, execute(AtadProtocol(), run, skip_preflight=True)

    first, summary = run_it()
    records = _records(first)
    assert {r["status"] for r in records.values()} == {"ungraded"}
    assert set(summary["metrics"]["ungraded"]) == {"T1-0000", "T3-0000"}
    assert summary["metrics"]["finalized"] == 0 and summary["metrics"]["discarded"] == 0
    orch.broken = False
    second, summary = run_it(first.run_dir.name)
    records = _records(second)
    assert {r["status"] for r in records.values()} == {"ok"}
    assert summary["metrics"]["finalized"] == 2 and summary["metrics"]["ungraded"] == {}
    for r in records.values():  # the re-validated branch: one approval, no trace of the unjudged one
        assert [e.get("approved") for e in r["item"]["history"] if e["step"] == "validate"] == [True]
