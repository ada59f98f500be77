"""A timed-out agent turn (docs/agents.md, "Failures"; "Resume and scale-out"): Python cannot stop the thread that
runs it, so the turn may still write to its agent thread after the unit failed. The unit's next turn (here: its
resume in the same process, where that turn still runs) goes to a fresh agent thread, recorded as ``restarted``,
and the late turn's write lands on the abandoned thread only.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections import Counter

from dyneval import cli
from dyneval.runtime.agents.reference import load_agent
from tests import toy_agents
from tests.golden_runs import _clean_environment, respond
from tests.standin_endpoint import StandIn
from tests.test_agent_targets import records

HANGING = "graph:tests.toy_agents:hanging?timeout_s=1"


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_a_timed_out_turn_cannot_reach_the_thread_the_unit_goes_on_with(tmp_path):
    toy_agents.RELEASE.clear()
    agent = load_agent(HANGING)
    try:
        with StandIn(respond=respond) as standin, _clean_environment():
            argv = ["--protocol", "interview", "--target", HANGING, "--evaluator", standin.spec("j"), "--limit", "1"]
            argv += ["--max-questions", "1", "--concurrency", "1", "--skip-preflight", "--out", str(tmp_path)]
            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert cli.main(argv) == 4, out.getvalue()
            (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_")]
            (timed_out,) = [e for e in _events(run_dir) if (e["error"] or "").startswith("AgentTimeout")]
            abandoned = timed_out["agent"]["thread_id"]  # the log names the thread the turn was left running on
            assert records(run_dir)[0]["status"] == "infra_error"

            toy_agents.RELEASE.set()  # the timed-out turn ends now, in this process, and writes its reply
            config = {"configurable": {"thread_id": abandoned}}
            deadline = time.monotonic() + 60  # a hang guard: the turn ends within milliseconds
            while len(agent.graph.get_state(config).values.get("messages", [])) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            late = agent.graph.get_state(config).values["messages"]
            assert [m.content for m in late if m.type == "ai"] == ["late"]

            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert cli.main([*argv, "--resume", run_dir.name]) == 0, out.getvalue()
    finally:
        toy_agents.RELEASE.set()
    assert records(run_dir)[-1]["status"] == "ok"
    resumed = [e["agent"] for e in _events(run_dir)[_events(run_dir).index(timed_out) + 1 :] if e.get("agent")]
    again = [t for t in resumed if t["thread_id"].startswith(abandoned)]
    assert again and all(t["thread_id"] == f"{abandoned}/restart1" for t in again)
    assert again[0]["thread"] == "restarted" and again[0]["restarted_because"] == f"a turn on {abandoned} timed out"
    # the fresh thread holds the resumed turns alone (our message and the reply, per turn), the late one none
    fresh = agent.graph.get_state({"configurable": {"thread_id": f"{abandoned}/restart1"}}).values["messages"]
    assert len(fresh) == 2 * len(again) and [m.content for m in fresh if m.type == "human"] == [
        t["sent"] for t in again
    ]
    assert agent.graph.get_state(config).values["messages"] == late  # nothing reached the abandoned thread since


def test_a_resumed_unit_continues_the_thread_its_agent_kept_with_only_what_is_new(tmp_path):
    """The toy agent keeps its threads (its own checkpointer, alive in this process): a run stopped mid-session by
    its budget and resumed goes on on the same thread, ``continued``, sending only the new message, as an agent
    with a persistent checkpointer would get after a kill."""
    with StandIn(respond=respond) as standin, _clean_environment():
        argv = ["--protocol", "interview", "--target", "graph:tests.toy_agents:graph", "--evaluator", standin.spec("j")]
        argv += ["--limit", "1", "--concurrency", "1", "--skip-preflight", "--out", str(tmp_path)]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert cli.main([*argv, "--max-calls", "6"]) == 3, out.getvalue()  # stopped by its budget
        (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_")]
        before = len(_events(run_dir))
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert cli.main([*argv, "--max-calls", "1000", "--resume", run_dir.name]) == 0, out.getvalue()
    (record,) = records(run_dir)
    session = f"{run_dir.name}/{record['unit_id']}"
    earlier = [e for e in _events(run_dir)[:before] if e.get("agent") and e["agent"]["thread_id"] == session]
    later = [e for e in _events(run_dir)[before:] if e.get("agent") and e["agent"]["thread_id"] == session]
    assert earlier and later, "the budget did not stop the run inside the session"
    first = later[0]
    assert first["agent"]["thread"] == "continued" and "restarted_because" not in first["agent"]
    assert first["agent"]["sent"] == first["messages"][-1]["content"]  # the new message alone, no history again
    # the agent's own thread: our one message per turn (4 messages a turn), none sent twice
    assert record["agent_threads"][session]["messages"] == 4 * (len(earlier) + len(later))


def _one_session_on_the_toy_agent(standin):
    """``run(out, *extra) -> (exit code, run folder, console)``: one interview session of the toy agent, graded by
    the stand-in, its state checked."""
    argv = ["--protocol", "interview", "--target", "graph:tests.toy_agents:graph", "--evaluator", standin.spec("j")]
    argv += ["--limit", "1", "--max-questions", "1", "--concurrency", "1", "--skip-preflight"]
    argv += ["--state-check", "tests.toy_agents:looked_up"]

    def run(out, *extra):
        with contextlib.redirect_stdout(io.StringIO()) as console:
            code = cli.main([*argv, "--out", str(out), *extra])
        (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
        return code, run_dir, console.getvalue()

    return run


def test_a_unit_resumed_after_its_agent_turns_records_every_agent_thread_and_state_check_as_an_unstopped_run(
    tmp_path,
):
    """A run stopped by its budget after the agent's single-turn answer, or after its last turn (the resume then
    only judges, sending the agent nothing), records the same ``agent_threads`` and ``state_checks`` as a run that
    was not stopped: the threads the earlier session had turns on are the unit's too, their state read from the
    agent (the toy keeps its threads in this process, as a persistent checkpointer would)."""
    with StandIn(respond=respond) as standin, _clean_environment():
        run = _one_session_on_the_toy_agent(standin)

        code, unstopped, console = run(tmp_path / "unstopped")
        assert code == 0, console
        calls = [e["role"] for e in _events(unstopped)]
        turns = [i for i, role in enumerate(calls) if role == "target"]
        # after the single-turn answer and its grade; after the agent's last turn (only judges are left)
        for stop_at in (turns[0] + 2, turns[-1] + 1):
            out = tmp_path / f"stopped-{stop_at}"
            code, run_dir, console = run(out, "--max-calls", str(stop_at))
            assert code == 3, console  # stopped by its budget
            before = len(_events(run_dir))
            code, run_dir, console = run(out, "--max-calls", "1000", "--resume", run_dir.name)
            assert code == 0, console
            # the resume sends the single-turn thread nothing, and after the last turn the agent nothing at all
            resumed = {e["agent"]["thread_id"] for e in _events(run_dir)[before:] if e.get("agent")}
            assert resumed == (set() if stop_at > turns[-1] else {f"{run_dir.name}/{records(unstopped)[0]['unit_id']}"})
            (record,) = records(run_dir)
            (expected,) = records(unstopped)
            assert len(record["agent_threads"]) == 2  # the session's thread and the single-turn answer's
            for field in ("agent_threads", "state_checks"):
                got = json.loads(json.dumps(record[field]).replace(run_dir.name, "RUN"))
                assert got == json.loads(json.dumps(expected[field]).replace(unstopped.name, "RUN")), (stop_at, field)


def _comparable(record, run_dir):
    """A unit record without what differs between sessions (its wall time, its calls' seconds), the run id as RUN."""
    record = {k: v for k, v in record.items() if k != "wall_s"}
    record["usage"] = {k: v for k, v in record["usage"].items() if k != "llm_seconds"}
    return json.loads(json.dumps(record).replace(run_dir.name, "RUN"))


def test_a_run_stopped_right_after_an_agent_turn_resumes_without_sending_that_turn_again(tmp_path):
    """A budget of N calls stops the run right after the agent's turn that is call N is logged, before the graph
    step that made it is checkpointed (``--max-calls 1``: the first turn). The agent kept its thread (the toy's own
    checkpointer, alive in this process), so the resumed step's request, which the log shows the agent replied to,
    is answered from the log: the agent's threads hold each of our messages once, the log holds each turn once,
    and the records equal those of a run that was not stopped."""
    with StandIn(respond=respond) as standin, _clean_environment():
        run = _one_session_on_the_toy_agent(standin)

        def turns(run_dir):  # the agent's turns as logged, the run id as RUN, without the thread's label
            logged = [
                json.loads(json.dumps(e["agent"]).replace(run_dir.name, "RUN"))
                for e in _events(run_dir)
                if e.get("agent")
            ]
            return [{k: v for k, v in t.items() if k != "thread"} for t in logged], [t["thread"] for t in logged]

        code, unstopped, console = run(tmp_path / "unstopped")
        assert code == 0, console
        calls = [e["role"] for e in _events(unstopped)]
        stops = [i + 1 for i, role in enumerate(calls) if role == "target"]
        assert stops[0] == 1 and len(stops) > 2  # the first call is the agent's, and the session has turns
        sent = Counter(t["thread_id"] for t in turns(unstopped)[0])  # turns per agent thread
        for stop_at in stops:
            code, run_dir, console = run(tmp_path / f"stopped-{stop_at}", "--max-calls", str(stop_at))
            assert code == 3, console  # stopped by its budget
            assert _events(run_dir)[-1]["role"] == "target" and len(_events(run_dir)) == stop_at
            code, run_dir, console = run(
                tmp_path / f"stopped-{stop_at}", "--max-calls", "1000", "--resume", run_dir.name
            )
            assert code == 0, console
            (record,) = records(run_dir)
            for thread in record["agent_threads"]:  # the agent's own threads: each of our messages once
                held = toy_agents.graph.get_state({"configurable": {"thread_id": thread}}).values["messages"]
                asked = [m for m in held if m.type == "human"]
                assert len(asked) == sent[thread.replace(run_dir.name, "RUN")], (stop_at, thread)
            assert turns(run_dir)[0] == turns(unstopped)[0], stop_at  # each turn logged once, as unstopped
            # labels: the resume's first turn sent on a thread the stopped session had a turn on is `continued`
            relabelled = {(u, r) for u, r in zip(turns(unstopped)[1], turns(run_dir)[1]) if u != r}
            assert relabelled <= {("ongoing", "continued")}, stop_at
            assert _comparable(record, run_dir) == _comparable(records(unstopped)[0], unstopped), stop_at
