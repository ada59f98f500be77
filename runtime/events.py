"""The run's event log (``events.jsonl``) and per-unit usage accounting."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stores.files import append_line, drop_torn_tail, read_records


@dataclass
class Usage:
    """Calls, tokens and seconds spent by one unit (or a whole run), and the replies the response cache saved."""

    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    tokens_saved: int = 0

    def count(self, event: dict[str, Any]) -> None:
        """Add one exchange of the event log: a cache hit spends nothing and saves its reply's tokens."""
        tokens = (event.get("prompt_tokens") or 0), (event.get("completion_tokens") or 0)
        if event.get("cached"):
            self.cache_hits += 1
            self.tokens_saved += sum(tokens)
            return
        self.calls += 1
        self.failed_calls += event.get("error") is not None
        self.prompt_tokens += tokens[0]
        self.completion_tokens += tokens[1]
        self.seconds += event.get("latency_s") or 0.0

    def add(self, other: Usage) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failed_calls": self.failed_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_seconds": round(self.seconds, 3),
            "cache_hits": self.cache_hits,
            "tokens_saved_by_cache": self.tokens_saved,
        }


@dataclass
class EventLog:
    """Append-only JSONL log of every LLM exchange, safe to share between threads.

    ``path=None`` keeps events in memory only (Studio sessions, tests). Opening an
    existing log drops a last line a kill cut short (see ``notes``), so appends
    start on a fresh line.
    """

    path: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _usage: dict[str, Usage] = field(default_factory=lambda: defaultdict(Usage), repr=False)
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    keep_in_memory: bool = False
    notes: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.path is not None and (note := drop_torn_tail(self.path)):
            self.notes.append(note)

    def record(self, *, unit: str, role: str, model: str, step: str, messages: list[dict[str, Any]],
               output: Any, prompt_tokens: int, completion_tokens: int, latency_s: float,
               error: str | None = None, attempt: int = 1, queue_s: float = 0.0, cached: bool = False) -> None:
        """Append one exchange: ``latency_s`` = the endpoint's time from request to reply, ``queue_s`` = the
        wait before the request went out (the model's in-flight ceiling and rate limit), ``cached`` = the reply
        came from the response cache (no request was sent)."""
        event = {
            "ts": round(time.time(), 3),
            "unit": unit,
            "role": role,
            "model": model,
            "step": step,
            "attempt": attempt,
            "messages": messages,
            "output": output,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "latency_s": round(latency_s, 3),
            "queue_s": round(queue_s, 3),
            "error": error,
            "cached": cached,
        }
        with self._lock:
            self._usage[unit].count(event)
            if self.keep_in_memory or self.path is None:
                self.records.append(event)
            if self.path is not None:
                append_line(self.path, event)

    def usage(self, unit: str) -> Usage:
        """Usage of one unit so far (a copy)."""
        with self._lock:
            return dataclasses.replace(self._usage.get(unit, Usage()))

    def total(self) -> Usage:
        with self._lock:
            total = Usage()
            for u in self._usage.values():
                total.add(u)
            return total

    def load_existing(self) -> None:
        """Re-count usage from an existing log (resume keeps earlier cost)."""
        if self.path is None:
            return
        with self._lock:
            for e in read_records(self.path, self.notes):
                self._usage[e.get("unit", "-")].count(e)
