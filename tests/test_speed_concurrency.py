"""No silent cap and honest latency: a model without a `concurrency` ceiling takes every request the run sends,
a ceiling below the run's concurrency is told on the console, and the event log keeps the wait for the endpoint
(``queue_s``) apart from the endpoint's own time (``latency_s``)."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from pathlib import Path

from langchain_core.messages import HumanMessage

from dyneval import cli
from dyneval.runtime.concurrency import InFlight
from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.models import open_endpoint
from dyneval.state.config import ModelSpec
from tests.conftest import make_services
from tests.fakes import ScriptedChat


def _gated_chat(n: int) -> tuple[ScriptedChat, threading.Event, list[int]]:
    """A chat model whose calls block until the gate opens; ``peak[0]`` = most calls in flight at once."""
    gate, lock, in_flight, peak = threading.Event(), threading.Lock(), [0], [0]

    def answer(messages, tool):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            if in_flight[0] == n:
                gate.set()
        gate.wait(10)
        with lock:
            in_flight[0] -= 1
        return "ok"

    return ScriptedChat(answer), gate, peak


def test_a_model_without_a_ceiling_takes_every_request_the_run_sends(tmp_path):
    """The old default (4 in flight per model, shared by all roles) silently held --concurrency 16 at 4."""
    chat, gate, peak = _gated_chat(16)
    svc = make_services(tmp_path, chats={"target": chat, "evaluator": chat})
    svc.config.roles.update(target="m@http://127.0.0.1:9/v1", evaluator="m@http://127.0.0.1:9/v1")
    llms = [svc.llm("target"), svc.llm("evaluator")]
    threads = [
        threading.Thread(target=llms[i % 2].text, args=([HumanMessage(f"q{i}")],), kwargs={"step": "s"})
        for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert gate.is_set() and peak[0] == 16


def test_an_explicit_ceiling_still_bounds_the_endpoint_and_is_told(tmp_path):
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", concurrency=3)
    assert open_endpoint(spec, chat=ScriptedChat(lambda m, t: "ok")).slots.limit == 3
    config = tmp_path / "eval.toml"
    config.write_text(
        '[models.slow]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\nconcurrency = 3\n'
        '[roles]\ntarget = "slow"\nevaluator = "slow"\n'
    )
    out = tmp_path / "runs"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(
            ["--protocol", "atad", "--config", str(config), "--concurrency", "8", "--dry-run", "--out", str(out)]
        )
    assert code == 0
    text = " ".join(printed.getvalue().split())
    assert "m@http://127.0.0.1:9/v1: at most 3 request(s) in flight" in text and "below --concurrency 8" in text


def test_no_note_when_the_ceiling_covers_the_run(tmp_path):
    svc = make_services(tmp_path)
    svc.config.models["big"] = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", concurrency=8)
    svc.config.roles.update(target="big", evaluator="big")
    assert svc.ceiling_notes(["target", "evaluator"]) == []
    svc.config.concurrency = 9
    assert len(svc.ceiling_notes(["target", "evaluator", "student"])) == 1  # one line per model, not per role


def test_queue_wait_is_logged_apart_from_endpoint_latency():
    """Two calls, one slot: the second waits for the first; its wait is queue_s, not latency_s (the logged mean
    latency was 0.885 s against a real 0.2 s when the two were summed)."""
    release, first_in = threading.Event(), threading.Event()

    def answer(messages, tool):
        if messages[0].content == "first":
            first_in.set()
            release.wait(30)
        return "ok"

    events = EventLog()
    llm = RoleLLM(role="target", model_label="m", chat=ScriptedChat(answer), events=events, slots=InFlight(1))
    first = threading.Thread(target=llm.text, args=([HumanMessage("first")],), kwargs={"step": "a"})
    first.start()
    first_in.wait(30)
    second = threading.Thread(target=llm.text, args=([HumanMessage("second")],), kwargs={"step": "b"})
    second.start()
    time.sleep(0.3)
    release.set()
    first.join(30)
    second.join(30)
    by_step = {e["step"]: e for e in events.records}
    assert by_step["a"]["latency_s"] >= 0.3 and by_step["a"]["queue_s"] < by_step["a"]["latency_s"]
    assert by_step["b"]["queue_s"] >= 0.3 and by_step["b"]["latency_s"] < by_step["b"]["queue_s"]


def test_rate_limit_wait_is_queue_time(tmp_path):
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", requests_per_second=5)
    endpoint = open_endpoint(spec, chat=ScriptedChat(lambda m, t: "ok"))
    events = EventLog()
    llm = RoleLLM(role="target", model_label="m", chat=endpoint.chat, events=events, limiter=endpoint.limiter)
    for i in range(3):
        llm.text([HumanMessage(f"q{i}")], step="s")
    waits = [e["queue_s"] for e in events.records]
    assert sum(waits) >= 0.3  # 3 requests at 5/s: at least 0.4 s of waiting in all, none of it "latency"
    assert all(e["latency_s"] < e["queue_s"] for e in events.records)


def test_event_log_rows_carry_both_fields(tmp_path: Path):
    log = EventLog(tmp_path / "events.jsonl")
    log.record(
        unit="u",
        role="r",
        model="m",
        step="s",
        messages=[],
        output="x",
        prompt_tokens=1,
        completion_tokens=1,
        latency_s=0.2,
        queue_s=0.5,
    )
    assert (log.usage("u").seconds, (tmp_path / "events.jsonl").read_text().count('"queue_s": 0.5')) == (0.2, 1)
