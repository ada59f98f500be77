"""Response cache shared across runs (``--cache``), stored with LangChain's SQLite cache.

LangChain's own chat-model cache keys on the model and the prompt only; it cannot tell two repeats of one
request apart and it stores malformed structured replies. So :class:`runtime.llm.RoleLLM` asks this cache
itself, and only stores a reply it accepted: a text reply, or a structured reply that validated (never an
error, never an unusable reply). The key holds everything that changes an answer:

* the endpoint: provider, base URL, model, temperature, max tokens, structured-output method;
* the request kind: plain text, or the structured-output schema (its JSON schema);
* the full messages (type, text, tool calls);
* where it was asked: the unit (graph thread) and step, and the *repeat*, the n-th identical request within
  that unit and step. Repeats (``--repeats``, a judge asked k times, interview repeat units) therefore never
  share an answer, whatever the temperature, while a later run of the same units (same run setup, or a
  killed run started again) gets each unit's own answers back.

Entries older than ``expiry_s`` are ignored (and replaced when asked again), in the spirit of inspect_ai's
``CachePolicy(expiry=...)``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration

#: The database file inside the cache folder.
DATABASE = "responses.sqlite"


@dataclass(frozen=True)
class CacheKey:
    prompt: str
    llm_string: str


def _message_record(m: BaseMessage) -> dict[str, Any]:
    record: dict[str, Any] = {"type": m.type, "content": m.content}
    for name in ("tool_calls", "tool_call_id", "name"):
        value = getattr(m, name, None)
        if value:
            record[name] = [{"name": c["name"], "args": c["args"]} for c in value] if name == "tool_calls" else value
    return record


class ResponseCache:
    """Accepted replies by request, on disk in ``folder`` (shared by processes: SQLite locks the file)."""

    def __init__(self, folder: Path, expiry_s: float | None = None) -> None:
        from langchain_community.cache import SQLiteCache

        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.expiry_s = folder, expiry_s
        self._store = SQLiteCache(database_path=str(folder / DATABASE))
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def key(
        self, *, endpoint: dict[str, Any], request: dict[str, Any], messages: list[BaseMessage], unit: str, step: str
    ) -> CacheKey:
        """The key of this request, counting it as the next repeat of an identical request in ``unit`` and ``step``."""
        prompt = json.dumps([_message_record(m) for m in messages], sort_keys=True, ensure_ascii=False)
        base = json.dumps(
            {"endpoint": endpoint, "request": request, "unit": unit, "step": step}, sort_keys=True, ensure_ascii=False
        )
        with self._lock:
            repeat = self._seen[base, prompt]
            self._seen[base, prompt] += 1
        return CacheKey(prompt, f"{base}#repeat={repeat}")

    def get(self, key: CacheKey) -> tuple[AIMessage, dict[str, Any]] | None:
        """The stored reply and what was stored beside it (e.g. the parsed object), unless absent or expired."""
        found = self._store.lookup(key.prompt, key.llm_string)
        if not found:
            return None
        generation = found[0]
        if not isinstance(generation, ChatGeneration) or not isinstance(generation.message, AIMessage):
            return None  # an entry LangChain could not load back as a reply (it gives its text): asked again
        info = generation.generation_info or {}
        if self.expiry_s is not None and time.time() - float(info.get("cached_at", 0)) > self.expiry_s:
            return None
        return generation.message, info

    def put(self, key: CacheKey, message: AIMessage, **extra: Any) -> None:
        """Store an accepted reply (``extra``: JSON values kept beside it, e.g. ``parsed``)."""
        info = {"cached_at": time.time(), **extra}
        self._store.update(key.prompt, key.llm_string, [ChatGeneration(message=message, generation_info=info)])
