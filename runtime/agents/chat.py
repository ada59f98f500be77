"""An agent target presented to the call layer as a chat model, keeping the conversation rule (docs/agents.md).

Every protocol calls its target through :class:`runtime.llm.RoleLLM` with the whole conversation so far; an agent
keeps its own history per thread, so :class:`AgentChat` sends it only what is new:

* **Thread.** One agent thread per unit of the protocol (``RUN_ID/UNIT_ID``): an interview session, a JudgeAgent
  batch, an llmeval session, an ATAD evaluation item. Inside :func:`independent_item` (ATAD's generation: each
  escalated problem is solved on its own) every item gets a fresh thread ``RUN_ID/UNIT_ID/ITEM``.
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

from dyneval.runtime.agents.apps import AgentApp
from dyneval.runtime.agents.errors import AgentModelError
from dyneval.runtime.agents.record import bounded_state, message_record, usage_of
from dyneval.runtime.llm import current_unit

_item: ContextVar[str | None] = ContextVar("agent_item", default=None)


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
    _delivered: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    _turns: dict[str, threading.Lock] = PrivateAttr(default_factory=dict)
    #: Unit -> {thread id: the agent's state after its last turn there}, until the unit's record takes it.
    _final: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "dyneval-agent"

    def thread_id(self) -> str:
        """The agent thread of the call being made (unit from the protocol graph's config)."""
        item = _item.get()
        return f"{self.thread_prefix}/{current_unit()}" + (f"/{item}" if item else "")

    def final_states(self, unit: str) -> dict[str, Any] | None:
        """``{thread id: state after its last turn}`` of ``unit``'s threads (taken: asked once per unit record)."""
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

    def _turn(self, thread: str, messages: list[BaseMessage], format_instructions: str | None) -> ChatResult:
        app: AgentApp = self.app
        humans = [_text(m) for m in messages if m.type == "human"]
        with self._lock:
            before = self._delivered.get(thread)
        start = "ongoing" if before is not None else "continued" if app.has_thread(thread) else "new"
        before = before or []
        continues = len(humans) > len(before) and humans[: len(before)] == before
        parts = humans[len(before) :] if continues else humans
        if start == "new" and app.ref.system == "preamble":
            parts = [_text(m) for m in messages if m.type == "system"] + parts
        if format_instructions:
            parts.append(format_instructions)
        sent = "\n\n".join(p for p in parts if p)
        turn = app.turn({"role": "user", "content": sent}, thread)
        with self._lock:
            self._delivered[thread] = humans
            self._final.setdefault(current_unit(), {})[thread] = bounded_state(turn.state)
        ais = [m for m in turn.emitted if m.type == "ai"]
        replies = [m for m in ais if _text(m).strip()]
        record = {
            "thread_id": thread,
            "thread": start,
            "sent": sent,
            "emitted": [message_record(m) for m in turn.emitted],
            "usage": usage_of(ais) or "unknown",
            "state": bounded_state(turn.state),
        }
        if turn.server_thread:
            record["server_thread_id"] = turn.server_thread
        if not replies:
            raise AgentModelError(
                f"agent {app.ref.ref} gave no AI message with text on thread {thread} "
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
