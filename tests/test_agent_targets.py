"""Agent targets (docs/agents.md): every protocol run end to end against the deterministic toy agent of
:mod:`tests.toy_agents` (one tool, its own checkpointer), the evaluator roles on the stand-in endpoint.

What the agent received is read from the agent itself (:data:`tests.toy_agents.SEEN` and its checkpointed state),
not from what the harness meant to send.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from tests import toy_agents
from tests.golden_runs import CASES, REPO, ROLES, _clean_environment, respond
from tests.standin_endpoint import StandIn

AGENT = "graph:tests.toy_agents:graph"
#: The toy's tool result is longer than the record keeps (runtime.agents.record.TOOL_RESULT_CHARS).
TOOL_RESULT_LEN = 3000


def run_with_agent(
    case: str, out: Path, agent: str = AGENT, extra: list[str] | None = None
) -> tuple[int, Path | None, str]:
    """The golden case ``case`` with its model under test replaced by ``agent`` (the target and the student, or
    ATAD's evaluated models), ``extra`` flags after its own; ``(exit code, run folder or None, console)``."""
    args = [*CASES[case], *(extra or [])]
    if "--evaluate" in args:
        at = args.index("--evaluate")
        args[at + 1 : at + 3] = [agent]
    argv = [a.replace("{REPO}", str(REPO)) for a in args]
    with StandIn(respond=respond) as standin, _clean_environment():
        argv = [a.replace("{URL}", standin.url) for a in argv]
        for role in ROLES:
            argv += [f"--{role}", agent if role in ("target", "student") else standin.spec(role)]
        argv += ["--out", str(out)]
        with contextlib.redirect_stdout(io.StringIO()) as console, contextlib.redirect_stderr(io.StringIO()) as err:
            code = cli.main(argv)
    runs = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")] if out.exists() else []
    return code, (runs[0] if runs else None), console.getvalue() + err.getvalue()


def agent_events(run_dir: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("model", "").startswith("graph:")]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def seen_in(run_dir: Path) -> dict[str, list[str]]:
    """Thread id -> the messages the toy agent received on it in this run's units, in order."""
    by_thread: dict[str, list[str]] = defaultdict(list)
    for thread, text in toy_agents.SEEN:
        if thread.startswith(run_dir.name + "/"):
            by_thread[thread].append(text)
    return dict(by_thread)


@pytest.mark.parametrize("case", ["interview", "judgeagent", "llmeval", "atad_evaluate", "atad_generate"])
def test_every_protocol_drives_the_agent_one_new_message_per_turn_and_records_its_tools_and_state(case, tmp_path):
    code, run_dir, console = run_with_agent(case, tmp_path / case)
    assert code == 0, console
    assert run_dir is not None
    assert all(r["status"] in ("ok", "ungraded") for r in records(run_dir)), records(run_dir)
    events = agent_events(run_dir)
    assert events and all(e["error"] is None for e in events)
    seen = seen_in(run_dir)
    sent: dict[str, list[str]] = defaultdict(list)
    for e in events:
        turn = e["agent"]
        sent[turn["thread_id"]].append(turn["sent"])
        # the record: the tool call with its arguments, the tool result cut with the cut said, the reply
        (call,) = [c for m in turn["emitted"] for c in m.get("tool_calls", [])]
        assert call["name"] == "lookup" and call["args"]["query"]
        (result,) = [m for m in turn["emitted"] if m["type"] == "tool"]
        assert len(result["text"]) + result["cut_chars"] == TOOL_RESULT_LEN
        assert turn["emitted"][-1]["type"] == "ai" and turn["usage"] == {"input_tokens": 7, "output_tokens": 3}
        assert e["prompt_tokens"] == 7 and e["completion_tokens"] == 3
        assert turn["state"] == {"messages": turn["state"]["messages"]}  # the toy's only channel, as its count
    # the agent received exactly what the record says was sent, nothing else, on the threads the record names (a
    # unit's parallel calls take turns in any order: the agent's own state pins the order below)
    assert {t: sorted(texts) for t, texts in seen.items()} == {t: sorted(texts) for t, texts in sent.items()}
    for thread, texts in seen.items():
        unit = thread.removeprefix(run_dir.name + "/").split("/")[0]
        unit_events = [e for e in events if e["unit"] == unit]
        protocol_messages = [m for e in unit_events for m in e["messages"] if m["role"] == "human"]
        # the agent's own state: after its k-th turn on the thread it holds 4k messages (ours, its tool call, the
        # tool result, its reply): one message from us per turn, never a re-sent history
        counts = sorted(e["agent"]["state"]["messages"] for e in unit_events if e["agent"]["thread_id"] == thread)
        assert counts == [4 * k for k in range(1, len(texts) + 1)]
        for later in texts[1:]:  # only the first message of a thread carries our system prompt
            assert not any(m["content"] in later for e in unit_events for m in e["messages"] if m["role"] == "system")
        assert all(any(m["content"] in text for m in protocol_messages) for text in texts)
    # each unit's record: the agent's final state on each of its threads, by thread id
    finals = {t: st for r in records(run_dir) for t, st in r.get("agent_threads", {}).items()}  # ATAD: discarded early
    assert finals == {t: {"messages": 4 * len(texts)} for t, texts in seen.items()}
    units = {e["unit"] for e in events}
    if case == "atad_generate":  # independent problems: a fresh thread for each one the student solves
        assert len(seen) == len(events) and all(len(t) == 1 for t in seen.values())
    elif case == "interview":  # the session on the unit's thread, the single-turn baseline on a fresh one
        assert sorted(seen) == sorted(t for u in units for t in (f"{run_dir.name}/{u}", f"{run_dir.name}/{u}/single"))
        assert all(len(seen[f"{run_dir.name}/{u}/single"]) == 1 for u in units)
    else:  # one conversation per unit: one thread
        assert sorted(seen) == sorted(f"{run_dir.name}/{u}" for u in units)
    # a turn that continues a conversation (feedback, a follow-up): the agent got the new message alone
    continued = [e for e in events if any(m["role"] == "ai" for m in e["messages"])]
    assert all(e["agent"]["sent"] == e["messages"][-1]["content"] for e in continued)
    if case == "interview":
        assert continued and any(e["agent"]["sent"].startswith("Feedback on your answer") for e in continued)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]


def test_the_viewer_shows_the_agents_tool_calls_inline(tmp_path):
    from dyneval.results.view.data import run_parts

    code, run_dir, console = run_with_agent("interview", tmp_path / "view")
    assert code == 0 and run_dir is not None, console
    parts = run_parts(run_dir)
    exchanges = [e for unit in parts["units"] for e in unit["events"] if e.get("agent")]
    assert exchanges
    emitted = exchanges[0]["agent"]["emitted"]
    assert [m["type"] for m in emitted] == ["ai", "tool", "ai"] and emitted[0]["tool_calls"][0]["name"] == "lookup"
    assert "agentTurn(e.agent)" in (run_dir / "view.html").read_text()


@pytest.mark.parametrize("app", [toy_agents.app, toy_agents.async_app], ids=["sync", "async"])
def test_the_python_api_runs_the_interview_with_an_openevals_style_app(app, tmp_path):
    from dyneval import evaluate

    with StandIn(respond=respond) as standin:
        result = evaluate(
            "interview",
            target=app,
            evaluator=standin.spec("judge"),
            out=str(tmp_path),
            limit=2,
            max_questions=1,
            skip_preflight=True,
        )
    assert [r["status"] for r in result.records] == ["ok", "ok"]
    seen = seen_in(result.run_dir)
    units = [f"{result.run_id}/{r['unit_id']}" for r in result.records]
    assert sorted(seen) == sorted([*units, *(f"{u}/single" for u in units)])  # the single-turn answer apart
    events = agent_events_of_app(result.run_dir)
    for e in events:
        assert e["agent"]["state"] is None and e["agent"]["usage"] == "unknown"
    assert seen == {t: [e["agent"]["sent"] for e in events if e["agent"]["thread_id"] == t] for t in seen}


def agent_events_of_app(run_dir: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("agent")]


@pytest.mark.parametrize(
    ("agent", "status", "reason"),
    [
        ("graph:tests.toy_agents:raising", "model_error", "raised RuntimeError: the toy agent broke"),
        ("graph:tests.toy_agents:looping", "model_error", "exceeded its recursion limit (25 steps)"),
        ("graph:tests.toy_agents:silent", "model_error", "gave no AI message with text"),
        ("graph:tests.toy_agents:hanging?timeout_s=1", "infra_error", "did not end its turn within 1 s"),
    ],
    ids=["raises", "recursion", "no-reply", "hangs"],
)
@pytest.mark.parametrize("case", ["interview", "atad_evaluate"])
def test_a_failing_agent_fails_its_unit_with_the_reason_never_a_wrong_verdict(case, agent, status, reason, tmp_path):
    toy_agents.RELEASE.clear()
    try:
        code, run_dir, console = run_with_agent(case, tmp_path / "fail", agent)
    finally:
        toy_agents.RELEASE.set()  # the hung turns end (their threads are daemons either way)
    assert code == 4, console
    assert run_dir is not None
    recs = records(run_dir)
    assert recs and all(r["status"] == status and reason in r["error"] for r in recs), recs
    assert not any("correct" in r or "score" in r for r in recs)  # no verdict of any kind
    failed = [e for e in agent_events(run_dir) if e["error"]]
    assert failed and all(reason in e["error"] for e in failed)  # the failed turn is in the event log too


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("graph:no_such_module_x:graph", "no module named 'no_such_module_x'"),
        ("graph:tests.toy_agents:nothing", "has no attribute 'nothing'"),
        ("graph:tests.toy_agents:SEEN", "is a list: not a compiled graph"),
        ("graph:tests/no_such_app.py:graph", "no file tests/no_such_app.py"),
        ("graph:tests.toy_agents", "malformed agent reference"),
        ("graph:tests.toy_agents:graph?system=loud", "system must be preamble or none"),
    ],
)
def test_a_bad_agent_reference_exits_2_in_one_line_before_anything_runs(ref, says, tmp_path, capsys):
    for flags in (["--protocol", "interview", "--target", ref], ["--protocol", "atad", "--evaluate", ref]):
        code = cli.main([*flags, "--out", str(tmp_path / "out"), "--skip-preflight"])
        err = capsys.readouterr()
        assert code == 2
        lines = [line for line in (err.out + err.err).splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in lines[0], lines
        assert not (tmp_path / "out").exists()


def test_a_graph_file_path_and_a_builder_load_as_agents(tmp_path, monkeypatch):
    from dyneval.runtime.agents.reference import load_agent

    # a file agent's folder goes first on sys.path (as langgraph dev puts it): this one's my_app.py would shadow the
    # my_app package of a later test in this process, so the path is put back after the test
    monkeypatch.setattr(sys, "path", list(sys.path))
    app = tmp_path / "my_app.py"
    app.write_text("from tests.toy_agents import builder\n")
    for ref in (f"graph:{app}:builder", "graph:tests.toy_agents:builder"):
        loaded = load_agent(ref)
        turn = loaded.turn({"role": "user", "content": "hello"}, f"{tmp_path.name}-{ref}")
        assert [m.type for m in turn.emitted] == ["ai", "tool", "ai"]
        assert loaded.has_thread(f"{tmp_path.name}-{ref}")  # the run gave it a checkpointer


def test_the_sample_rag_agent_answers_judgeagent_with_its_retrieval_tool_and_its_twin_without(tmp_path, monkeypatch):
    from dyneval.samples.agents import rag

    with StandIn(respond=respond) as standin, _clean_environment():
        monkeypatch.setenv(rag.MODEL_ENV, standin.spec("agent_model"))
        rag.chat_model.cache_clear()
        for name in ("graph", "plain"):
            agent = f"graph:dyneval.samples.agents.rag:{name}"
            argv = ["--protocol", "judgeagent", "--limit", "1", "--target", agent, "--out", str(tmp_path / name)]
            for role in ROLES:
                if role not in ("target", "student"):
                    argv += [f"--{role}", standin.spec(role)]
            with contextlib.redirect_stdout(io.StringIO()) as console:
                assert cli.main(argv) == 0, console.getvalue()
            (run_dir,) = [p for p in (tmp_path / name).iterdir() if p.is_dir() and not p.name.startswith("_")]
            events = agent_events(run_dir)
            assert events and all(r["status"] in ("ok", "ungraded") for r in records(run_dir))
            calls = [c for e in events for m in e["agent"]["emitted"] for c in m.get("tool_calls", [])]
            results = [m["text"] for e in events for m in e["agent"]["emitted"] if m["type"] == "tool"]
            if name == "graph":  # every question searched; the sample's base questions find the documents' notes
                assert len(calls) == len(results) == len(events) and {c["name"] for c in calls} == {"search_notes"}
                titles = ("How glaciers shape land:", "Honeybee colonies:", "printing press:", "immune system:")
                assert any(t in r for r in results for t in titles)
            else:
                assert calls == [] and results == []
    rag.chat_model.cache_clear()


def test_the_sample_agent_on_the_embedded_server_sends_its_token_limit_and_a_bounded_history(monkeypatch):
    """``DYNEVAL_EMBEDDED_URL`` (a running llama.cpp server) serves the sample agent: the limit goes as llama.cpp's
    ``max_tokens`` (it ignores ``max_completion_tokens``), and a long thread sends only its last messages."""
    from langgraph.checkpoint.memory import InMemorySaver

    from dyneval.samples.agents import rag

    bodies: list[dict[str, Any]] = []
    with StandIn(respond=lambda body: bodies.append(body)) as standin:
        monkeypatch.delenv(rag.MODEL_ENV, raising=False)
        monkeypatch.setenv(rag.EMBEDDED_ENV, standin.url)
        rag.chat_model.cache_clear()
        try:
            agent = rag._rag().compile(checkpointer=InMemorySaver())
            questions = [f"Question {i}: what do honeybee workers do?" for i in range(6)]
            for question in questions:
                agent.invoke({"messages": [("user", question)]}, {"configurable": {"thread_id": "long"}})
        finally:
            rag.chat_model.cache_clear()
    assert len(bodies) == len(questions) and all(b["max_tokens"] == rag.MAX_TOKENS for b in bodies)
    last = bodies[-1]["messages"]
    assert last[0]["role"] == "system" and "honeybee" in last[0]["content"].lower()  # the notes it found
    talk = last[1:]
    assert len(talk) == rag.HISTORY - 1 and talk[0]["role"] == "user" and talk[-1]["content"] == questions[-1]


def test_the_sample_agent_runs_on_its_in_process_embedded_model_from_a_clean_environment_and_exits_cleanly(tmp_path):
    """The shipped sample's default, as from a fresh install (no DYNEVAL_* variable): its own in-process SmolLM2,
    one ATAD problem (answers compared in code, no judge), and no llama.cpp finalizer's traceback at exit."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")}
    argv = ["--protocol", "atad", "--evaluate", "graph:dyneval.samples.agents.rag:plain", "--limit", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "dyneval", *argv, "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the run takes seconds
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-2000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_")]
    turns = [e["agent"] for e in agent_events(run_dir)]  # its answer (and a repair request, if it gave no JSON)
    assert turns[0]["thread"] == "new" and all(t["emitted"][-1]["text"].strip() for t in turns)
    assert records(run_dir)[0]["status"] == "ok"


def test_a_run_killed_mid_unit_resumes_without_losing_or_repeating_an_agents_turns(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "kill"
    with StandIn(respond=respond) as standin:
        flags = ["--protocol", "interview", "--target", "graph:tests.toy_agents:slow", "--evaluator", standin.spec("j")]
        flags += ["--out", str(out), "--limit", "3", "--max-questions", "1", "--concurrency", "1", "--skip-preflight"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")}
        proc = subprocess.Popen([sys.executable, "-m", "dyneval", *flags], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 600  # a hang guard: the run takes seconds
        before: list[dict[str, Any]] = []
        while time.monotonic() < deadline and proc.poll() is None:
            runs = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")] if out.exists() else []
            if runs and (runs[0] / "results.jsonl").exists() and (runs[0] / "events.jsonl").exists():
                done = {r["unit_id"] for r in records(runs[0])}
                before = agent_events(runs[0])
                # one unit final, the next one mid-way through its session (a turn on its own thread)
                session = [e for e in before if e["agent"]["thread_id"] == f"{runs[0].name}/{e['unit']}"]
                if done and any(e["unit"] not in done for e in session):
                    proc.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.05)
        assert proc.wait() == -signal.SIGKILL, "the run ended before it could be killed mid-unit"
        (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
        finished = {r["unit_id"] for r in records(run_dir)}
        before = agent_events(run_dir)
        with _clean_environment(), contextlib.redirect_stdout(io.StringIO()) as console:
            code = cli.main([*flags, "--resume", run_dir.name])
    assert code == 0, console.getvalue()
    final = records(run_dir)
    assert len(final) == 3 and {r["status"] for r in final} == {"ok"}  # no unit lost, none recorded twice
    resumed = agent_events(run_dir)[len(before) :]
    assert resumed and not any(e["unit"] in finished for e in resumed)  # a finished unit's turns not asked again
    cut = {e["unit"] for e in before} - finished
    assert cut and cut <= {e["unit"] for e in resumed}
    had_turns = {e["agent"]["thread_id"] for e in before if e["error"] is None}
    for unit in cut:  # on its own threads again; the run's in-memory agent lost them, and the record says so
        events = [e for e in resumed if e["unit"] == unit]
        threads = {e["agent"]["thread_id"] for e in events}
        assert threads <= {f"{run_dir.name}/{unit}", f"{run_dir.name}/{unit}/single"}
        assert f"{run_dir.name}/{unit}" in had_turns, "the kill came before the cut session's first turn"
        for thread in threads:
            first = next(e for e in events if e["agent"]["thread_id"] == thread)
            if thread in had_turns:  # restarted: its first message holds the conversation so far, our prompt too
                assert (
                    first["agent"]["thread"] == "restarted" and "lost the thread" in first["agent"]["restarted_because"]
                )
                assert all(m["content"] in first["agent"]["sent"] for m in first["messages"] if m["role"] != "ai")
            else:
                assert first["agent"]["thread"] == "new"


def test_the_dyneval_command_imports_an_agent_and_its_state_check_as_modules_of_the_working_folder(tmp_path):
    """``dyneval --evaluate graph:my_app.agent:graph --state-check my_app.agent:looked_up`` run by the console
    script (which, unlike ``python -m``, does not put the working folder on ``sys.path``) from the folder holding
    ``my_app/``: both are imported from there, as ``langgraph dev`` imports them, and the run ends with results."""
    import os
    import shutil
    import subprocess
    import sys

    (tmp_path / "my_app").mkdir()
    (tmp_path / "my_app/__init__.py").write_text("")
    shutil.copy(REPO / "tests/toy_agents.py", tmp_path / "my_app/agent.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_") and k != "PYTHONPATH"}
    agent = "graph:my_app.agent:graph"
    with StandIn(respond=respond) as standin:
        argv = ["--evaluate", agent, "--benchmark", str(REPO / "samples/atad/benchmark.jsonl"), "--limit", "1"]
        argv += ["--state-check", "my_app.agent:looked_up", "--evaluator", standin.spec("evaluator"), "--out", "runs"]
        done = subprocess.run(
            [str(Path(sys.executable).parent / "dyneval"), "--protocol", "atad", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # a hang guard: the run takes seconds
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert {e["model"] for e in agent_events(run_dir)} == {agent}
    (record,) = records(run_dir)
    assert record["status"] == "ok" and [c["verdict"] for c in record["state_checks"].values()] == ["correct"]
