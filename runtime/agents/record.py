"""What the event log keeps of an agent's turn: its messages and state as JSON, each bounded with the cut said."""

from __future__ import annotations

import json
from typing import Any

#: Characters kept of one tool result, and of the agent's state after a turn.
TOOL_RESULT_CHARS = 2000
STATE_CHARS = 20_000


def cut(text: str, limit: int) -> dict[str, Any]:
    """``{"text"}``, or the first ``limit`` characters with ``cut_chars`` = how many were left out."""
    if len(text) <= limit:
        return {"text": text}
    return {"text": text[:limit], "cut_chars": len(text) - limit}


def message_record(message: Any) -> dict[str, Any]:
    """One emitted message: its type, text, tool calls with arguments, and a tool result cut at
    :data:`TOOL_RESULT_CHARS`."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content, default=str)
    out: dict[str, Any] = {"type": message.type}
    if message.type == "tool":
        out.update(name=getattr(message, "name", None), tool_call_id=getattr(message, "tool_call_id", None))
        out.update(cut(content, TOOL_RESULT_CHARS))
        return out
    out["text"] = content
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        out["tool_calls"] = [{"name": c["name"], "args": json_safe(c["args"]), "id": c.get("id")} for c in calls]
    return out


def json_safe(value: Any) -> Any:
    """``value`` as JSON data: messages as :func:`message_record`, other objects by ``str``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "type") and hasattr(value, "content"):
        return message_record(value)
    return str(value)


def bounded_state(values: dict[str, Any] | None) -> Any:
    """The agent's state after a turn (its checkpoint values) as JSON data, its ``messages`` channel as their count
    (each turn's own messages are under ``emitted``, so a thread's history is not written again at every turn),
    or the first :data:`STATE_CHARS` of its JSON text with the cut said; ``None`` = the agent keeps no state we
    can read (an app)."""
    if values is None:
        return None
    data = json_safe({k: len(v) if k == "messages" and isinstance(v, list) else v for k, v in values.items()})
    text = json.dumps(data, ensure_ascii=False)
    return data if len(text) <= STATE_CHARS else {"json_prefix": cut(text, STATE_CHARS)}


def usage_of(messages: list[Any]) -> dict[str, int] | None:
    """Tokens the turn's AI messages report (LangChain ``usage_metadata``), summed; ``None`` = none reported."""
    reported = [m.usage_metadata for m in messages if getattr(m, "usage_metadata", None)]
    if not reported:
        return None
    return {
        "input_tokens": sum(int(u.get("input_tokens") or 0) for u in reported),
        "output_tokens": sum(int(u.get("output_tokens") or 0) for u in reported),
    }
