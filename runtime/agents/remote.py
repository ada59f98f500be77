"""A deployed LangGraph graph as an agent: ``langgraph:URL[#ASSISTANT]`` (LangGraph Server, ``langgraph dev``, or a
compatible server) through ``langgraph_sdk``'s sync client.

* **Threads.** Each of our thread ids (``RUN_ID/UNIT_ID[/ITEM]``) is one server thread whose id is derived from
  it (:func:`server_thread_id`), created at its first turn with ours in its metadata (``dyneval_thread_id``): a
  resume in another process finds the same thread, and Studio shows whose thread it is.
* **A turn** is a run created on that thread and joined within the reference's ``timeout_s`` (a run that
  outlasts it is cancelled on the server); what it emitted is read from the thread's state, as for an in-process
  graph (:class:`runtime.agents.apps.GraphApp`).
* **Failures.** A server that does not answer when the run starts is bad input (:func:`open_remote`: exit 2
  before anything runs); one that stops answering mid-run fails the unit ``infra_error`` (retried by
  ``--resume``); a run the agent itself fails (it raised, it exceeded its recursion limit) is ``model_error``.
* **Key.** The first of :data:`API_KEY_ENVS` that is set goes as ``x-api-key``; none set, none is sent.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from langchain_core.messages import messages_from_dict
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import APIStatusError, LangGraphError, NotFoundError

from dyneval.runtime import stop
from dyneval.runtime.agents.apps import Turn, after_ours, bounded, failed
from dyneval.runtime.agents.errors import AgentServerError, AgentTimeout
from dyneval.state.agent import AgentRef
from dyneval.state.errors import one_line

#: Where the server's API key is read from, first set first; the SDK's own fallbacks are not used.
API_KEY_ENVS = ("LANGGRAPH_API_KEY", "LANGSMITH_API_KEY")
#: What a request to the server raises when it fails (no answer, an HTTP error status).
FAULTS = (httpx.HTTPError, LangGraphError)
#: The namespace of server thread ids derived from ours.
_THREADS = uuid.UUID("5d0f3a52-3d9c-4f0e-9a57-2f1c0e6b7d11")


def server_thread_id(thread_id: str) -> str:
    """The server thread of our ``thread_id`` (a UUID5 of it: the same in every process)."""
    return str(uuid.uuid5(_THREADS, thread_id))


def open_remote(parsed: AgentRef) -> RemoteApp:
    """A client of the server ``parsed`` names, with its assistant resolved; ``ValueError`` when the server does
    not answer, refuses the key, or has no such assistant (or several graphs and none named)."""
    key = next((os.environ[name] for name in API_KEY_ENVS if os.environ.get(name)), None)
    # (connect, read, write, pool): a join is bounded by timeout_s (runtime.agents.apps.bounded), not by httpx
    timeout = (5.0, parsed.timeout_s + 30, parsed.timeout_s + 30, 5.0)
    client = get_sync_client(url=parsed.target, api_key=key, timeout=timeout)
    try:
        return RemoteApp(parsed, client, _assistant(parsed, client))
    except APIStatusError as exc:  # it answered, refusing (a missing or wrong key: 401, 403)
        raise ValueError(f"agent {parsed.ref!r}: the server at {parsed.target} refused ({one_line(exc)})") from None
    except FAULTS as exc:
        raise ValueError(
            f"agent {parsed.ref!r}: the server at {parsed.target} did not answer ({one_line(exc)})"
        ) from None


def _assistant(parsed: AgentRef, client: Any) -> str:
    """``#ASSISTANT`` (an assistant id, or a graph id: its default assistant), else the server's one graph."""
    named = parsed.attr
    if named:
        try:
            uuid.UUID(named)
        except ValueError:
            with contextlib.suppress(NotFoundError):  # a server that knows no such graph says so by a 404
                if client.assistants.search(graph_id=named, limit=1):
                    return named
        else:
            with contextlib.suppress(NotFoundError):
                return str(client.assistants.get(named)["assistant_id"])
    graphs = sorted({a["graph_id"] for a in client.assistants.search(limit=100)})
    if not named and len(graphs) == 1:
        return graphs[0]
    served = ", ".join(graphs) or "none"
    if named:
        raise ValueError(f"agent {parsed.ref!r}: the server has no assistant or graph {named!r} (it serves: {served})")
    raise ValueError(f"agent {parsed.ref!r}: the server serves {len(graphs)} graphs ({served}): name one as #ASSISTANT")


@dataclass
class RemoteApp:
    """A deployed graph with a ``messages`` channel, one server thread per thread of ours."""

    ref: AgentRef
    client: Any
    #: The assistant (or graph) id every run names.
    assistant: str
    keeps_state = True

    def _messages(self, server: str) -> tuple[dict[str, Any], list[Any]]:
        """The thread's state, its ``messages`` as LangChain messages (as an in-process graph holds them)."""
        values = dict(self.client.threads.get_state(server)["values"] or {})
        raw = values.get("messages", [])
        values["messages"] = messages_from_dict([{"type": m["type"], "data": m} for m in raw])
        return values, values["messages"]

    def has_thread(self, thread_id: str) -> bool:
        try:
            return bool(self.client.threads.get_state(server_thread_id(thread_id))["values"])
        except NotFoundError:
            return False
        except FAULTS as exc:
            raise AgentServerError(f"agent {self.ref.ref}: the server failed ({one_line(exc)})") from exc

    def state(self, thread_id: str) -> dict[str, Any] | None:
        with contextlib.suppress(*FAULTS):  # no such thread (NotFoundError), or no answer: none we can read
            values, messages = self._messages(server_thread_id(thread_id))
            return values if messages else None
        return None

    def turn(self, message: dict[str, Any], thread_id: str) -> Turn:
        server = server_thread_id(thread_id)
        started: dict[str, str] = {}

        def run() -> tuple[int, Any, dict[str, Any], list[Any]]:
            self.client.threads.create(
                thread_id=server, if_exists="do_nothing", metadata={"dyneval_thread_id": thread_id}
            )
            before = len(self._messages(server)[0].get("messages", []))
            config = {"recursion_limit": self.ref.recursion_limit}
            created = self.client.runs.create(server, self.assistant, input={"messages": [message]}, config=config)
            started["run"] = created["run_id"]
            out = self.client.runs.join(server, created["run_id"])
            return (before, out, *self._messages(server))

        try:
            before, out, values, messages = bounded(self.ref, run)
        except (AgentTimeout, stop.StopRequested):
            if "run" in started:  # the server would go on running it, and refuse the thread's next turn
                self._cancel(server, started["run"])
            raise
        except FAULTS as exc:
            raise AgentServerError(f"agent {self.ref.ref}: the server failed mid-run ({one_line(exc)})") from exc
        if isinstance(out, dict) and "__error__" in out:
            error = out["__error__"]
            raise failed(self.ref, str(error.get("error")), str(error.get("message")))
        return Turn(emitted=after_ours(messages[before:]), state=values, server_thread=server)

    def _cancel(self, server: str, run_id: str) -> None:
        with contextlib.suppress(*FAULTS):  # best effort: the unit fails with the timeout either way
            self.client.runs.cancel(server, run_id)
