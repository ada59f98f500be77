"""How much the batch runner gains from running units concurrently.

Serves a fake OpenAI-compatible endpoint on 127.0.0.1 that answers every request
after a fixed latency (as a remote model would), runs the same toy batch at
several ``--concurrency`` values, and prints wall times and speed-up ratios
measured in this one run.

    python bench/runner_concurrency.py [--units 16] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from dyneval.runtime.runner import execute, open_run  # noqa: E402
from dyneval.state.config import RunConfig  # noqa: E402
from tests.fake_endpoint import completion, serve, url_of  # noqa: E402
from tests.toy_protocol import ToyProtocol  # noqa: E402


def serve_with_latency(latency: float) -> ThreadingHTTPServer:
    """Answers every request after ``latency`` seconds: a tool call when tools are offered, else text."""

    def respond(body: dict) -> tuple[int, dict]:
        time.sleep(latency)
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            return 200, completion(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"correct": true}'}}
                    ],
                }
            )
        return 200, completion("an answer")

    return serve(respond)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request at the fake endpoint")
    args = parser.parse_args()
    server = serve_with_latency(args.latency)
    url = url_of(server)
    models = {"fake": {"model": "m", "base_url": url, "concurrency": 64}}
    timings: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as out:
        for concurrency in (1, 2, 4, 8):
            config = RunConfig(
                protocol="toy",
                out=out,
                models=models,
                roles={"target": "fake", "evaluator": "fake"},
                concurrency=concurrency,
                params={"units": args.units},
            )
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
