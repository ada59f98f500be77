"""dyneval: evaluate LLMs with dynamic protocols (JudgeAgent, ATAD, LLM-as-an-Interviewer, LLMEval-3), each a
LangGraph state graph.

Where things are (everything installs under this one name):

* :func:`evaluate` and :class:`RunResult`: a whole batch run from Python, as the ``dyneval`` command runs it.
* :func:`create_graph`: a protocol's graph, new and uncompiled (``dyneval.graphs.<protocol>.build_graph``).
* ``dyneval.nodes.<protocol>.<role>``: node functions ``(state, runtime) -> dict`` to add to your own graph.
* ``dyneval.state.<protocol>``: each graph's state (``InterviewState`` ...) and run context (``InterviewContext`` ...).

Importing ``dyneval`` loads nothing heavy: each name loads its modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph.graph import StateGraph

    from dyneval.api import RunResult, evaluate

__all__ = ["GRAPHS", "RunResult", "create_graph", "evaluate"]

#: Graph name -> its module under ``dyneval.graphs`` (the names ``langgraph.json`` serves them by).
GRAPHS = ("atad", "atad_eval", "interview", "judgeagent", "judgecheck", "llmeval")


def create_graph(name: str) -> StateGraph:
    """A new, uncompiled graph of one protocol (one of :data:`GRAPHS`): compile it with your own checkpointer
    (``create_graph("interview").compile(checkpointer=saver)``) or add nodes to it first."""
    if name not in GRAPHS:
        raise ValueError(f"unknown graph {name!r}; choose one of {', '.join(GRAPHS)}")
    return importlib.import_module(f"dyneval.graphs.{name}").build_graph()


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "RunResult"):
        from dyneval import api

        return getattr(api, name)
    if name == "__version__":  # read on use: importlib.metadata takes 0.1 s, before the command handles signals
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("dyneval")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'dyneval' has no attribute {name!r}")
