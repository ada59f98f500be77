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
* **Never twice.** A resumed unit repeats the requests its last checkpoint does not hold; on a thread the agent
  kept, one the log shows it replied to already (a stop after the reply, before the step's checkpoint) is answered
  with the logged reply, sent nothing and not logged again, so the agent's thread holds each message once.
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
from dyneval.runtime.agents.history import LoggedTurn, ThreadHistory, request_key, restart_of
from dyneval.runtime.agents.record import bounded_state, message_record, usage_of
from dyneval.runtime.llm import LOGGED_ALREADY, current_unit

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
    #: Agent thread -> the user messages of its last request this process sent, or answered from the log.
    _delivered: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    #: Agent thread -> whether this process sent it a turn (``ongoing`` from then on, else ``continued``).
    _sent: set[str] = PrivateAttr(default_factory=set)
    #: Agent thread -> the logged turns a resumed unit's next requests are answered with, in order (:meth:`_logged`).
    _replayable: dict[str, list[LoggedTurn]] = PrivateAttr(default_factory=dict)
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
            sent = agent_thread in self._sent
        if sent:
            return agent_thread, "ongoing", delivered or [], None
        if app.has_thread(agent_thread):
            earlier = past.delivered if past is not None and past.agent_thread == agent_thread else None
            return agent_thread, "continued", delivered or earlier or [], None
        if why is None and past is not None:
            why = "the agent lost the thread (it keeps no state across processes)"
        return agent_thread, "restarted" if why else "new", [], why

    def _logged(
        self, thread: str, agent_thread: str, humans: list[str], format_instructions: str | None
    ) -> LoggedTurn | None:
        """The logged turn this request of a resumed unit repeats on the thread the agent kept (None: none, send it).

        A unit resumes from its last checkpoint, so it repeats, in order, the requests made since: the first one's
        latest logged match on the thread, and each logged turn after it, are taken (each once) while the
        requests follow them; any other request, and every one after it, is sent."""
        key = request_key(humans, format_instructions is not None)
        with self._lock:
            queue = self._replayable.get(agent_thread)
            if queue is None:
                past = self.history.thread(thread) if self.history is not None else None
                kept = past is not None and past.agent_thread == agent_thread and past.agent == self.app.ref.ref
                turns = past.turns if kept and past is not None else ()
                at = max((i for i, t in enumerate(turns) if t.request == key), default=None)
                queue = list(turns[at:]) if at is not None else []
            self._replayable[agent_thread] = queue[1:] if queue and queue[0].request == key else []
            return queue[0] if queue and queue[0].request == key else None

    def _turn(self, thread: str, messages: list[BaseMessage], format_instructions: str | None) -> ChatResult:
        app: AgentApp = self.app
        humans = [_text(m) for m in messages if m.type == "human"]
        agent_thread, start, before, why = self._open(thread)
        if start == "continued" and (logged := self._logged(thread, agent_thread, humans, format_instructions)):
            with self._lock:
                self._delivered[agent_thread] = humans
                self._final.setdefault(current_unit(), {})[agent_thread] = app.state(agent_thread)
            reply = AIMessage(content=logged.reply, response_metadata={LOGGED_ALREADY: agent_thread})
            return ChatResult(generations=[ChatGeneration(message=reply)])
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
            self._sent.add(agent_thread)
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
