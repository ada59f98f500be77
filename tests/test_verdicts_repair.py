"""The repair request quotes what the model actually sent (issue 11, item 6): a malformed tool call's name and
raw arguments, or its plain text, never "(empty reply)"."""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.models import build_chat_model
from dyneval.state.config import ModelSpec
from dyneval.state.errors import RetryPolicy
from tests.standin_endpoint import REPAIR_PREFIX, StandIn


class Score(BaseModel):
    correct: bool
    reason: str


def _bad_then_standin(first: dict):
    """A ``respond`` hook: ``first`` for the original request, the stand-in's valid answer for the repair."""
    bodies: list[dict] = []

    def respond(body: dict):
        bodies.append(body)
        last = body["messages"][-1]["content"]
        return None if str(last).startswith(REPAIR_PREFIX) else first

    return respond, bodies


def _ask(standin: StandIn) -> tuple[Score, EventLog]:
    events = EventLog()
    chat = build_chat_model(ModelSpec(model="judge", base_url=standin.url, timeout_s=5))
    llm = RoleLLM(
        role="evaluator",
        model_label="judge",
        chat=chat,
        events=events,
        policy=RetryPolicy(max_retries=0, sleep=lambda s: None),
    )
    return llm.structured(Score, [HumanMessage("Is 2 + 2 = 4?")], step="judge"), events


def _tool_call(arguments: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Score", "arguments": arguments}}],
    }


def test_repair_quotes_the_raw_arguments_of_a_tool_call_that_is_not_json():
    respond, bodies = _bad_then_standin(_tool_call('{"correct": tru, "reason": "fine'))
    with StandIn(respond=respond) as standin:
        result, events = _ask(standin)
    assert isinstance(result, Score)
    repair = bodies[1]["messages"][-1]["content"]
    assert '{"correct": tru, "reason": "fine' in repair and "tool call Score" in repair
    assert "not valid JSON" in repair
    assert "(empty reply)" not in repair and "no Score object was returned" not in repair
    assert '{"correct": tru' in events.records[0]["output"]["unparsed"]  # the event log keeps it too


def test_repair_quotes_the_arguments_of_a_tool_call_with_wrong_fields_and_the_validation_error():
    respond, bodies = _bad_then_standin(_tool_call('{"unexpected": 1}'))
    with StandIn(respond=respond) as standin:
        _ask(standin)
    repair = bodies[1]["messages"][-1]["content"]
    assert 'tool call Score with arguments {"unexpected": 1}' in repair
    assert "correct: Field required" in repair


def test_repair_quotes_plain_text_sent_instead_of_a_tool_call():
    respond, bodies = _bad_then_standin({"role": "assistant", "content": "Sure, it is correct."})
    with StandIn(respond=respond) as standin:
        _ask(standin)
    repair = bodies[1]["messages"][-1]["content"]
    assert "text: Sure, it is correct." in repair and "without calling the Score tool" in repair
