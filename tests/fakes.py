"""Fake chat models for unit tests, built on LangChain's fake chat model base.

``ScriptedChat`` answers through a Python function of the messages and, for
structured calls, of the requested tool schema, so a test can simulate a model
(e.g. one that is right with probability p) and still exercise
``with_structured_output(method="function_calling")`` end to end.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

Responder = Callable[[list[BaseMessage], dict[str, Any] | None], Any]
_ids = itertools.count()


class ScriptedChat(GenericFakeChatModel):
    """``responder(messages, tool)`` returns text (plain calls) or a dict of tool args (structured calls).

    ``tool`` is the OpenAI tool dict of the requested schema (``None`` for plain
    calls). Returning an ``Exception`` instance raises it (to simulate endpoint faults).
    Every call is kept in ``calls`` as ``(messages, tool_name)``.
    """

    responder: Any
    messages: Any = iter(())
    calls: list = []

    def __init__(self, responder: Responder, **kwargs: Any) -> None:
        super().__init__(responder=responder, calls=[], **kwargs)

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        tools = kwargs.get("tools") or []
        tool = tools[0] if tools else None
        self.calls.append((messages, tool["function"]["name"] if tool else None))
        out = self.responder(messages, tool)
        if isinstance(out, Exception):
            raise out
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        if tool is not None and isinstance(out, dict):
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": tool["function"]["name"], "args": out, "id": f"call_{next(_ids)}", "type": "tool_call"}
                ],
                usage_metadata=usage,
            )
        else:
            msg = AIMessage(content=out if isinstance(out, str) else json.dumps(out), usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def last_text(messages: list[BaseMessage]) -> str:
    """The content of the last message (what a responder usually inspects)."""
    return str(messages[-1].content)


def all_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)
