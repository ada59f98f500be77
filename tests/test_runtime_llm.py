"""The LLM call layer against a real loopback HTTP endpoint and fake chat models:
retries with backoff, fault classification, structured-output repair, event logging, model factory."""

from __future__ import annotations

import threading

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from dyneval.runtime.concurrency import InFlight
from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.models import build_chat_model, open_endpoint
from dyneval.state.config import ModelSpec
from dyneval.state.errors import InfraError, InputError, ModelError, RetryPolicy
from tests.fake_endpoint import completion, serve, url_of
from tests.fakes import ScriptedChat


class Answer(BaseModel):
    answer: str
    score: int


@pytest.fixture
def flaky_endpoint():
    """An OpenAI-compatible endpoint on 127.0.0.1 answering with a scripted list of status codes."""
    script: list[int] = []
    seen: list[dict] = []

    def respond(body: dict) -> tuple[int, dict]:
        seen.append(body)
        status = script.pop(0) if script else 200
        return status, completion("pong") if status == 200 else {"error": {"message": f"status {status}"}}

    server = serve(respond)
    yield url_of(server), script, seen
    server.shutdown()


def _role(chat, events, retries=3, sleeps=None):
    policy = RetryPolicy(max_retries=retries, sleep=(sleeps.append if sleeps is not None else lambda s: None))
    return RoleLLM(role="target", model_label="m", chat=chat, events=events, policy=policy)


def test_500_then_429_then_success_is_retried_with_growing_backoff_and_logged(flaky_endpoint):
    url, script, seen = flaky_endpoint
    script.extend([500, 429])
    events, sleeps = EventLog(), []
    chat = build_chat_model(ModelSpec(model="m", base_url=url, timeout_s=5))
    out = _role(chat, events, sleeps=sleeps).text([HumanMessage("ping")], step="ask")
    assert out == "pong"
    assert len(seen) == 3
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.49  # second wait drawn from a doubled window
    errors = [e["error"] for e in events.records]
    assert "500" in errors[0] and "429" in errors[1]
    assert errors[2] is None and events.records[2]["prompt_tokens"] == 12
    assert [e["attempt"] for e in events.records] == [1, 2, 3]


def test_retries_exhausted_raise_infra_error(flaky_endpoint):
    url, script, seen = flaky_endpoint
    script.extend([503] * 10)
    chat = build_chat_model(ModelSpec(model="m", base_url=url, timeout_s=5))
    with pytest.raises(InfraError, match="after 3 attempt"):
        _role(chat, EventLog(), retries=2).text([HumanMessage("ping")], step="ask")
    assert len(seen) == 3


def test_client_error_is_not_retried(flaky_endpoint):
    url, script, seen = flaky_endpoint
    script.append(400)
    chat = build_chat_model(ModelSpec(model="m", base_url=url, timeout_s=5))
    with pytest.raises(InfraError):
        _role(chat, EventLog()).text([HumanMessage("ping")], step="ask")
    assert len(seen) == 1


def test_unreachable_endpoint_is_infra_error_not_model_error():
    chat = build_chat_model(ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", timeout_s=2))
    with pytest.raises(InfraError):
        _role(chat, EventLog(), retries=1).text([HumanMessage("ping")], step="ask")


def test_structured_output_gets_one_repair_with_the_validation_error_fed_back():
    replies = iter([{"answer": "x"}, {"answer": "x", "score": 2}])
    chat = ScriptedChat(lambda m, t: next(replies))
    events = EventLog()
    result = _role(chat, events).structured(Answer, [HumanMessage("q")], step="grade")
    assert result == Answer(answer="x", score=2)
    assert [e["step"] for e in events.records] == ["grade", "grade:repair"]
    repair_prompt = chat.calls[1][0][-1].content
    assert "score" in repair_prompt and "Field required" in repair_prompt


def test_structured_output_failing_twice_is_model_error():
    chat = ScriptedChat(lambda m, t: "I refuse to use tools")
    with pytest.raises(ModelError, match="no valid Answer"):
        _role(chat, EventLog()).structured(Answer, [HumanMessage("q")], step="grade")
    assert len(chat.calls) == 2


def test_structured_output_through_openai_tool_calls(flaky_endpoint):
    url, _, seen = flaky_endpoint
    chat = build_chat_model(ModelSpec(model="m", base_url=url, timeout_s=5))
    with pytest.raises(ModelError):  # the endpoint answers plain text, never a tool call
        _role(chat, EventLog()).structured(Answer, [HumanMessage("q")], step="grade")
    assert seen[0]["tools"][0]["function"]["name"] == "Answer"
    assert seen[0]["tool_choice"]["function"]["name"] == "Answer"


def test_factory_passes_spec_settings_to_the_openai_client(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    spec = ModelSpec(
        model="gpt-x",
        base_url="https://api.example/v1",
        api_key_env="MY_KEY",
        temperature=0.3,
        max_tokens=77,
        timeout_s=9,
        requests_per_second=2,
    )
    chat = build_chat_model(spec)
    assert (chat.model_name, chat.openai_api_base, chat.temperature, chat.max_tokens) == (
        "gpt-x",
        "https://api.example/v1",
        0.3,
        77,
    )
    assert chat.request_timeout == 9 and chat.max_retries == 0
    assert chat.openai_api_key.get_secret_value() == "sk-test"
    assert chat.rate_limiter is None  # the endpoint holds it: the call layer times the wait as queue_s
    assert open_endpoint(spec).limiter is not None


def test_factory_refuses_a_named_key_variable_that_is_unset(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(InputError, match="NOPE_KEY"):
        build_chat_model(ModelSpec(model="m", base_url="https://api.example/v1", api_key_env="NOPE_KEY"))


def test_concurrency_slots_bound_requests_in_flight():
    in_flight, peak, lock = [0], [0], threading.Lock()
    gate = threading.Event()

    def slow(m, t):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        gate.wait(0.05)
        with lock:
            in_flight[0] -= 1
        return "ok"

    role = RoleLLM(role="target", model_label="m", chat=ScriptedChat(slow), events=EventLog(), slots=InFlight(2))
    threads = [threading.Thread(target=role.text, args=([HumanMessage("x")],), kwargs={"step": "s"}) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2
