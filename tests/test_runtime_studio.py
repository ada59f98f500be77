"""LangGraph Studio: `langgraph dev` serves every protocol graph on loopback, offline,
and runs one unit of a graph to completion through its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from protocols import protocol_class
from runtime.embedded import free_port
from runtime.runner import open_run
from state.config import RunConfig

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]
STUDIO_GRAPH = "interview"  # the protocol people step through in Studio


@pytest.fixture
def langgraph_dev(tmp_path, embedded_url):
    exe = Path(sys.executable).with_name("langgraph")
    if not exe.exists():
        pytest.fail("langgraph-cli is not installed (it is part of the test extras)")
    port = free_port()
    log = (tmp_path / "langgraph-dev.log").open("w")  # outside the project tree: no reload loops
    env = {**os.environ, "DYNEVAL_EMBEDDED_URL": embedded_url, "DYNEVAL_RUN_DIR": str(tmp_path / "studio"),
           "LANGSMITH_TRACING": "false"}
    proc = subprocess.Popen([str(exe), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port",
                             str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("langgraph dev exited: " + (tmp_path / "langgraph-dev.log").read_text()[-2000:])
        try:
            if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("langgraph dev did not start within 120 s")
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    shutil.rmtree(REPO / ".langgraph_api", ignore_errors=True)


def test_langgraph_dev_lists_every_protocol_graph_and_runs_one_unit(langgraph_dev, tmp_path):
    with httpx.Client(base_url=langgraph_dev, timeout=60) as client:
        assistants = client.post("/assistants/search", json={"limit": 50}).json()
        graphs = {a["graph_id"] for a in assistants}
        assert graphs >= {"atad", "judgeagent", "interview", "llmeval"}
        assert set(json.loads((REPO / "langgraph.json").read_text())["graphs"]) == graphs

        assistant = next(a["assistant_id"] for a in assistants if a["graph_id"] == STUDIO_GRAPH)
        schemas = client.get(f"/assistants/{assistant}/schemas").json()
        assert "target" in json.dumps(schemas.get("context_schema") or schemas.get("config_schema"))

        protocol = protocol_class(STUDIO_GRAPH)()
        run = open_run(protocol, RunConfig(protocol=STUDIO_GRAPH, out=str(tmp_path / "plan")), run_id=None,
                       console=Console(quiet=True))
        unit = protocol.plan(run)[0]

        thread = client.post("/threads", json={}).json()["thread_id"]
        final = client.post(f"/threads/{thread}/runs/wait", timeout=600, json={
            "assistant_id": STUDIO_GRAPH, "input": unit.input,
            "context": {"target": "local", "evaluator": "local", "seed": 3}}).json()
        assert "__error__" not in final, final
        state = client.get(f"/threads/{thread}/state").json()
        assert state["next"] == []
        assert state["values"], "the unit produced no state"
        assert client.get(f"/threads/{thread}").json()["status"] == "idle"
