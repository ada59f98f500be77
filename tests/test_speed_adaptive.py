"""Adaptive concurrency per endpoint: the in-flight limit halves when the endpoint refuses as overloaded (once per
window, however many requests of that window were refused), grows back by one slot per window of successes up
to the spec's ceiling, and a retry waits at least what ``Retry-After`` asked for. Checked on a loopback endpoint
that refuses with 429 whenever more than its capacity is in flight."""

from __future__ import annotations

import threading
import time

import pytest
from langchain_core.messages import HumanMessage

from dyneval.runtime.concurrency import InFlight
from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.models import open_endpoint
from dyneval.state.config import ModelSpec
from dyneval.state.errors import RetryPolicy, retry_after
from tests.fake_endpoint import completion, serve, stop, url_of

CAPACITY = 3
RETRY_AFTER_S = 0.2


def test_a_burst_of_overloads_in_one_window_halves_the_limit_once():
    slots = InFlight(8)
    windows = [slots.acquire() for _ in range(8)]
    for w in windows:
        slots.release(w, overloaded=True)
    assert slots.limit == 4 and slots.overloads == 8
    slots.release(slots.acquire(), overloaded=True)  # a request of the new window halves it again
    assert slots.limit == 2


def test_successes_add_one_slot_per_window_up_to_the_ceiling():
    slots = InFlight(4)
    slots.release(slots.acquire(), overloaded=True)
    assert slots.limit == 2
    for _ in range(2):
        slots.release(slots.acquire())
    assert 2.8 < slots.limit < 3.0  # 2 + 1/2 + 1/2.5
    for _ in range(50):
        slots.release(slots.acquire())
    assert slots.limit == 4


def test_without_a_ceiling_nothing_waits_until_the_endpoint_pushes_back():
    slots = InFlight(None)
    windows = [slots.acquire(blocking=False) for _ in range(100)]
    assert all(windows)
    slots.release(windows[0], overloaded=True)
    assert slots.limit == 50  # half of what was in flight (99 + the refused one)


@pytest.fixture
def crowded_endpoint():
    """Answers after 50 ms; refuses with 429 and ``Retry-After`` when more than CAPACITY requests are in."""
    lock, state = threading.Lock(), {"in": 0, "peak_served": 0, "refused": 0}

    def respond(body: dict) -> tuple:
        with lock:
            state["in"] += 1
            crowded = state["in"] > CAPACITY
            state["refused"] += crowded
            if not crowded:
                state["peak_served"] = max(state["peak_served"], state["in"])
        try:
            if crowded:
                return (
                    429,
                    {"error": {"message": "slow down", "type": "rate_limit"}},
                    {"Retry-After": str(RETRY_AFTER_S)},
                )
            time.sleep(0.05)
            return 200, completion("ok")
        finally:
            with lock:
                state["in"] -= 1

    server = serve(respond)
    yield url_of(server), state
    stop(server)


def test_the_limit_adapts_to_a_crowded_endpoint_and_honours_retry_after(crowded_endpoint):
    url, state = crowded_endpoint
    endpoint = open_endpoint(ModelSpec(model="m", base_url=url, timeout_s=10, max_retries=8))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    events = EventLog()
    llm = RoleLLM(
        role="target",
        model_label="m",
        chat=endpoint.chat,
        events=events,
        slots=endpoint.slots,
        policy=RetryPolicy(max_retries=8, base_delay_s=0.01, sleep=sleep),
    )
    threads = [
        threading.Thread(target=lambda i=i: [llm.text([HumanMessage(f"q{i}-{j}")], step="s") for j in range(3)])
        for i in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    answered = [e for e in events.records if e["error"] is None]
    assert len(answered) == 36  # every call got through
    assert state["refused"] > 0 and endpoint.slots.overloads == state["refused"]
    assert endpoint.slots.limit < 12  # the limit came down from "as many as the run sends"
    assert sleeps and min(sleeps) >= RETRY_AFTER_S  # every retry here followed a 429 asking for 0.2 s


def test_retry_after_reads_seconds_and_http_dates():
    class Response:
        def __init__(self, value):
            self.headers = {"retry-after": value}

    class Refused(Exception):
        def __init__(self, value):
            self.response = Response(value)

    assert retry_after(Refused("1.5")) == 1.5
    assert retry_after(Refused("Wed, 21 Oct 2015 07:28:00 GMT")) == 0.0  # a date in the past: no wait
    assert retry_after(Refused("soon")) == 0.0 and retry_after(ValueError()) == 0.0
