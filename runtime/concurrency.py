"""Concurrent calls inside one unit that keep the unit's context."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

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
