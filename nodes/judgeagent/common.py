"""Shared helpers of the JudgeAgent nodes: seeded randomness, concurrent calls, question rendering."""

from __future__ import annotations

import contextvars
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, TypeVar

from langgraph.config import get_config

from state.judgeagent import BaseQuestion

T = TypeVar("T")
R = TypeVar("R")

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def unit_id() -> str:
    try:
        return str(get_config().get("configurable", {}).get("thread_id", "-"))
    except RuntimeError:
        return "-"


def rng_for(seed: int, *parts: Any) -> random.Random:
    """``random.Random(f"{seed}:{unit_id}:...")``: reproducible per unit and step."""
    return random.Random(":".join(str(p) for p in (seed, unit_id(), *parts)))


def parallel_map(fn: Callable[[T], R], items: Iterable[T], workers: int = 4) -> list[R]:
    """``[fn(x) for x in items]`` run concurrently; each call keeps the graph's context (so the event log
    still attributes it to this unit). Exceptions propagate (e.g. ``InfraError``)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items))), thread_name_prefix="ja") as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]


def options_block(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {opt}" for i, opt in enumerate(options))


def question_text(q: BaseQuestion) -> str:
    """The question as the target sees it (options lettered)."""
    return f"{q.question}\n{options_block(q.options)}" if q.options else q.question


def clip(text: str, limit: int) -> str:
    text = str(text or "").strip()
    return text if len(text) <= limit else text[: limit - 7] + " (...)"
