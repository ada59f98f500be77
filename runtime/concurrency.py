"""Concurrency: calls inside one unit that keep the unit's context, and the adaptive in-flight limit of an
endpoint."""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def parallel_map(fn: Callable[[T], R], items: Iterable[T], workers: int = 4) -> list[R]:
    """``[fn(x) for x in items]`` run on up to ``workers`` threads, results in input order.

    Each call runs in a copy of the caller's context, so the event log still
    attributes its LLM calls to the current unit and graph config is visible.
    The first exception propagates (e.g. ``InfraError``).
    """
    items = list(items)
    if len(items) <= 1 or workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="call") as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]


class Slots(Protocol):
    """An endpoint's slots as the call layer takes them: :class:`InFlight` in one process, a Ray cluster's
    (:class:`runtime.cluster.ClusterSlots`) across processes."""

    #: This process's requests in flight.
    in_flight: int

    def acquire(self, blocking: bool = True) -> int: ...

    def release(self, window: int = 0, *, overloaded: bool = False) -> None: ...


class InFlight:
    """Requests in flight to one endpoint, under an adaptive limit (additive increase, multiplicative decrease,
    as inspect_ai adapts its connections to a provider).

    The limit starts at ``ceiling`` (the model spec's ``concurrency``; ``None`` = no limit, the run's own
    concurrency bounds the requests). A request the endpoint refuses as overloaded (429, timeout) halves it, at
    most once per window: only requests that started under the current limit count, so a burst of 429s from one
    window halves it once. Each request that succeeds adds ``1 / limit``, one more slot per window of successes,
    up to the ceiling.
    """

    def __init__(self, ceiling: int | None = None) -> None:
        self.ceiling = ceiling
        self.limit: float = float(ceiling) if ceiling else math.inf
        self.in_flight = 0
        self.overloads = 0
        self._window = 1  # bumped at every decrease
        self._cond = threading.Condition()

    def acquire(self, blocking: bool = True) -> int:
        """Wait for a slot; the window it was granted in (``0``: none free and ``blocking`` is false)."""
        with self._cond:
            while self.in_flight + 1 > max(1.0, self.limit):
                if not blocking:
                    return 0
                self._cond.wait()
            self.in_flight += 1
            return self._window

    def release(self, window: int = 0, *, overloaded: bool = False, served: int = 1) -> None:
        """Free a slot granted in ``window``; ``overloaded`` = the endpoint refused its last request as overloaded.
        ``served``: the requests the slot served (more than one where a Ray runner handed it on,
        :class:`runtime.cluster.ClusterSlots`); each but an overloaded last one grows the limit as a success does."""
        with self._cond:
            self.in_flight -= 1
            if overloaded:
                self.overloads += 1
                if window == self._window:
                    base = self.limit if self.limit < math.inf else self.in_flight + 1  # unlimited: what was in
                    self.limit = max(1.0, base / 2)
                    self._window += 1
            for _ in range(served - overloaded if self.limit < (self.ceiling or math.inf) else 0):
                self.limit = min(self.ceiling or math.inf, self.limit + 1 / self.limit)
            self._cond.notify_all()
