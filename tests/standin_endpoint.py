"""A stand-in OpenAI-compatible endpoint whose answers depend only on the request content.

Two runs against it are comparable call by call: the same messages (and the same
structured-output schema) always get the same reply, whatever the order, the
thread or the time of the request. That is what the resume, fault and refactor
tests compare.

* Plain requests get a short deterministic text.
* Structured requests (``tools`` with a forced function, as LangChain's
  ``with_structured_output(method="function_calling")`` sends them) get a tool
  call whose arguments are a valid instance of the function's JSON schema, with
  values drawn from a hash of the request.
* A repair request (our ``common/repair`` prompt appended to the original
  messages) is answered as the original request would have been, so a repaired
  reply equals the clean run's reply.
* ``respond`` lets a test answer chosen requests itself (return ``None`` to fall
  back to the generic answer).
* :class:`Faults` injects transient faults (429, 500, 503, slow replies) and
  malformed structured replies at given rates, drawn from its own seeded
  generator, never from the content; malformed replies are injected only into
  first attempts (never into a repair request), so every fault can be healed
  by the call layer's retries and its one repair.

Every request is logged in :attr:`StandIn.requests` with its arrival time.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fake_endpoint import Quiet, loopback, send_json

REPAIR_PREFIX = "Your previous reply could not be used"

_WORDS = (
    "alpha",
    "bravo",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "iris",
    "juniper",
    "kelp",
    "lumen",
    "maple",
    "nectar",
    "onyx",
    "prism",
    "quartz",
    "raven",
    "sable",
    "tundra",
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def is_repair(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and _text(messages[-1].get("content")).startswith(REPAIR_PREFIX)


def content_key(body: dict[str, Any]) -> str:
    """Hash of what determines the answer: the messages (less a trailing repair turn) and the tool schema."""
    messages = list(body.get("messages") or [])
    if is_repair(body):
        messages = messages[:-1]
    tools = body.get("tools") or []
    payload = {
        "messages": [[m.get("role"), _text(m.get("content"))] for m in messages],
        "tools": [t.get("function", {}).get("name") for t in tools],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class _Draw:
    """Deterministic values from a hash (a seeded generator per request)."""

    def __init__(self, key: str) -> None:
        self.rng = random.Random(int(key[:16], 16))

    def words(self, low: int = 2, high: int = 6) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(low, high)))


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def instance(schema: dict[str, Any], draw: _Draw, defs: dict[str, Any] | None = None) -> Any:
    """A value valid for ``schema`` (the subset pydantic emits for our output schemas)."""
    defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
    schema = _resolve(schema, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw.rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [_resolve(s, defs) for s in schema[key]]
            options = [s for s in options if s.get("type") != "null"] or options
            return instance(draw.rng.choice(options), draw, defs)
    if "allOf" in schema:
        return instance(schema["allOf"][0], draw, defs)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(sub, draw, defs) for name, sub in props.items()}
    if kind == "array":
        low = schema.get("minItems", 1)
        high = max(low, min(schema.get("maxItems", 3), low + 2))
        return [instance(schema.get("items", {}), draw, defs) for _ in range(draw.rng.randint(low, high))]
    if kind == "boolean":
        return draw.rng.random() < 0.5
    if kind == "integer":
        low = int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1))
        high = int(schema.get("maximum", schema.get("exclusiveMaximum", low + 11) - 1))
        return draw.rng.randint(low, max(low, high))
    if kind == "number":
        low = float(schema.get("minimum", 0.0))
        high = float(schema.get("maximum", low + 10.0))
        return round(draw.rng.uniform(low, high), 3)
    text = draw.words()
    low = schema.get("minLength", 0)
    return text if len(text) >= low else (text + " " + draw.words(low, low + 1))[: max(low, len(text))]


def generic_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The deterministic assistant message for a request."""
    draw = _Draw(content_key(body))
    tools = body.get("tools") or []
    if tools:
        fn = tools[0]["function"]
        args = instance(fn.get("parameters") or {"type": "object"}, draw)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_" + content_key(body)[:12],
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": json.dumps(args)},
                }
            ],
        }
    return {"role": "assistant", "content": draw.words(3, 12).capitalize() + "."}


def completion(message: dict[str, Any], model: str = "standin") -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


@dataclass
class Faults:
    """Rates of injected faults, drawn from ``seed`` (not from the content)."""

    transient: float = 0.0
    malformed: float = 0.0
    slow_s: float = 0.0  # a transient fault of kind "slow" sleeps this long (longer than the client's timeout)
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


def _malformed(body: dict[str, Any], pick: float) -> dict[str, Any]:
    fn = (body.get("tools") or [{}])[0].get("function", {}).get("name", "f")
    if pick < 0.34:
        return {"role": "assistant", "content": "Sure! Here is my verdict: it looks fine to me."}
    if pick < 0.67:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_bad", "type": "function", "function": {"name": fn, "arguments": '{"broken": '}}
            ],
        }
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_bad", "type": "function", "function": {"name": fn, "arguments": '{"unexpected": 1}'}}
        ],
    }


@dataclass
class Request:
    ts: float
    key: str
    model: str
    structured: bool
    repair: bool
    status: int


class StandIn:
    """The server; use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        respond: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
        faults: Faults | None = None,
        latency_s: float = 0.0,
        log_path: str | None = None,
    ) -> None:
        self.respond = respond
        self.log_path = log_path
        self.faults = faults or Faults()
        self.latency_s = latency_s
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        standin = self

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"  # keep-alive, as real OpenAI-compatible servers answer
            # headers and body leave in two writes: with Nagle's algorithm the body would wait for the client's
            # delayed ACK of the headers (40 ms on Linux) on a kept-alive connection
            disable_nagle_algorithm = True

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload = standin.handle(body)
                try:
                    send_json(self, status, payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

        self.server = loopback(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def spec(self, model: str = "standin") -> str:
        """A ``MODEL@BASE_URL`` spec for this endpoint (the model name tells roles apart in the log)."""
        return f"{model}@{self.url}"

    def handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        repair = is_repair(body)
        structured = bool(body.get("tools"))
        with self._lock:
            fault = self.faults.rng.random() < self.faults.transient
            kind = self.faults.rng.choice(("429", "500", "503", "slow" if self.faults.slow_s else "500"))
            bad = structured and not repair and self.faults.rng.random() < self.faults.malformed
            pick = self.faults.rng.random()
        status = 200
        if fault:
            status = 504 if kind == "slow" else int(kind)
        self._log(body, structured, repair, status)
        if self.latency_s:
            time.sleep(self.latency_s)
        if fault:
            if kind == "slow":
                time.sleep(self.faults.slow_s)
            return status, {"error": {"message": f"injected {kind}", "type": "server_error"}}
        message = _malformed(body, pick) if bad else None
        if message is None and self.respond is not None:
            message = self.respond(body)
        if message is None:
            message = generic_reply(body)
        return 200, completion(message, body.get("model", "standin"))

    def _log(self, body: dict[str, Any], structured: bool, repair: bool, status: int) -> None:
        request = Request(time.time(), content_key(body), str(body.get("model")), structured, repair, status)
        with self._lock:
            self.requests.append(request)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(request.__dict__) + "\n")

    def ok_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.status == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main() -> None:
    """``python -m tests.standin_endpoint [--transient R] [--malformed R] [--latency S]``: serve until killed.

    Prints the base URL on its first line, so a test can run ``run.py`` in a subprocess against it.
    """
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--transient", type=float, default=0.0)
    parser.add_argument("--malformed", type=float, default=0.0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", help="append one JSON line per request here")
    args = parser.parse_args()
    standin = StandIn(
        faults=Faults(args.transient, args.malformed, seed=args.seed), latency_s=args.latency, log_path=args.log
    )
    print(standin.url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
