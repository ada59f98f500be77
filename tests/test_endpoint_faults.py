"""Faults of endpoints and stores: a reply that is not a chat completion (a proxy's HTML page) is an endpoint fault,
retried and then ``infra_error``; the pre-flight retries as units do and a refused start leaves nothing behind; a
Chroma server that goes away is retried, then its units end ``infra_error`` and a resume finishes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from rich.console import Console

from dyneval import gate
from dyneval.runtime.embedded import free_port
from dyneval.runtime.runner import execute, open_run
from dyneval.runtime.services import services_of
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError, RetryPolicy
from dyneval.stores.vectors import is_server_fault
from tests import fake_endpoint
from tests.standin_endpoint import Faults, StandIn, completion, content_key, generic_reply
from tests.toy_protocol import ToyContext, ToyProtocol

REPO = Path(__file__).resolve().parents[1]
LOGIN_PAGE = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body>Corporate proxy login</body></html>"


def _html(body: dict[str, Any]) -> fake_endpoint.Reply:
    return 200, LOGIN_PAGE, {"Content-Type": "text/html; charset=utf-8"}


def _toy_cli(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    """``run.py --protocol toy`` (2 units) with both roles on the model at ``url``, whose faults are retried once."""
    config = tmp_path / "models.toml"
    config.write_text(
        f'[models.proxied]\nmodel = "m"\nbase_url = "{url}"\nmax_retries = 1\n'
        '[roles]\ntarget = "proxied"\nevaluator = "proxied"\n'
    )
    env = {**os.environ, "DYNEVAL_PROTOCOLS": "toy=tests.toy_protocol:ToyProtocol"}
    return subprocess.run(
        [
            sys.executable,
            "run.py",
            "--protocol",
            "toy",
            "--config",
            str(config),
            "--units",
            "2",
            "--out",
            str(tmp_path / "runs"),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _open_toy(out: Path, url: str, run_id: str | None = None) -> Any:
    """The toy protocol's run (2 units) with its roles on ``url`` (models ``t`` and ``j``), retrying without waits."""
    roles = {"target": f"t@{url}", "evaluator": f"j@{url}"}
    return open_run(
        ToyProtocol(),
        RunConfig(protocol="toy", out=str(out), roles=roles, params={"units": 2}),
        run_id=run_id,
        console=Console(quiet=True),
        retry_sleep=lambda s: None,
    )


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


# -- a reply that is not a chat completion ------------------------------------------------------------------------


def test_an_html_page_with_http_200_refuses_the_start_in_one_line_naming_the_endpoint_and_leaves_no_run_directory(
    tmp_path,
):
    requests: list[dict[str, Any]] = []
    server = fake_endpoint.serve(lambda body: requests.append(body) or _html(body))
    try:
        done = _toy_cli(tmp_path, fake_endpoint.url_of(server))
    finally:
        fake_endpoint.stop(server)
    assert done.returncode == gate.EXIT_BAD_INPUT == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert fake_endpoint.url_of(server) in lines[0] and "HTTP 200 text/html, not a chat completion" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert len(requests) == 2  # the pre-flight is retried as the spec says (max_retries = 1), as a 5xx is
    assert not (tmp_path / "runs").exists()


def test_an_html_page_with_http_200_ends_every_unit_infra_error_and_exits_4_without_a_traceback(tmp_path):
    server = fake_endpoint.serve(_html)
    try:
        done = _toy_cli(tmp_path, fake_endpoint.url_of(server), "--skip-preflight")
    finally:
        fake_endpoint.stop(server)
    assert done.returncode == gate.EXIT_UNITS_FAILED == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    records = _records(run_dir)
    assert [r["status"] for r in records] == ["infra_error", "infra_error"]
    for record in records:
        assert "traceback" not in record and "\n" not in record["error"]
        assert "after 2 attempt(s)" in record["error"]
        assert "HTTP 200 text/html, not a chat completion: '<!DOCTYPE html> <html><head>" in record["error"]


def test_an_endpoint_that_answers_html_or_a_json_error_now_and_then_is_retried_and_the_run_finishes_ok(tmp_path):
    """The first time each request comes, a text request gets a login page and a structured one ``{"error": ...}``,
    both with HTTP 200: each is retried as a 5xx is, and answered the second time."""
    seen: set[tuple[str, str]] = set()
    lock = threading.Lock()

    def first_time_not(body: dict[str, Any]) -> fake_endpoint.Reply:
        with lock:
            first = (body["model"], content_key(body)) not in seen
            seen.add((body["model"], content_key(body)))
        if not first:
            return 200, completion(generic_reply(body))
        if body.get("tools"):
            return 200, {"error": {"message": "upstream overloaded", "type": "server_error"}}
        return _html(body)

    server = fake_endpoint.serve(first_time_not)
    try:
        run = _open_toy(tmp_path, fake_endpoint.url_of(server))
        summary = execute(ToyProtocol(), run)
    finally:
        fake_endpoint.stop(server)
    assert summary["status_counts"] == {"ok": 2}
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    failed = {(e["step"], e["error"].split(", not")[0].split(": ")[-1]) for e in events if e["error"]}
    assert failed == {
        ("preflight", "HTTP 200 text/html"),
        ("answer", "HTTP 200 text/html"),
        ("judge", "HTTP 200 application/json"),
    }
    assert [e["attempt"] for e in events if not e["error"]] == [2] * 6  # 2 pings, then an answer and a verdict a unit


# -- the pre-flight --------------------------------------------------------------------------------------------------


def test_the_preflight_retries_like_a_unit_so_30_percent_transient_faults_never_refuse_a_start(tmp_path):
    """Six starts against one endpoint answering 30 % of requests with 429 or 5xx, each start pinging two models: a
    single retry refused 2 of 6 such starts."""
    attempts: list[int] = []
    with StandIn(faults=Faults(transient=0.3, seed=8)) as standin:  # a seed whose faults hit pings twice in a row
        for _ in range(6):
            run = _open_toy(tmp_path, standin.url)
            execute(ToyProtocol(), run)  # a refused start raises InputError
            events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
            attempts += [
                max(e["attempt"] for e in events if e["step"] == "preflight" and e["model"].startswith(m))
                for m in ("t@", "j@")
            ]
    assert max(attempts) > 2  # some ping failed twice in a row: one retry would have refused that start


def test_connection_refused_at_the_preflight_refuses_the_start_and_leaves_no_run_directory(tmp_path):
    out = tmp_path / "new" / "runs"
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(InputError, match=f"endpoint for role .* \\(t@{url}\\) does not answer: .*Connection"):
        execute(ToyProtocol(), _open_toy(out, url))
    assert not (tmp_path / "new").exists()


def test_a_resumed_run_refused_at_the_preflight_keeps_its_run_directory(tmp_path):
    with StandIn() as standin:
        run = _open_toy(tmp_path, standin.url)
        execute(ToyProtocol(), run)
    down = f"http://127.0.0.1:{free_port()}/v1"  # (the closed stand-in's kept-alive connection would still answer)
    with pytest.raises(InputError, match="does not answer"):
        execute(ToyProtocol(), _open_toy(tmp_path, down, run_id=run.run_dir.name))
    assert [r["status"] for r in _records(run.run_dir)] == ["ok", "ok"]


# -- a Chroma server that goes away ---------------------------------------------------------------------------------


class LoopbackChroma:
    """A real Chroma server (``chroma run``) on a free loopback port, stopped and started again on request."""

    def __init__(self, path: Path) -> None:
        self.path, self.port, self.process = path, free_port(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("chroma")),
                "run",
                "--path",
                str(self.path),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the Chroma server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


@pytest.fixture
def chroma_server(tmp_path):
    server = LoopbackChroma(tmp_path / "chroma-server")
    server.start()
    yield server
    if server.process.poll() is None:
        server.stop()


def before_lookup(question: str) -> None:
    """What a test does in a unit just before its Chroma calls (stop the server ...)."""


class LookupState(TypedDict, total=False):
    question: str
    answer: str
    verdict: bool | None
    tallied: bool


def lookup(state: LookupState, runtime: Runtime[ToyContext]) -> dict[str, Any]:
    """Store the question's vector in the run's Chroma collection and find it again."""
    before_lookup(state["question"])
    facts = services_of(runtime.context).chroma().get_or_create_collection("facts", embedding_function=None)
    n = float(state["question"].split()[-1])
    facts.upsert(ids=[state["question"]], embeddings=[[1.0, n]])
    found = facts.query(query_embeddings=[[1.0, n]], n_results=1)["ids"][0]
    return {"answer": found[0], "verdict": found == [state["question"]], "tallied": True}


class ChromaLookup(ToyProtocol):
    """The toy protocol with one step per unit that talks to the Chroma server (no LLM call)."""

    def builder(self) -> StateGraph:
        graph = StateGraph(LookupState, context_schema=ToyContext)
        graph.add_node("lookup", lookup)
        graph.add_edge(START, "lookup")
        graph.add_edge("lookup", END)
        return graph

    def prepare(self, run: Any, units: list) -> None:
        """Connect before the units, as the protocols do (chromadb's first import in a unit thread can race the
        runner's plotting import of numpy)."""
        run.services.chroma()


def _chroma_run(out: Path, server: LoopbackChroma, run_id: str | None = None) -> dict[str, Any]:
    config = RunConfig(protocol="toy", out=str(out), params={"units": 3}, concurrency=1)
    config.stores.chroma_url = server.url
    run = open_run(ChromaLookup(), config, run_id=run_id, console=Console(quiet=True))
    return execute(ChromaLookup(), run, skip_preflight=True) | {"run_dir": run.run_dir}


def test_a_chroma_server_restart_within_the_retries_goes_unnoticed(tmp_path, chroma_server, monkeypatch):
    def restart(question: str) -> None:
        if question == "question 1":
            chroma_server.stop()
            threading.Thread(target=chroma_server.start, daemon=True).start()

    retries: list[int] = []
    delay = RetryPolicy.delay
    monkeypatch.setattr(
        RetryPolicy, "delay", lambda self, attempt, exc=None: retries.append(attempt) or delay(self, attempt, exc)
    )
    monkeypatch.setattr(sys.modules[__name__], "before_lookup", restart)
    summary = _chroma_run(tmp_path / "runs", chroma_server)
    assert summary["status_counts"] == {"ok": 3}
    assert retries  # question 1's calls were refused while the server restarted, and retried with backoff


def test_a_chroma_server_down_mid_run_ends_its_units_infra_error_in_one_line_and_a_resume_finishes(
    tmp_path, chroma_server, monkeypatch
):
    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, exc=None: 0.05)
    monkeypatch.setattr(
        sys.modules[__name__],
        "before_lookup",
        lambda question: chroma_server.stop() if question == "question 1" else None,
    )
    summary = _chroma_run(tmp_path / "runs", chroma_server)
    records = _records(summary["run_dir"])
    assert [r["status"] for r in records] == ["ok", "infra_error", "infra_error"]
    for record in records[1:]:
        assert "traceback" not in record and "\n" not in record["error"]
        assert record["error"].startswith(f"Chroma server {chroma_server.url}: ")
        assert "failed after 5 attempt(s): ConnectError" in record["error"]

    monkeypatch.setattr(sys.modules[__name__], "before_lookup", lambda question: None)
    chroma_server.start()
    resumed = _chroma_run(tmp_path / "runs", chroma_server, run_id=summary["run_dir"].name)
    assert resumed["status_counts"] == {"ok": 3}


def test_chroma_server_faults_are_told_from_bad_requests_as_chromadb_raises_them():
    """5xx and 429 (with or without Chroma's error body) and no connection are retried; a bad request is not."""
    from chromadb.api.base_http_client import BaseHTTPClient

    def raised(status: int, body: str) -> BaseException:
        response = httpx.Response(status, text=body, request=httpx.Request("POST", "http://127.0.0.1:8000/api"))
        with pytest.raises(Exception) as caught:
            BaseHTTPClient._raise_chroma_error(response)
        return caught.value

    assert is_server_fault(raised(503, "upstream restarting"))
    assert is_server_fault(raised(500, json.dumps({"error": "InternalError", "message": "compaction failed"})))
    assert is_server_fault(raised(429, json.dumps({"error": "RateLimitError", "message": "slow down"})))
    assert is_server_fault(httpx.ConnectError("[Errno 111] Connection refused"))
    assert not is_server_fault(raised(400, json.dumps({"error": "InvalidArgumentError", "message": "bad name"})))
    assert not is_server_fault(ValueError("a bug of ours"))
