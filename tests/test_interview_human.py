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
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.test_interview_human import drive; "
        f"drive({str(tmp_path)!r}, {json.dumps(json.dumps(answers))})"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_human_session_pauses_at_the_question_and_a_new_process_resumes_it(tmp_path):
    first = _run(tmp_path, [])
    assert first["next"] == ["answer"]
    question = first["asked"][0]
    assert question["kind"] == "seed" and question["attempt"] == 1
    assert "x apples" in question["question"]  # the modified question, not the original
    assert not first["values"].get("interactions")  # nothing graded before the answer

    second = _run(tmp_path, ["I think 13.\nFinal answer: 13", "I added them because of the sum."])
    assert second["next"] == []  # finished on the same thread
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
    chats = {
        "target": ScriptedChat(lambda m, t: RuntimeError("no model answers")),
        "evaluator": inter,
        "grader": ScriptedChat(grader),
    }
    params = {"data": str(data), "interviewee": "human", "max_retries": 1, "max_questions": 1}

    def closed(prompt=""):
        raise EOFError

    monkeypatch.setattr(builtins, "input", closed)
    config = RunConfig(protocol="interview", out=str(tmp_path / "runs"), params=params, concurrency=1)
    run = open_run(
        InterviewProtocol(),
        config,
        run_id=None,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    execute(InterviewProtocol(), run, skip_preflight=True)
    first = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert first[-1]["status"] == "infra_error" and "--resume" in first[-1]["error"]
    modify_calls = sum(1 for _, tool in inter.calls if tool == "ModifiedQuestion")

    typed = iter(["Final answer: 100", "Final answer: 13"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(typed))
    again = open_run(
        InterviewProtocol(),
        config,
        run_id=run.run_dir.name,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    summary = execute(InterviewProtocol(), again, skip_preflight=True)
    last = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()][-1]
    assert last["status"] == "ok" and last["seed_scores"] == [0.0, 1.0] and last["solved_at"] == 2
    # the question was modified once: the resumed run continued from the checkpoint
    assert sum(1 for _, tool in inter.calls if tool == "ModifiedQuestion") == modify_calls == 1
    assert summary["metrics"]["score@1"] == 0.0 and summary["metrics"]["score@2"] == 1.0


def test_a_human_interview_starts_no_model_for_the_unused_target_role(tmp_path, monkeypatch, capsys):
    """The target role is left at its default, the embedded model: a person answers instead, so the run neither
    pings nor starts it (the starter fails the run if it is called) and every request goes to the evaluator; a cost
    budget asks a price of the evaluator only (the unused, unpriced target would refuse the run)."""
    from dyneval.cli import main
    from dyneval.runtime import embedded
    from tests.standin_endpoint import StandIn

    started = []

    def starter(*args, **kwargs):
        started.append(args)
        raise AssertionError("the embedded model was started")

    monkeypatch.delenv("DYNEVAL_EMBEDDED_URL", raising=False)
    monkeypatch.delenv("DYNEVAL_TARGET", raising=False)
    monkeypatch.setattr(embedded, "start_server", starter)
    monkeypatch.setattr(embedded, "_server", None)
    typed = iter(["Final answer: 15", "no idea", "no", "no"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(typed))
    with StandIn() as standin:
        prices = tmp_path / "prices.yaml"
        prices.write_text("models:\n  ev: {input: 1.0, output: 2.0}\n", encoding="utf-8")
        code = main(
            [
                "--protocol",
                "interview",
                "--interviewee",
                "human",
                "--evaluator",
                standin.spec("ev"),
                "--limit",
                "1",
                "--max-questions",
                "1",
                "--out",
                str(tmp_path / "runs"),
                "--max-cost",
                "5",
                "--pricing",
                str(prices),
            ]
        )
        asked = {r.model for r in standin.requests}
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert started == [] and asked == {"ev"}
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert "target" not in summary["models"] and summary["models"]["evaluator"].startswith("ev@")
    events = [json.loads(line) for line in next((tmp_path / "runs").glob("*/events.jsonl")).read_text().splitlines()]
    assert events and {e["role"] for e in events} <= {"evaluator", "grader"}
    assert "local:" not in out  # no note or warning about the embedded model


def test_question_prompt_and_answer_each_stand_on_their_own_line_while_the_progress_display_runs(monkeypatch):
    """A real rich progress display of two rows runs on a terminal console (as the runner's does, its last row
    ending in ``cached 0``) while a person is asked: the screen then shows the question, then ``your answer>``
    with the answer on one line, and the display again below, its rows drawn whole and nothing above erased."""
    import io

    from rich.console import Console
    from rich.progress import Progress, TextColumn

    from dyneval.protocols.interview.terminal import ask
    from tests.terminal_screen import screen_lines

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    progress = Progress(
        TextColumn("{task.description}"), TextColumn("{task.fields[status]}"), console=console, refresh_per_second=4
    )
    seen = []

    def typed(prompt=""):
        seen.append(console.is_terminal and not any(live.is_started for live in console._live_stack))
        return "15 km/h"

    monkeypatch.setattr(builtins, "input", typed)
    with progress:
        progress.add_task("context graph", status="building")
        task = progress.add_task("interview", status="in flight 0, calls 2, failed 0, cached 0")
        answer = ask(console, "[trip] question 0 try 1", "A cyclist rides 45 km in 3 hours.\nHow fast is she?")
        progress.update(task, status="in flight 0, calls 3, failed 0, cached 0")
    assert answer == "15 km/h" and seen == [True]  # no live display ran while the person typed
    lines = [" ".join(line.split()) for line in screen_lines(buffer.getvalue())]
    while not lines[-1]:
        lines.pop()
    at = lines.index("your answer> 15 km/h")
    assert lines[at - 2 : at] == ["A cyclist rides 45 km in 3 hours.", "How fast is she?"]
    assert "[trip] question 0 try 1" in lines[at - 3]
    assert lines[at - 5 : at - 3] == ["context graph building", "interview in flight 0, calls 2, failed 0, cached 0"]
    assert lines[at + 1 :] == ["context graph building", "interview in flight 0, calls 3, failed 0, cached 0"]
    assert not any("cached" in line and "km/h" in line for line in lines)


def test_at_a_real_terminal_the_typed_answer_follows_the_prompt_not_the_progress_line(tmp_path):
    """The whole command under a pseudo-terminal (the terminal itself echoes what is typed), its evaluator on the
    stand-in: every ``your answer>`` prompt is on its own line with the typed answer after it, under the question,
    and the progress line is drawn again below it."""
    import os
    import pty
    import select
    import struct

    fcntl = __import__("fcntl")
    termios = __import__("termios")
    from tests.standin_endpoint import StandIn
    from tests.terminal_screen import screen_lines

    with StandIn() as standin:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")} | {"TERM": "xterm"}
        argv = [
            sys.executable,
            "-m",
            "dyneval",
            "--protocol",
            "interview",
            "--interviewee",
            "human",
            "--evaluator",
            standin.spec("ev"),
            "--limit",
            "1",
            "--max-questions",
            "1",
            "--out",
            str(tmp_path / "runs"),
        ]
        pid, fd = pty.fork()
        if pid == 0:  # the child: the command on the pseudo-terminal
            os.chdir(tmp_path)
            os.execve(sys.executable, argv, env)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
        output, answered = b"", 0
        waiting = select.poll()  # not select(): in a long test session the descriptor can be above its 1024
        waiting.register(fd, select.POLLIN)
        while waiting.poll(120_000):
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child ended: Linux reports EIO on the pseudo-terminal
                break
            if not chunk:
                break
            output += chunk
            if output.count(b"your answer> ") > answered:
                answered += 1
                os.write(fd, b"15 km/h\r")
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    lines = screen_lines(output.decode("utf-8", "replace"))
    assert os.waitstatus_to_exitcode(status) == 0, "\n".join(lines[-30:])
    prompts = [i for i, line in enumerate(lines) if line.startswith("your answer>")]
    assert answered >= 1 and len(prompts) == answered, "\n".join(lines)
    for i in prompts:
        assert lines[i] == "your answer> 15 km/h", "\n".join(lines[i - 3 : i + 2])
        rule = max(j for j in range(i) if "question 0 try" in lines[j])
        assert any(lines[j].strip() for j in range(rule + 1, i))  # the question between the rule and the prompt
        assert "cached" in lines[i + 1]  # the progress display again, below the answer
    assert not any("cached" in line and "km/h" in line for line in lines)
