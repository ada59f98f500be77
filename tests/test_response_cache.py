"""The response cache's key and storage (runtime/cache.py): everything that changes an answer is in the key."""

from __future__ import annotations

import time

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from dyneval.runtime.cache import ResponseCache

ENDPOINT = {
    "provider": "openai",
    "base_url": "http://127.0.0.1:1/v1",
    "model": "m",
    "temperature": 0.0,
    "max_tokens": 512,
    "structured_method": "function_calling",
}
TEXT = {"kind": "text"}
MESSAGES = [SystemMessage("be brief"), HumanMessage("What is 2+2?")]


def _key(cache, endpoint=ENDPOINT, request=TEXT, messages=MESSAGES, unit="u1", step="answer"):
    return cache.key(endpoint=endpoint, request=request, messages=messages, unit=unit, step=step)


def test_a_stored_reply_is_found_by_a_later_run_of_the_same_unit(tmp_path):
    first = ResponseCache(tmp_path)
    first.put(
        _key(first),
        AIMessage("4", usage_metadata={"input_tokens": 9, "output_tokens": 1, "total_tokens": 10}),
        parsed={"x": 1},
    )
    later = ResponseCache(tmp_path)  # a new run: its own repeat counters, the same file
    message, info = later.get(_key(later))
    assert message.content == "4" and message.usage_metadata["input_tokens"] == 9 and info["parsed"] == {"x": 1}


@pytest.mark.parametrize(
    "change",
    [
        {"endpoint": {**ENDPOINT, "model": "other"}},
        {"endpoint": {**ENDPOINT, "base_url": "http://127.0.0.1:2/v1"}},
        {"endpoint": {**ENDPOINT, "max_tokens": 64}},
        {"endpoint": {**ENDPOINT, "structured_method": "json_schema"}},
        {"request": {"kind": "structured", "schema": {"title": "Verdict"}}},
        {"messages": [SystemMessage("be brief"), HumanMessage("What is 2+3?")]},
        {"messages": [HumanMessage("What is 2+2?")]},
        {"messages": [*MESSAGES, AIMessage("", tool_calls=[{"name": "V", "args": {"a": 1}, "id": "c1"}])]},
        {"unit": "q1~r1"},  # another repeat unit of the same question samples anew, at any temperature
        {"step": "answer:retry"},
    ],
)
def test_anything_that_changes_the_answer_misses(tmp_path, change):
    cache = ResponseCache(tmp_path)
    cache.put(_key(cache), AIMessage("4"))
    other = ResponseCache(tmp_path)
    assert other.get(_key(other, **change)) is None


def test_repeats_of_one_request_in_a_unit_get_distinct_entries_and_replay_in_order(tmp_path):
    cache = ResponseCache(tmp_path)
    for answer in ("first", "second"):
        cache.put(_key(cache), AIMessage(answer))
    replay = ResponseCache(tmp_path)
    assert [replay.get(_key(replay))[0].content for _ in range(2)] == ["first", "second"]
    assert replay.get(_key(replay)) is None  # a third repeat was never answered


def test_an_expired_entry_is_not_used(tmp_path, monkeypatch):
    cache = ResponseCache(tmp_path, expiry_s=60)
    cache.put(_key(cache), AIMessage("old"))
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 61)
    later = ResponseCache(tmp_path, expiry_s=60)
    assert later.get(_key(later)) is None


def test_an_entry_langchain_cannot_load_back_as_a_reply_is_a_miss_not_a_crash(tmp_path):
    """LangChain's SQLite cache gives a stored reply it cannot deserialize (a LangChain upgrade, another writer)
    back as a plain text ``Generation``, which has no message: the request is asked again."""
    import sqlite3

    cache = ResponseCache(tmp_path)
    cache.put(_key(cache), AIMessage("4"))
    with sqlite3.connect(tmp_path / "responses.sqlite") as db:
        db.execute("UPDATE full_llm_cache SET response = 'not a serialized reply'")
    later = ResponseCache(tmp_path)
    key = _key(later)
    assert later.get(key) is None
    later.put(key, AIMessage("5"))  # the answer asked again replaces the entry
    again = ResponseCache(tmp_path)
    assert again.get(_key(again))[0].content == "5"
