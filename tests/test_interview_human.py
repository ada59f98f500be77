"""Human interviewee: ``interrupt()`` pauses at the question; the session resumes from its checkpoint.

The first test pauses in one process and resumes with the answer from a NEW
process on the same SQLite checkpoint and thread id.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from tests.test_interview_world import math_seed, services

REPO = Path(__file__).resolve().parents[1]
THREAD = "human-1"


def drive(workdir: str, answers_json: str) -> None:
    """Run or resume the human session in this process; print where it stopped as one JSON line."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from dyneval.graphs.interview import builder
    from dyneval.state.interview import InterviewContext
    from tests.fakes import ScriptedChat

    work = Path(workdir)
    svc = services(work, ScriptedChat(lambda m, t: RuntimeError("the model must not answer")))
    conn = sqlite3.connect(work / "checkpoints.sqlite", check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config = {"configurable": {"thread_id": THREAD}}
    ctx = InterviewContext(services=svc, interviewee="human", max_retries=1, max_questions=2)
    answers = json.loads(answers_json)
    snapshot = graph.get_state(config)
    payload = {"unit_id": THREAD, "seed": math_seed(1)} if not snapshot.values else None
    asked = []
    while True:
        if payload is None and answers:
            payload = Command(resume=answers.pop(0))
        elif payload is None:
            break
        graph.invoke(payload, config, context=ctx)
        payload = None
        snapshot = graph.get_state(config)
        pending = [i.value for t in snapshot.tasks for i in t.interrupts]
        if not pending:
            break
        asked.append(pending[0])
    snapshot = graph.get_state(config)
    print(json.dumps({"asked": asked, "next": list(snapshot.next), "values": snapshot.values}, default=str))
    conn.close()


def _run(tmp_path: Path, answers: list) -> dict:
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.test_interview_human import drive; "
            f"drive({str(tmp_path)!r}, {json.dumps(json.dumps(answers))})")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_human_session_pauses_at_the_question_and_a_new_process_resumes_it(tmp_path):
    first = _run(tmp_path, [])
    assert first["next"] == ["answer"]
    question = first["asked"][0]
    assert question["kind"] == "seed" and question["attempt"] == 1
    assert "x apples" in question["question"]           # the modified question, not the original
    assert not first["values"].get("interactions")   # nothing graded before the answer

    second = _run(tmp_path, ["I think 13.\nFinal answer: 13", "I added them because of the sum."])
    assert second["next"] == []                          # finished on the same thread
    values = second["values"]
    assert values["unit_id"] == THREAD and values["seed_solved"] is True
    assert [a["kind"] for a in second["asked"]] == ["followup"]
    inter = values["interactions"]
    assert [(i["kind"], i["correct"]) for i in inter] == [("seed", True), ("followup", True)]
    assert values["single_turn"]["skipped"].startswith("human")
    answers = [t["text"] for t in values["transcript"] if t["speaker"] == "interviewee"]
    assert answers == ["I think 13.\nFinal answer: 13", "I added them because of the sum."]
    assert values["session_summary"]


def test_runner_asks_on_the_terminal_and_resumes_after_a_crash(tmp_path, monkeypatch):
    from dyneval.protocols.interview import InterviewProtocol
    from dyneval.runtime.runner import execute, open_run
    from dyneval.state.config import RunConfig
    from tests.fakes import ScriptedChat
    from tests.test_interview_world import grader, interviewer

    data = tmp_path / "seeds.jsonl"
    data.write_text(json.dumps(math_seed(1)) + "\n")
    inter = ScriptedChat(interviewer)
    chats = {"target": ScriptedChat(lambda m, t: RuntimeError("no model answers")), "evaluator": inter,
             "grader": ScriptedChat(grader)}
    params = {"data": str(data), "interviewee": "human", "max_retries": 1, "max_questions": 1}

    def closed(prompt=""):
        raise EOFError

    monkeypatch.setattr(builtins, "input", closed)
    config = RunConfig(protocol="interview", out=str(tmp_path / "runs"), params=params, concurrency=1)
    run = open_run(InterviewProtocol(), config, run_id=None, console=Console(quiet=True), chat_overrides=chats,
                   retry_sleep=lambda s: None)
    execute(InterviewProtocol(), run, skip_preflight=True)
    first = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert first[-1]["status"] == "infra_error" and "--resume" in first[-1]["error"]
    modify_calls = sum(1 for _, tool in inter.calls if tool == "ModifiedQuestion")

    typed = iter(["Final answer: 100", "Final answer: 13"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(typed))
    again = open_run(InterviewProtocol(), config, run_id=run.run_dir.name, console=Console(quiet=True),
                     chat_overrides=chats, retry_sleep=lambda s: None)
    summary = execute(InterviewProtocol(), again, skip_preflight=True)
    last = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()][-1]
    assert last["status"] == "ok" and last["seed_scores"] == [0.0, 1.0] and last["solved_at"] == 2
    # the question was modified once: the resumed run continued from the checkpoint
    assert sum(1 for _, tool in inter.calls if tool == "ModifiedQuestion") == modify_calls == 1
    assert summary["metrics"]["score@1"] == 0.0 and summary["metrics"]["score@2"] == 1.0
