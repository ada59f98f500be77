"""The chat model's request path (``runtime.models.ChatCompletionsPost``) sends what the OpenAI client's
``create`` sends (the same fields, each the same bytes), reads the reply as LangChain would, and raises the
client's error classes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from dyneval.state.config import ModelSpec
from tests.fake_endpoint import Quiet, loopback, send_json

TOOL_REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "Pick", "arguments": json.dumps({"choice": "B", "why": "ok"})},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
}
TEXT_REPLY = {
    "id": "c2",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "forty-two"}}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
}


class Pick(BaseModel):
    """Pick an option."""

    choice: str
    why: str


class _Server:
    """Records each request's path, headers and body bytes; answers from ``self.reply`` (status, headers, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.reply: tuple[int, dict[str, str], dict[str, Any]] = (200, {}, TEXT_REPLY)
        outer = self

        class Handler(Quiet):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen.append((self.path, dict(self.headers), body))
                status, headers, payload = outer.reply
                send_json(self, status, payload, headers)

        self.httpd = loopback(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture()
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _models(url: str, **spec: Any):
    """The chat model as built for a run, and the same model on the OpenAI client's own ``create``."""
    from dyneval.runtime.models import ChatCompletionsPost, build_chat_model

    ours = build_chat_model(ModelSpec(model="m", base_url=url, **spec))
    assert isinstance(ours.client, ChatCompletionsPost)
    plain = build_chat_model(ModelSpec(model="m", base_url=url, **spec))
    plain.client = plain.root_client.chat.completions
    return ours, plain


def _comparable(headers: dict[str, str]) -> dict[str, str]:
    # the client marks a request made through with_raw_response; LangChain's create marks it too
    return {k.lower(): v for k, v in headers.items() if k.lower() not in {"x-stainless-raw-response"}}


@pytest.mark.parametrize("kind", ["text", "structured", "embedded_extra_body"])
def test_request_bytes_and_reply_equal_the_clients_create(server, kind, monkeypatch):
    from langchain_core.messages import HumanMessage, SystemMessage

    spec: dict[str, Any] = {"max_tokens": 64, "temperature": 0.3}
    if kind == "embedded_extra_body":
        import dyneval.runtime.models as models

        monkeypatch.setattr(models, "embedded_base_url", lambda: server.url)
        spec["provider"] = "embedded"
    ours, plain = _models(server.url, **spec)
    messages = [SystemMessage("You grade answers, ünïcode «kept»."), HumanMessage("What is 6 x 7?")]
    server.reply = (200, {}, TOOL_REPLY if kind == "structured" else TEXT_REPLY)
    replies = []
    for chat in (plain, ours):
        runnable = (
            chat.with_structured_output(Pick, method="function_calling", include_raw=True)
            if kind == "structured"
            else chat
        )
        replies.append(runnable.invoke(messages))
    (path_a, head_a, body_a), (path_b, head_b, body_b) = server.seen
    assert path_a == path_b == "/v1/chat/completions"
    # the same fields with the same values, each serialised to the same bytes (the SDK orders the top-level keys
    # after its own signature, a difference no endpoint sees)
    assert {k: json.dumps(v) for k, v in json.loads(body_b).items()} == {
        k: json.dumps(v) for k, v in json.loads(body_a).items()
    }
    assert _comparable(head_b) == _comparable(head_a)
    if kind == "embedded_extra_body":
        assert json.loads(body_b)["max_tokens"] == 64
    if kind == "structured":
        assert replies[1]["parsed"] == replies[0]["parsed"] == Pick(choice="B", why="ok")
        raw_a, raw_b = replies[0]["raw"], replies[1]["raw"]
    else:
        raw_a, raw_b = replies
        assert raw_b.content == "forty-two"
    assert raw_b.content == raw_a.content and raw_b.tool_calls == raw_a.tool_calls
    assert raw_b.usage_metadata == raw_a.usage_metadata

    # the SDK's model fills fields the reply lacks with None (logprobs, system_fingerprint); the dict leaves them out
    def present(meta: dict[str, Any]) -> dict[str, Any]:
        return {k: present(v) if isinstance(v, dict) else v for k, v in meta.items() if v not in (None, "")}

    assert present(raw_b.response_metadata) == present(raw_a.response_metadata)


def test_status_errors_are_the_clients_classes_with_retry_after(server):
    import openai
    from langchain_core.messages import HumanMessage

    from dyneval.runtime.llm import is_overload, is_transient
    from dyneval.state.errors import retry_after

    ours, _ = _models(server.url)
    server.reply = (429, {"Retry-After": "7"}, {"error": {"message": "slow down", "type": "rate_limit"}})
    with pytest.raises(openai.RateLimitError) as caught:
        ours.invoke([HumanMessage("hi")])
    assert is_transient(caught.value) and is_overload(caught.value) and retry_after(caught.value) == 7.0
    server.reply = (400, {}, {"error": {"message": "bad model", "type": "invalid_request_error"}})
    with pytest.raises(openai.BadRequestError) as bad:
        ours.invoke([HumanMessage("hi")])
    assert not is_transient(bad.value) and "bad model" in str(bad.value)


def test_streaming_keeps_the_clients_own_path(server):
    from langchain_core.messages import HumanMessage

    ours, _ = _models(server.url)
    chunk = {
        "id": "s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hey"}, "finish_reason": "stop"}],
    }

    # a streamed reply: the server answers as an event stream
    data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    handler = server.httpd.RequestHandlerClass

    def do_post(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    handler.do_POST = do_post
    assert "".join(c.content for c in ours.stream([HumanMessage("hi")])) == "hey"
