"""An agent target presented to the call layer as a chat model, keeping the conversation rule (docs/agents.md).

Every protocol calls its target through :class:`runtime.llm.RoleLLM` with the whole conversation so far; an agent
keeps its own history per thread, so :class:`AgentChat` sends it only what is new:

* **Thread.** One agent thread per unit of the protocol (``RUN_ID/UNIT_ID``): an interview session, a JudgeAgent
  batch, an llmeval session, an ATAD evaluation item. Inside :func:`independent_item` (ATAD's generation: each
  escalated problem is solved on its own) every item gets a fresh thread ``RUN_ID/UNIT_ID/ITEM``.
* **Resumed and restarted.** A thread's first turn in this process is ``new``, ``continued`` (an earlier session
  had turns on it and the agent kept it: it gets only what is new) or ``restarted`` (the agent lost it: it gets the
  conversation so far again), from the run's event log (:mod:`.history`). A thread whose turn timed out (or was
  left running by a stop) is sent no other turn: the turn may still be running, in this process, and write to it.
  The unit goes on, now or when resumed, on a fresh thread ``.../restartN``, ``restarted``.
* **One turn at a time.** Calls a unit makes in parallel (JudgeAgent's base questions) take turns on its thread.
* **New message.** The user messages of a request that continue those of the thread's previous request (the
  interview's feedback and follow-ups, a repair request) are sent alone; a request that does not continue them
  (JudgeAgent's next question) is sent whole. Several are joined into one message.
* **System prompt.** Our system prompt goes as a preamble of the thread's first message (``system=preamble``,
  the default) or not at all (``system=none``); later system messages are not sent.
* **Structured answers.** An agent has no schema-bound tool call: a structured request asks for the JSON object in
  the message (the schema's format instructions) and parses the reply's text.

The reply is the last AI message with text; everything the agent emitted, its state after the turn, the thread
and the token usage (or ``"unknown"``) go to the event log with the exchange (``agent`` field).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from dyneval.runtime import stop
from dyneval.runtime.agents.apps import AgentApp
from dyneval.runtime.agents.errors import AgentModelError, AgentTimeout
from dyneval.runtime.agents.history import ThreadHistory, restart_of
from dyneval.runtime.agents.record import bounded_state, message_record, usage_of
from dyneval.runtime.llm import current_unit

_item: ContextVar[str | None] = ContextVar("agent_item", default=None)
#: (agent reference, agent thread) of the turns this process left running (a timeout, a stop): never sent another.
_ABANDONED: set[tuple[str, str]] = set()
_abandoned_lock = threading.Lock()


@contextmanager
def independent_item(key: str) -> Iterator[None]:
    """Target calls inside go to a fresh agent thread of their own, ``RUN_ID/UNIT_ID/key``."""
    token = _item.set(key)
    try:
        yield
    finally:
        _item.reset(token)


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


class AgentChat(BaseChatModel):
    """The chat model :meth:`runtime.services.Services.model` opens for an agent reference."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    app: Any
    #: The run's id: thread ids are ``RUN_ID/UNIT_ID[/ITEM]``, so runs sharing an agent's database never meet.
    thread_prefix: str
    #: What the run's event log says of its threads (:mod:`.history`): what earlier sessions did on them.
    history: ThreadHistory | None = None
    _delivered: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    #: Our thread -> the agent thread it uses now (itself, or ``.../restartN`` after a timeout).
    _threads: dict[str, str] = PrivateAttr(default_factory=dict)
    _turns: dict[str, threading.Lock] = PrivateAttr(default_factory=dict)
    #: Unit -> {agent thread: the agent's state after its last turn there}, until the unit's record takes it.
    _final: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "dyneval-agent"

    def thread_id(self) -> str:
        """Our thread of the call being made (unit from the protocol graph's config)."""
        item = _item.get()
        return f"{self.thread_prefix}/{current_unit()}" + (f"/{item}" if item else "")

    def final_states(self, unit: str) -> dict[str, Any] | None:
        """``{agent thread: state after its last turn}`` of ``unit``'s threads, as the agent holds it (``None``:
        an app's, unread); taken: asked once per unit record."""
        with self._lock:
            return self._final.pop(unit, None)

    def with_structured_output(self, schema: Any, **_: Any) -> Any:
        """The agent asked for the JSON object in its message, its reply's text parsed into ``schema``."""
        from langchain_core.output_parsers import PydanticOutputParser

        parser: PydanticOutputParser[Any] = PydanticOutputParser(pydantic_object=schema)
        return self.bind(format_instructions=parser.get_format_instructions()) | parser

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        format_instructions: str | None = None,
        **_: Any,
    ) -> ChatResult:
        thread = self.thread_id()
        with self._lock:
            turn_lock = self._turns.setdefault(thread, threading.Lock())
        with turn_lock:  # a unit's parallel calls (JudgeAgent's base questions) take turns on its one thread
            return self._turn(thread, messages, format_instructions)

    def _open(self, thread: str) -> tuple[str, str, list[str], str | None]:
        """The agent thread our ``thread``'s turn goes to, how it starts (``new``, ``ongoing``, ``continued``,
        ``restarted``), the user messages it was delivered so far, and why it restarted."""
        app: AgentApp = self.app
        with self._lock:
            current = self._threads.get(thread)
        past = self.history.thread(thread) if current is None and self.history is not None else None
        agent_thread = current or (past.agent_thread if past else thread)
        why = None
        if past is not None and past.delivered is None:
            agent_thread, why = restart_of(agent_thread), f"a turn on {agent_thread} timed out"
        with _abandoned_lock:
            while (app.ref.ref, agent_thread) in _ABANDONED:
                agent_thread, why = restart_of(agent_thread), f"a turn on {agent_thread} timed out"
        with self._lock:
            self._threads[thread] = agent_thread
            delivered = self._delivered.get(agent_thread)
        if delivered is not None:
            return agent_thread, "ongoing", delivered, None
        if app.has_thread(agent_thread):
            earlier = past.delivered if past is not None and past.agent_thread == agent_thread else None
            return agent_thread, "continued", earlier or [], None
        if why is None and past is not None:
            why = "the agent lost the thread (it keeps no state across processes)"
        return agent_thread, "restarted" if why else "new", [], why

    def _turn(self, thread: str, messages: list[BaseMessage], format_instructions: str | None) -> ChatResult:
        app: AgentApp = self.app
        humans = [_text(m) for m in messages if m.type == "human"]
        agent_thread, start, before, why = self._open(thread)
        continues = len(humans) > len(before) and humans[: len(before)] == before
        parts = humans[len(before) :] if continues else humans
        if start in ("new", "restarted") and app.ref.system == "preamble":
            parts = [_text(m) for m in messages if m.type == "system"] + parts
        if format_instructions:
            parts.append(format_instructions)
        sent = "\n\n".join(p for p in parts if p)
        record: dict[str, Any] = {"thread_id": agent_thread, "thread": start, "sent": sent}
        if why:
            record["restarted_because"] = why
        try:
            turn = app.turn({"role": "user", "content": sent}, agent_thread)
        except (AgentTimeout, stop.StopRequested) as exc:
            with _abandoned_lock:  # the turn is left running: the unit's next turn goes to a fresh thread
                _ABANDONED.add((app.ref.ref, agent_thread))
            if isinstance(exc, AgentTimeout):
                exc.turn = record
            raise
        except AgentModelError as exc:  # the agent's own failure: the log names the thread it failed on
            exc.turn = exc.turn or record
            raise
        with self._lock:
            self._delivered[agent_thread] = humans
            self._final.setdefault(current_unit(), {})[agent_thread] = turn.state
        ais = [m for m in turn.emitted if m.type == "ai"]
        replies = [m for m in ais if _text(m).strip()]
        record.update(
            emitted=[message_record(m) for m in turn.emitted],
            usage=usage_of(ais) or "unknown",
            state=bounded_state(turn.state),
        )
        if turn.server_thread:
            record["server_thread_id"] = turn.server_thread
        if not replies:
            raise AgentModelError(
                f"agent {app.ref.ref} gave no AI message with text on thread {agent_thread} "
                f"(it emitted {len(turn.emitted)} message(s): {', '.join(m.type for m in turn.emitted) or 'none'})",
                turn=record,
            )
        usage = usage_of(ais)
        reply = AIMessage(
            content=_text(replies[-1]),
            response_metadata={"agent_turn": record},
            usage_metadata={**usage, "total_tokens": usage["input_tokens"] + usage["output_tokens"]} if usage else None,
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])
