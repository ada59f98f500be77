"""One turn of an agent on a thread: a LangGraph graph run in-process or a ``(message, *, thread_id)`` app.

A turn runs on a thread of its own, started with an empty context (so that a graph run inside a protocol's node is
not taken for the node's subgraph), and is waited for up to the reference's ``timeout_s`` (the run's stop flag is
seen within 0.2 s). A turn that outlasts it is left running (Python cannot stop a thread) and the unit fails.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from dyneval.runtime import stop
from dyneval.runtime.agents.errors import AgentModelError, AgentTimeout
from dyneval.state.agent import AgentRef


@dataclass
class Turn:
    """What the agent emitted after our message (in order), its state after the turn (``None`` for an app), and
    the server's id of the thread (a deployed graph's, :mod:`runtime.agents.remote`)."""

    emitted: list[Any]
    state: dict[str, Any] | None
    server_thread: str | None = None


class AgentApp(Protocol):
    ref: AgentRef
    #: Whether a turn's state (:attr:`Turn.state`) can be read: a graph's, in-process or served; not an app's.
    keeps_state: bool

    def has_thread(self, thread_id: str) -> bool:
        """The agent holds state for ``thread_id`` already (a resumed unit continues on it)."""
        ...

    def state(self, thread_id: str) -> dict[str, Any] | None:
        """The agent's state on ``thread_id`` now (``None``: it holds none there, or none we can read)."""
        ...

    def turn(self, message: dict[str, Any], thread_id: str) -> Turn:
        """Send ``message`` (``{"role": "user", "content": ...}``) on ``thread_id``."""
        ...


def bounded(ref: AgentRef, work: Any) -> Any:
    """``work()`` on its own thread, waited for up to ``ref.timeout_s``; its exception re-raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"agent-turn {ref.ref}", daemon=True)
    worker.start()
    waited = 0.0
    while worker.is_alive() and waited < ref.timeout_s:
        worker.join(min(0.2, ref.timeout_s - waited))
        waited += 0.2
        stop.raise_if_stopped()
    if worker.is_alive():
        raise AgentTimeout(f"agent {ref.ref} did not end its turn within {ref.timeout_s:g} s (timeout_s)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def after_ours(new: list[Any]) -> list[Any]:
    """What the agent emitted after our message, of the messages a turn added to its thread."""
    ours = next((i for i, m in enumerate(new) if m.type == "human"), -1)
    return new[ours + 1 :]


def failed(ref: AgentRef, error: str, message: str) -> AgentModelError:
    """The agent's own failure, the exception's type name ``error`` and its ``message``: never a wrong answer."""
    if error == "GraphRecursionError":
        return AgentModelError(f"agent {ref.ref} exceeded its recursion limit ({ref.recursion_limit} steps)")
    return AgentModelError(f"agent {ref.ref} raised {error}: {' '.join(message.split())[:300]}")


@dataclass
class GraphApp:
    """A compiled graph with a ``messages`` channel; the run provides an in-memory checkpointer if it has none."""

    ref: AgentRef
    graph: Any
    keeps_state = True

    def __post_init__(self) -> None:
        from langgraph.checkpoint.base import BaseCheckpointSaver

        if not isinstance(self.graph.checkpointer, BaseCheckpointSaver):
            from langgraph.checkpoint.memory import InMemorySaver

            self.graph = self.graph.copy(update={"checkpointer": InMemorySaver()})

    def _config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": self.ref.recursion_limit}

    def has_thread(self, thread_id: str) -> bool:
        return self.state(thread_id) is not None

    def state(self, thread_id: str) -> dict[str, Any] | None:
        return dict(self.graph.get_state(self._config(thread_id)).values) or None

    def turn(self, message: dict[str, Any], thread_id: str) -> Turn:
        config = self._config(thread_id)

        def run() -> dict[str, Any]:
            before = len(self.graph.get_state(config).values.get("messages", []))
            self.graph.invoke({"messages": [message]}, config)
            values = dict(self.graph.get_state(config).values)
            values["__new__"] = values.get("messages", [])[before:]
            return values

        try:
            values = bounded(self.ref, run)
        except (AgentTimeout, stop.StopRequested):
            raise
        except Exception as exc:  # noqa: BLE001 - the agent's own failure: the unit's, never a wrong answer
            raise failed(self.ref, type(exc).__name__, str(exc)) from exc
        return Turn(emitted=after_ours(values.pop("__new__")), state=values)


@dataclass
class CallableApp:
    """``app(message, *, thread_id) -> dict | list[dict]`` (sync or async), keeping its own history per thread."""

    ref: AgentRef
    app: Any
    _threads: set[str] = field(default_factory=set)
    keeps_state = False

    def has_thread(self, thread_id: str) -> bool:
        return thread_id in self._threads

    def state(self, thread_id: str) -> dict[str, Any] | None:
        return None  # the app keeps its history out of our reach

    def turn(self, message: dict[str, Any], thread_id: str) -> Turn:
        from langchain_core.messages import convert_to_messages

        def run() -> Any:
            reply = self.app(message, thread_id=thread_id)
            return asyncio.run(_awaited(reply)) if inspect.isawaitable(reply) else reply

        self._threads.add(thread_id)
        try:
            reply = bounded(self.ref, run)
            emitted = convert_to_messages(reply if isinstance(reply, list) else [reply])
        except (AgentTimeout, stop.StopRequested):
            raise
        except Exception as exc:  # noqa: BLE001 - as for a graph
            raise failed(self.ref, type(exc).__name__, str(exc)) from exc
        return Turn(emitted=list(emitted), state=None)


async def _awaited(reply: Any) -> Any:
    return await reply
