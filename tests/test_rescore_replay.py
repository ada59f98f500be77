"""The replay chat model of ``--rescore`` (runtime/replay.py) through the call layer, on a logged source run."""

from __future__ import annotations

import itertools

import pytest
from pydantic import BaseModel

from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.replay import ReplayChat, ReplayLog, replay_models
from dyneval.state.errors import ReplayMissing
from dyneval.stores.rundir import RunDir
from tests.fakes import ScriptedChat


class Answer(BaseModel):
    letter: str
    why: str


ASK = [("system", "Answer."), ("human", "Which letter?")]


def _source(tmp_path):
    """A source run's log: the same text request twice (two different replies), a structured one, a judge call."""
    replies = itertools.count()

    def respond(messages, tool):
        n = next(replies)
        return {"letter": "B", "why": f"reason {n}"} if tool else f"reply {n}"

    events = EventLog(tmp_path / "events.jsonl")
    target = RoleLLM(role="target", model_label="target-model", chat=ScriptedChat(respond), events=events)
    judge = RoleLLM(role="evaluator", model_label="judge-model", chat=ScriptedChat(respond), events=events)
    sent = [
        target.text(ASK, step="answer"),
        target.text(ASK, step="answer"),
        target.structured(Answer, ASK, step="pick"),
        judge.text(ASK, step="judge"),
    ]
    return sent


def test_replayed_replies_come_back_in_logged_order_with_their_structure_and_cost_nothing(tmp_path):
    first, second, picked, _ = _source(tmp_path)
    events = EventLog()
    chat = replay_models(tmp_path, ("evaluator",))["target"]
    target = RoleLLM(role="target", model_label=chat.replay_of, chat=chat, events=events)
    assert [target.text(ASK, step="answer"), target.text(ASK, step="answer")] == [first, second]
    assert target.structured(Answer, ASK, step="pick") == picked
    assert chat.replay_of == f"replay of {tmp_path.name} (target-model)"
    usage = events.total()
    assert usage.calls == 0 and usage.cache_hits == 3 and usage.tokens_saved == 3 * 15


def test_a_request_the_source_never_made_raises_replay_missing_past_a_nodes_except_exception(tmp_path):
    _source(tmp_path)
    target = RoleLLM(
        role="target",
        model_label="t",
        events=EventLog(),
        chat=ReplayChat(log=ReplayLog(RunDir(tmp_path).events(), ("evaluator",), "src"), role="target"),
    )
    target.text(ASK, step="answer")
    target.text(ASK, step="answer")
    with pytest.raises(ReplayMissing, match="never asked it"):
        try:
            target.text(ASK, step="answer")  # a third identical request: the source asked only twice
        except Exception:  # noqa: BLE001 - what a node does with a failed call; a divergence must pass through
            pytest.fail("ReplayMissing was caught as an ordinary error")
    with pytest.raises(ReplayMissing):
        target.text([("human", "Something else?")], step="answer")


def test_judging_roles_are_never_replayed(tmp_path):
    _source(tmp_path)
    models = replay_models(tmp_path, ("evaluator", "grader"))
    assert "evaluator" not in models and "grader" not in models
    assert {"target", "student", "teacher", "orchestrator"} <= set(models)
