"""A chat model that answers only from a finished run's event log (for ``--rescore``, :mod:`results.rescore`).

:class:`ReplayLog` indexes the source run's accepted replies (no error; fresh or cached) of the replayed roles
by unit, role and exact messages; identical requests of one unit are answered in the order they were logged.
:class:`ReplayChat` serves one role through :class:`runtime.llm.RoleLLM` like any chat model: a plain request
gets the recorded text, a structured one a tool call of the bound tool with the recorded parsed output. A
request the log does not hold raises :class:`state.errors.ReplayMissing`; nothing is sent anywhere.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict

from dyneval.runtime.agents.state_check import AGENT_FIELDS
from dyneval.runtime.llm import PING_STEP, current_unit, message_dicts
from dyneval.state.config import ROLES
from dyneval.state.errors import ReplayMissing
from dyneval.stores.rundir import RunDir

#: The ``response_metadata`` key a replayed reply carries (RoleLLM logs it as a reply not sent, like a cache hit).
REPLAYED = "replayed_from"


def _request_key(unit: str, role: str, structured: bool, messages: list[dict[str, Any]]) -> tuple[str, str, bool, str]:
    return unit, role, structured, json.dumps(messages, sort_keys=True, ensure_ascii=False)


class ReplayLog:
    """The source run's accepted replies of every role but ``judge_roles``, by unit, role and messages."""

    def __init__(self, events: Iterable[dict[str, Any]], judge_roles: Sequence[str], run_id: str) -> None:
        self.run_id = run_id
        self.labels: dict[str, str] = {}
        self.roles: set[str] = {r for r in ROLES if r not in judge_roles}  # and any other role logged, below
        self._replies: dict[tuple[str, str, bool, str], deque[dict[str, Any]]] = defaultdict(deque)
        self._lock = threading.Lock()
        for event in events:
            if event.get("role") in judge_roles:
                continue
            self.roles.add(str(event.get("role")))
            if event.get("error") is None and event.get("step") != PING_STEP:
                structured = isinstance(event.get("output"), dict)  # a text reply is logged as its string
                key = _request_key(str(event.get("unit")), event["role"], structured, event.get("messages") or [])
                self._replies[key].append(event)
                self.labels.setdefault(event["role"], str(event.get("model")))

    def take(self, unit: str, role: str, structured: bool, messages: list[BaseMessage]) -> dict[str, Any]:
        """The next recorded reply to these messages (a structured or a text request) in ``unit``;
        :class:`ReplayMissing` when there is none."""
        key = _request_key(unit, role, structured, message_dicts(messages))
        with self._lock:
            found = self._replies.get(key)
            if found:
                return found.popleft()
        raise ReplayMissing(
            f"the {role} role was asked something run {self.run_id} never asked it in unit {unit} "
            "(the new judge changed this unit's path, or the source unit ended before this "
            "request); it needs a full re-run with the new judge"
        )


class ReplayChat(BaseChatModel):
    """One role's replies replayed from a :class:`ReplayLog` (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    log: ReplayLog
    role: str

    @property
    def _llm_type(self) -> str:
        return "replay"

    @property
    def replay_of(self) -> str:
        """The label this role's model is shown under: where its replies come from."""
        label = self.log.labels.get(self.role)
        return f"replay of {self.log.run_id} ({label})" if label else f"replay of {self.log.run_id}"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        tools = kwargs.get("tools") or []
        event = self.log.take(current_unit(), self.role, bool(tools), messages)
        output = event.get("output")
        usage = {"input_tokens": event.get("prompt_tokens") or 0, "output_tokens": event.get("completion_tokens") or 0}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        meta = {REPLAYED: self.log.run_id}
        if tools and isinstance(output, dict) and "unparsed" not in output:  # a structured reply is a dict
            message = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": tools[0]["function"]["name"],
                        "args": output,
                        "id": f"replay_{id(event)}",
                        "type": "tool_call",
                    }
                ],
                usage_metadata=usage,
                response_metadata=meta,
            )
        else:  # text, or a structured reply the source could not use (its repair then differs: diverged)
            text = output.get("unparsed", "") if isinstance(output, dict) else str(output or "")
            message = AIMessage(content=text, usage_metadata=usage, response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=message)])


def replay_models(source: Path, judge_roles: Sequence[str]) -> dict[str, ReplayChat]:
    """A replay chat model for every role but ``judge_roles``, keyed by role (``Services.chat_overrides``): the
    configurable roles and any other role the source run logged (e.g. llmeval's ``reference``)."""
    run = RunDir(source, "--rescore")
    log = ReplayLog(run.events(), judge_roles, run.name)
    return {role: ReplayChat(log=log, role=role) for role in sorted(log.roles)}


def source_agent_fields(source: Path) -> dict[str, dict[str, Any]]:
    """Unit id -> what its record in the source run holds of the agent target's threads (``agent_threads`` and
    ``state_checks``; nothing for a unit without): a re-score replays the agent's turns, so the agent's final state
    on each thread, and the ``--state-check`` verdicts on it, are the source's."""
    return {r["unit_id"]: {k: r[k] for k in AGENT_FIELDS if k in r} for r in RunDir(source, "--rescore").records()}
