"""A fake OpenAI-compatible chat endpoint on 127.0.0.1 (tests and bench scripts)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(message: dict[str, Any] | str) -> dict[str, Any]:
    """A chat.completion body; a string becomes a plain assistant message."""
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


Reply = tuple[int, dict[str, Any] | bytes] | tuple[int, dict[str, Any] | bytes, dict[str, str]]


def loopback(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` serving on a free port of 127.0.0.1, one thread per request, until :func:`stop`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    """Answer the request ``handler`` holds: a dict ``payload`` as JSON, bytes as they are (give their
    ``Content-Type`` in ``headers``, e.g. a proxy's HTML page)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    handler.send_response(status)
    for key, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


class Quiet(BaseHTTPRequestHandler):
    """A request handler that logs nothing to the test's output."""

    def log_message(self, *args: Any) -> None:
        pass


def serve(respond: Callable[[dict[str, Any]], Reply]) -> ThreadingHTTPServer:
    """Serve every POST with ``respond(request_body) -> (status, body[, extra_headers])`` on a free loopback port
    (stop it with :func:`stop`), answered by :func:`send_json`."""

    class Handler(Quiet):
        def do_POST(self):  # noqa: N802
            status, payload, *extra = respond(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            send_json(self, status, payload, *extra)

    return loopback(Handler)


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/v1"
