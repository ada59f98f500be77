"""LangSmith tracing, as the README documents it: ``LANGSMITH_TRACING=true`` with ``LANGSMITH_ENDPOINT`` and
``LANGSMITH_API_KEY`` traces a run's graphs, nodes and model calls through LangChain, here into a sink on loopback
(any LangSmith-compatible server, self-hosted or not, receives the same)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

from tests.fake_endpoint import Quiet, loopback, send_json
from tests.standin_endpoint import StandIn

REPO = Path(__file__).resolve().parents[1]


class Sink:
    """Records every request body sent to it; answers ``{}`` (the client only needs a 2xx)."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, str, bytes]] = []
        sink = self

        class Handler(Quiet):
            def _answer(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    data = gzip.decompress(data)
                sink.bodies.append((self.command, self.path, data))
                send_json(self, 200, {})

            do_GET = do_POST = do_PATCH = _answer  # noqa: N815

        self.server = loopback(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_langsmith_tracing_sends_the_graph_its_nodes_and_the_model_calls(tmp_path):
    sink = Sink()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))},
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": sink.url,
        "LANGSMITH_API_KEY": "local-test-key",
        "LANGSMITH_PROJECT": "dyneval-test",
    }
    try:
        with StandIn() as standin:
            done = subprocess.run(
                [
                    sys.executable,
                    "run.py",
                    "--protocol",
                    "interview",
                    "--target",
                    standin.spec("t"),
                    "--evaluator",
                    standin.spec("j"),
                    "--out",
                    str(tmp_path),
                    "--limit",
                    "1",
                    "--max-questions",
                    "1",
                    "--skip-preflight",
                ],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
    finally:
        sink.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    sent = b"".join(body for method, path, body in sink.bodies if method in ("POST", "PATCH") and "/runs" in path)
    text = sent.decode("utf-8", "replace")
    assert "dyneval-test" in text, "no run was traced into the named project"
    for name in ("interview", "single_turn_judge", "modify_question", "grade", "ChatOpenAI"):
        assert name in text, f"{name} was not traced"
    assert "local-test-key" not in text  # the key travels in a header, never in a trace
