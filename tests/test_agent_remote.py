"""A deployed agent (docs/agents.md, "A deployed graph"): the deterministic toy agent of :mod:`tests.toy_agents`
served by a real ``langgraph dev`` on loopback, reached through ``langgraph:URL``.

What the served agent received is read from the server's own threads, not from what the harness meant to send.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dyneval import cli
from dyneval.runtime.agents.remote import server_thread_id
from tests.golden_runs import REPO
from tests.test_agent_targets import AGENT, records, run_with_agent, seen_in

#: Bounds the server's start-up (seconds): a hang guard, the server is polled until it answers.
START_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _no_server(url: str, proc: subprocess.Popen[bytes]) -> bool:
    try:
        return httpx.get(f"{url}/ok", timeout=2).status_code != 200
    except httpx.HTTPError:
        return proc.poll() is None


@pytest.fixture(scope="module")
def served_toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``langgraph dev`` on 127.0.0.1 serving the toy agent (its builder: the server brings its own persistence)
    as the graph ``toy``, one for the whole module (its threads are keyed by run: runs never meet); its URL, the
    server stopped after."""
    home = tmp_path_factory.mktemp("served")
    spec = {"dependencies": ["."], "graphs": {"toy": f"{REPO}/tests/toy_agents.py:builder"}}
    (home / "langgraph.json").write_text(json.dumps(spec))
    port = _free_port()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    cmd = [str(Path(sys.executable).parent / "langgraph"), "dev", "--host", "127.0.0.1", "--port", str(port)]
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        [*cmd, "--no-browser", "--no-reload"], cwd=home, env=env, stdout=log, stderr=log, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while _no_server(url, proc) and time.monotonic() < deadline:
            time.sleep(0.5)  # the poll interval of a bounded wait for /ok
        assert proc.poll() is None and httpx.get(f"{url}/ok", timeout=5).status_code == 200, (
            home / "server.log"
        ).read_text()[-3000:]
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have killed it already
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _verdicts(run_dir: Path, agent: str) -> dict[str, dict[str, Any]]:
    """Each unit's record without what names the run (its id in thread ids) or the agent (its reference, as ATAD
    and llmeval name the model they evaluate), or varies between runs (times)."""
    out = {}
    for record in records(run_dir):
        record = json.loads(json.dumps(record).replace(run_dir.name, "RUN").replace(agent, "AGENT"))
        del record["wall_s"], record["usage"]["llm_seconds"]
        out[record["unit_id"]] = record
    return out


def _served_messages(url: str, run_dir: Path) -> dict[str, list[str]]:
    """Our thread id (without the run id) -> the user messages the served agent holds on its server thread."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None)
    threads = {t for r in records(run_dir) for t in r["agent_threads"]}
    received = {}
    for thread in threads:
        values = client.threads.get_state(server_thread_id(thread))["values"]
        received[thread.removeprefix(run_dir.name + "/")] = [
            m["content"] for m in values["messages"] if m["type"] == "human"
        ]
    return received


def _unordered(case: str, texts: list[str]) -> list[str]:
    """A thread's messages in an order-free form: sorted, and for JudgeAgent, whose parallel questions reach the
    agent in either order, the first message split into our system prompt (one paragraph) and its question, each
    message stripped of the blank lines around it."""
    if case == "judgeagent" and texts:
        texts = [part.strip() for part in [*texts[0].split("\n\n", 1), *texts[1:]]]
    return sorted(texts)


#: Each protocol's golden case (tests/golden_runs.py), made smaller where it runs longest (two seed questions),
#: with a check of the agent's final state on every thread: it reads the served agent's state as the in-process one
SMALLER = {"interview": ["--limit", "2"], "judgeagent": [], "llmeval": [], "atad_evaluate": []}
CHECK = ["--state-check", "tests.toy_agents:looked_up"]


@pytest.mark.parametrize("case", list(SMALLER))
def test_every_protocol_against_the_served_agent_gives_the_in_process_verdicts_from_the_same_messages(
    case, served_toy, tmp_path
):
    code, local, console = run_with_agent(case, tmp_path / "local", extra=[*SMALLER[case], *CHECK])
    assert code == 0 and local is not None, console
    served = f"langgraph:{served_toy}"
    code, remote, console = run_with_agent(case, tmp_path / "remote", served, extra=[*SMALLER[case], *CHECK])
    assert code == 0 and remote is not None, console
    assert all(r["status"] in ("ok", "ungraded") for r in records(remote)), records(remote)
    assert _verdicts(remote, served) == _verdicts(local, AGENT)
    checks = [c for r in records(remote) for c in r["state_checks"].values()]
    assert checks and {c["verdict"] for c in checks} == {"correct"}
    # the same messages on each thread (a JudgeAgent batch's parallel questions take turns in either order, and
    # our system prompt goes before whichever comes first)
    in_process = {t.removeprefix(local.name + "/"): _unordered(case, texts) for t, texts in seen_in(local).items()}
    assert {t: _unordered(case, texts) for t, texts in _served_messages(served_toy, remote).items()} == in_process
    # every turn names the server thread it ran on, and recorded the agent's tool call and reply from it
    events = [json.loads(line) for line in (remote / "events.jsonl").read_text().splitlines() if line.strip()]
    turns = [e["agent"] for e in events if e.get("agent")]
    assert turns and all(t["server_thread_id"] == server_thread_id(t["thread_id"]) for t in turns)
    assert all([m["type"] for m in t["emitted"]] == ["ai", "tool", "ai"] for t in turns)
    assert all(t["usage"] == {"input_tokens": 7, "output_tokens": 3} for t in turns)


@pytest.mark.parametrize(
    ("suffix", "says"),
    [("#nothing", "has no assistant or graph 'nothing' (it serves: toy)"), ("", None)],
    ids=["no-such-assistant", "no-server"],
)
def test_a_server_that_does_not_answer_or_lacks_the_assistant_exits_2_before_anything_runs(
    suffix, says, served_toy, tmp_path, capsys
):
    url = served_toy if says else f"http://127.0.0.1:{_free_port()}"
    says = says or f"the server at {url} did not answer"
    code = cli.main(["--protocol", "interview", "--target", f"langgraph:{url}{suffix}", "--out", str(tmp_path / "o")])
    err = capsys.readouterr()
    assert code == 2
    lines = [line for line in (err.out + err.err).splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("langgraph:http://127.0.0.1:2024", ("http://127.0.0.1:2024", "", 300.0)),
        ("langgraph:https://my.app/api/#rag", ("https://my.app/api", "rag", 300.0)),
        ("langgraph:http://127.0.0.1:2024?timeout_s=5#rag", ("http://127.0.0.1:2024", "rag", 5.0)),
        ("langgraph:http://127.0.0.1:2024#rag?timeout_s=5", ("http://127.0.0.1:2024", "rag", 5.0)),
    ],
)
def test_a_deployed_graphs_reference_names_its_server_assistant_and_options(ref, parts):
    from dyneval.state.agent import parse_agent_ref

    parsed = parse_agent_ref(ref)
    assert (parsed.kind, (parsed.target, parsed.attr, parsed.timeout_s)) == ("langgraph", parts)


def test_a_deployed_graph_without_a_url_is_malformed_exit_2(tmp_path, capsys):
    code = cli.main(["--protocol", "interview", "--target", "langgraph:127.0.0.1:2024", "--out", str(tmp_path / "o")])
    lines = [line for line in "".join(capsys.readouterr()).splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "use langgraph:http(s)://HOST[:PORT][#ASSISTANT]" in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_a_served_agents_own_failure_is_a_model_error_a_timeout_cancels_its_run_a_server_gone_is_infra(
    served_toy, tmp_path
):
    """Last in the module: it kills the module's server."""
    from langgraph_sdk import get_sync_client

    from dyneval.runtime.agents.errors import AgentModelError, AgentTimeout
    from dyneval.runtime.agents.reference import load_agent
    from dyneval.state.errors import InfraError

    looping = load_agent(f"langgraph:{served_toy}?recursion_limit=2")
    with pytest.raises(AgentModelError, match=r"exceeded its recursion limit \(2 steps\)"):
        looping.turn({"role": "user", "content": "hello"}, f"{tmp_path.name}/loop")
    # a turn past timeout_s: an infra_error, and its run cancelled on the server (not left to refuse the next)
    client = get_sync_client(url=served_toy, api_key=None)
    slow = client.assistants.create("toy", config={"configurable": {"toy_delay": 60}})  # the toy sleeps 60 s
    hanging = load_agent(f"langgraph:{served_toy}?timeout_s=2#{slow['assistant_id']}")
    with pytest.raises(AgentTimeout, match="did not end its turn within 2 s"):
        hanging.turn({"role": "user", "content": "hello"}, f"{tmp_path.name}/slow")
    runs = client.runs.list(server_thread_id(f"{tmp_path.name}/slow"))
    assert [r["status"] for r in runs] == ["interrupted"]
    app = load_agent(f"langgraph:{served_toy}#toy")
    thread = f"{tmp_path.name}/gone"
    assert not app.has_thread(thread)
    assert [m.type for m in app.turn({"role": "user", "content": "hello"}, thread).emitted] == ["ai", "tool", "ai"]
    assert app.has_thread(thread)  # a resume continues on the server's thread
    port = int(served_toy.rsplit(":", 1)[1])
    pids = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    assert "127.0.0.1:" in pids and "0.0.0.0:" not in pids.split()[3]  # the server listens on loopback only
    server_pid = int(pids.split("pid=")[1].split(",")[0])
    os.kill(server_pid, signal.SIGKILL)
    with pytest.raises(InfraError, match="the server failed mid-run"):
        app.turn({"role": "user", "content": "again"}, thread)
