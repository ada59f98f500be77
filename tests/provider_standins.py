"""Loopback stand-ins that speak three non-OpenAI wire formats: Anthropic's Messages API (``POST /v1/messages``),
Gemini's REST API (``POST /{version}/models/{model}:generateContent``, what the google-genai SDK sends) and Ollama's
chat API (``POST /api/chat``, a stream of JSON lines). Each request is translated to the OpenAI shape and
answered by :class:`tests.standin_endpoint.StandIn`'s own logic (deterministic text, a schema-valid tool call for a
structured request, injected faults), then translated back, so a run against them is checked as a run against the
OpenAI-compatible stand-in is. FastAPI served by uvicorn on 127.0.0.1, in a thread of the test's process."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.standin_endpoint import StandIn


def _text(content: Any) -> str:
    """An Anthropic message's content (a string, or blocks: text, tool_use, tool_result) as one text."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        kind = block.get("type")
        if kind == "text":
            parts.append(block["text"])
        elif kind == "tool_use":
            parts.append(json.dumps(block.get("input")))
        elif kind == "tool_result":
            parts.append(_text(block.get("content")))
    return "\n".join(parts)


def anthropic_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": "system", "content": _text(body["system"])}] if body.get("system") else []
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in body["messages"]]
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t.get("input_schema") or {}}}
        for t in body.get("tools") or []
    ]
    return {"model": body["model"], "messages": messages, **({"tools": tools} if tools else {})}


def ollama_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": m["role"], "content": m.get("content") or ""} for m in body["messages"]]
    return {"model": body["model"], "messages": messages, **({"tools": body["tools"]} if body.get("tools") else {})}


def _gemini_text(parts: list[dict[str, Any]]) -> str:
    """A Gemini content's parts (text, functionCall, functionResponse) as one text."""
    texts = []
    for part in parts:
        if "text" in part:
            texts.append(part["text"])
        elif "functionCall" in part:
            texts.append(json.dumps(part["functionCall"].get("args")))
        elif "functionResponse" in part:
            texts.append(json.dumps(part["functionResponse"].get("response")))
    return "\n".join(texts)


def json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` (OpenAPI's subset, types in capitals: ``OBJECT``, ``STRING``) as JSON schema."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v.lower() if k == "type" and isinstance(v, str) else json_schema(v)) for k, v in schema.items()}
    if out.get("properties"):
        out["properties"] = {name: json_schema(sub) for name, sub in schema["properties"].items()}
    return out


def gemini_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    system = body.get("systemInstruction")
    messages = [{"role": "system", "content": _gemini_text(system["parts"])}] if system else []
    messages += [
        {"role": "assistant" if c.get("role") == "model" else "user", "content": _gemini_text(c["parts"])}
        for c in body["contents"]
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": f["name"],
                "parameters": f.get("parametersJsonSchema") or json_schema(f.get("parameters") or {}),
            },
        }
        for t in body.get("tools") or []
        for f in t.get("functionDeclarations") or []
    ]
    return {"model": body["model"], "messages": messages, **({"tools": tools} if tools else {})}


TO_OPENAI = {"anthropic": anthropic_to_openai, "gemini": gemini_to_openai, "ollama": ollama_to_openai}

#: google.rpc's status names for the HTTP statuses the stand-in answers with
_GOOGLE_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def app(standin: StandIn, received: list[dict[str, Any]]) -> FastAPI:
    """The three APIs over ``standin``; every request body (in its own wire format) is appended to ``received``."""
    api = FastAPI()

    async def answer(name: str, request: Request, **extra: Any) -> tuple[dict[str, Any], int, dict[str, Any]]:
        """The request's body (with ``extra``: what the URL says), and the stand-in's status and OpenAI-shaped reply
        to it."""
        body = {**await request.json(), **extra}
        received.append({"api": name, "headers": dict(request.headers), "body": body})
        status, reply = standin.handle(TO_OPENAI[name](body))
        return body, status, reply

    @api.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body, status, reply = await answer("anthropic", request)
        if status != 200:
            error = {"type": "error", "error": {"type": "api_error", "message": reply["error"]["message"]}}
            return JSONResponse(error, status_code=status)
        message, usage = reply["choices"][0]["message"], reply["usage"]
        calls = message.get("tool_calls") or []
        content = [
            {
                "type": "tool_use",
                "id": c["id"],
                "name": c["function"]["name"],
                "input": json.loads(c["function"]["arguments"]),
            }
            for c in calls
        ] or [{"type": "text", "text": message["content"]}]
        return JSONResponse(
            {
                "id": "msg_standin",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "tool_use" if calls else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
            }
        )

    @api.post("/{version}/models/{call}")
    async def generate_content(version: str, call: str, request: Request) -> Response:
        model, _, method = call.partition(":")
        if method != "generateContent":
            return JSONResponse({"error": {"code": 404, "message": method, "status": "NOT_FOUND"}}, status_code=404)
        body, status, reply = await answer("gemini", request, model=model)
        if status != 200:
            error = {"code": status, "message": reply["error"]["message"], "status": _GOOGLE_STATUS[status]}
            return JSONResponse({"error": error}, status_code=status)
        message, usage = reply["choices"][0]["message"], reply["usage"]
        calls = message.get("tool_calls") or []
        parts = [
            {"functionCall": {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}}
            for c in calls
        ] or [{"text": message["content"]}]
        return JSONResponse(
            {
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {
                    "promptTokenCount": usage["prompt_tokens"],
                    "candidatesTokenCount": usage["completion_tokens"],
                    "totalTokenCount": usage["prompt_tokens"] + usage["completion_tokens"],
                },
                "modelVersion": model,
            }
        )

    @api.post("/api/chat")
    async def chat(request: Request) -> Response:
        body, status, reply = await answer("ollama", request)
        if status != 200:
            return JSONResponse({"error": reply["error"]["message"]}, status_code=status)
        message, usage = reply["choices"][0]["message"], reply["usage"]
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            out["tool_calls"] = [
                {"function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in message["tool_calls"]
            ]
        line = {
            "model": body["model"],
            "created_at": "2026-01-01T00:00:00Z",
            "message": out,
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": usage["prompt_tokens"],
            "eval_count": usage["completion_tokens"],
        }
        return Response(json.dumps(line) + "\n", media_type="application/x-ndjson")

    return api


@contextmanager
def provider_standin(standin: StandIn) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The stand-in's base URL (``http://127.0.0.1:PORT``, every API) and the list of requests it received."""
    received: list[dict[str, Any]] = []
    server = uvicorn.Server(uvicorn.Config(app(standin, received), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the provider stand-in did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.should_exit = True
        thread.join(timeout=30)
