"""The call layer's own cost: the structured-output chain is built once per schema, and a reply that does not
parse still comes back as LangChain's ``include_raw`` result (raw message, no parsed value, the parsing error),
so the repair path is unchanged."""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.state.errors import RetryPolicy
from tests.fakes import ScriptedChat


class Verdict(BaseModel):
    correct: bool


def test_the_structured_chain_is_built_once_per_schema(monkeypatch):
    built = []
    real = ScriptedChat.with_structured_output

    def counting(self, schema, **kwargs):
        built.append(schema)
        return real(self, schema, **kwargs)

    monkeypatch.setattr(ScriptedChat, "with_structured_output", counting)
    llm = RoleLLM(role="grader", model_label="m", chat=ScriptedChat(lambda m, t: {"correct": True}), events=EventLog())
    for i in range(5):
        assert llm.structured(Verdict, [HumanMessage(f"q{i}")], step="grade").correct
    assert built == [Verdict]


def test_an_unparsable_reply_is_repaired_with_its_parsing_error():
    replies = iter([{"correct": "not a boolean at all"}, {"correct": False}])
    chat = ScriptedChat(lambda m, t: next(replies))
    events = EventLog()
    llm = RoleLLM(role="grader", model_label="m", chat=chat, events=events, policy=RetryPolicy(sleep=lambda s: None))
    assert llm.structured(Verdict, [HumanMessage("q")], step="grade").correct is False
    first, repair = events.records
    assert first["output"]["error"] and "correct" in first["output"]["error"]
    assert repair["step"] == "grade:repair" and "correct" in str(repair["messages"][-1]["content"])
