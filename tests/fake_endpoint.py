"""A fake OpenAI-compatible chat endpoint on 127.0.0.1 (tests and bench scripts)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def completion(message: dict[str, Any] | str) -> dict[str, Any]:
    """A chat.completion body; a string becomes a plain assistant message."""
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}


Reply = tuple[int, dict[str, Any] | bytes] | tuple[int, dict[str, Any] | bytes, dict[str, str]]


def serve(respond: Callable[[dict[str, Any]], Reply]) -> ThreadingHTTPServer:
    """Serve every POST with ``respond(request_body) -> (status, body[, extra_headers])`` on a free loopback port
    (one thread per request; stop it with :func:`stop`): a dict body is sent as JSON, bytes as they are (give their
    ``Content-Type`` in the headers, e.g. a proxy's HTML page)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            status, payload, *extra = respond(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            headers = {"Content-Type": "application/json", "Content-Length": str(len(data)), **(extra or [{}])[0]}
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/v1"
