"""How much the batch runner gains from running units concurrently.

Serves a fake OpenAI-compatible endpoint on 127.0.0.1 that answers every request
after a fixed latency (as a remote model would), runs the same toy batch at
several ``--concurrency`` values, and prints wall times and speed-up ratios
measured in this one run.

    python bench/runner_concurrency.py [--units 16] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from runtime.runner import execute, open_run  # noqa: E402
from state.config import RunConfig  # noqa: E402
from tests.toy_protocol import ToyProtocol  # noqa: E402


def serve(latency: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            if body.get("tools"):
                name = body["tools"][0]["function"]["name"]
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "c1", "type": "function", "function": {"name": name, "arguments": '{"correct": true}'}}]}
            else:
                message = {"role": "assistant", "content": "an answer"}
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request at the fake endpoint")
    args = parser.parse_args()
    server = serve(args.latency)
    url = f"http://127.0.0.1:{server.server_port}/v1"
    models = {"fake": {"model": "m", "base_url": url, "concurrency": 64}}
    timings: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as out:
        for concurrency in (1, 2, 4, 8):
            config = RunConfig(protocol="toy", out=out, models=models, roles={"target": "fake", "evaluator": "fake"},
                               concurrency=concurrency, params={"units": args.units})
            run = open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True))
            started = time.perf_counter()
            summary = execute(ToyProtocol(), run, skip_preflight=True)
            timings[concurrency] = time.perf_counter() - started
            assert summary["status_counts"] == {"ok": args.units}, summary["status_counts"]
    server.shutdown()
    print(f"{args.units} units x 2 calls, {args.latency:.2f}s per call at the endpoint")
    print(f"{'concurrency':>11} {'wall s':>8} {'speed-up vs 1':>14}")
    for concurrency, wall in timings.items():
        print(f"{concurrency:>11} {wall:>8.2f} {timings[1] / wall:>14.2f}")


if __name__ == "__main__":
    main()
