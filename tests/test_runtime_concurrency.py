"""parallel_map: concurrent calls inside a unit stay attributed to that unit."""

from __future__ import annotations

import threading
import time
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.llm import current_unit


class _S(TypedDict, total=False):
    seen: list[str]
    threads: int


def _node(state: _S) -> _S:
    def one(_: int) -> tuple[str, int]:
        time.sleep(0.05)
        return current_unit(), threading.get_ident()

    rows = parallel_map(one, range(4), workers=4)
    return {"seen": [u for u, _ in rows], "threads": len({t for _, t in rows})}


def test_worker_threads_see_the_units_thread_id_and_run_in_parallel():
    builder = StateGraph(_S)
    builder.add_node("n", _node)
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    out = builder.compile().invoke({}, {"configurable": {"thread_id": "unit-7"}})
    assert out["seen"] == ["unit-7"] * 4
    assert out["threads"] > 1


def test_results_keep_input_order_and_errors_propagate():
    assert parallel_map(lambda x: x * x, [3, 1, 2], workers=3) == [9, 1, 4]

    def boom(x: int) -> int:
        if x == 2:
            raise ValueError("two")
        return x

    with pytest.raises(ValueError, match="two"):
        parallel_map(boom, [1, 2, 3], workers=3)
