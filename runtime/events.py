"""The run's event log (``events.jsonl``) and per-unit usage accounting."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.stores.files import append_line, append_text, drop_torn_tail, read_records

if TYPE_CHECKING:
    from dyneval.runtime.pricing import Pricing


@dataclass
class Usage:
    """Calls, tokens, USD and seconds spent by one unit (or a whole run), and the replies the response cache saved.

    USD are summed over exchanges whose model has a price (:mod:`runtime.pricing`); an exchange with tokens and
    no price is counted in ``unpriced`` (``unpriced_saved`` for cache hits) and makes the total unknown
    (:meth:`as_dict` gives ``None``), never a silent 0. ``retries`` are the requests sent only because an earlier
    one failed: a retry after an endpoint fault (``attempt`` > 1) or a repair of a malformed structured reply
    (step ``...:repair``), with their tokens and USD.
    """

    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    tokens_saved: int = 0
    cost_usd: float = 0.0
    cost_saved: float = 0.0
    unpriced: int = 0
    unpriced_saved: int = 0
    retries: int = 0
    retry_tokens: int = 0
    retry_cost: float = 0.0

    def count(self, event: dict[str, Any]) -> None:
        """Add one exchange of the event log: a cache hit spends nothing and saves its reply's tokens and USD."""
        tokens = (event.get("prompt_tokens") or 0), (event.get("completion_tokens") or 0)
        cost = event.get("cost_usd")
        unpriced = cost is None and sum(tokens) > 0
        if event.get("cached"):
            self.cache_hits += 1
            self.tokens_saved += sum(tokens)
            self.cost_saved += cost or 0.0
            self.unpriced_saved += unpriced
            return
        self.calls += 1
        self.failed_calls += event.get("error") is not None
        self.prompt_tokens += tokens[0]
        self.completion_tokens += tokens[1]
        self.seconds += event.get("latency_s") or 0.0
        self.cost_usd += cost or 0.0
        self.unpriced += unpriced
        if (event.get("attempt") or 1) > 1 or str(event.get("step", "")).endswith(":repair"):
            self.retries += 1
            self.retry_tokens += sum(tokens)
            self.retry_cost += cost or 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        """The inverse of :meth:`as_dict` (a unit record's ``usage``); an unknown cost stays unknown."""

        def known(value: float | None, unpriced: int) -> tuple[float, int]:
            return (0.0, max(1, unpriced)) if value is None else (value, unpriced)

        cost, unpriced = known(data.get("cost_usd"), data.get("unpriced_calls", 0))
        saved, unpriced_saved = known(data.get("cost_saved_by_cache_usd"), data.get("unpriced_cache_hits", 0))
        return cls(
            data.get("calls", 0),
            data.get("failed_calls", 0),
            data.get("prompt_tokens", 0),
            data.get("completion_tokens", 0),
            data.get("llm_seconds", 0.0),
            data.get("cache_hits", 0),
            data.get("tokens_saved_by_cache", 0),
            cost,
            saved,
            unpriced,
            unpriced_saved,
            data.get("retries", 0),
            data.get("retry_tokens", 0),
            data.get("retry_cost_usd") or 0.0,
        )

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
            "cost_usd": None if self.unpriced else round(self.cost_usd, 6),
            "unpriced_calls": self.unpriced,
            "cost_saved_by_cache_usd": None if self.unpriced_saved else round(self.cost_saved, 6),
            "unpriced_cache_hits": self.unpriced_saved,
            "retries": self.retries,
            "retry_tokens": self.retry_tokens,
            "retry_cost_usd": None if self.unpriced else round(self.retry_cost, 6),
        }


def usd(usage: dict[str, Any], key: str = "cost_usd") -> str:
    """A usage dict's USD for people: ``$0.0123``, or unknown and why."""
    value = usage.get(key)
    if value is not None:
        return f"${value:.6g}"
    n = usage.get("unpriced_cache_hits" if key == "cost_saved_by_cache_usd" else "unpriced_calls", 0)
    return f"unknown ({n} exchange(s) of models without a price: see --pricing)"


@dataclass
class EventLog:
    """Append-only JSONL log of every LLM exchange, safe to share between threads.

    ``path=None`` keeps events in memory only (Studio sessions, tests). Opening an
    existing log drops a last line a kill cut short (see ``notes``), so appends
    start on a fresh line. ``pricing`` prices each exchange (``cost_usd``; ``None`` = unknown).
    """

    path: Path | None = None
    pricing: Pricing | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _usage: dict[str, Usage] = field(default_factory=lambda: defaultdict(Usage), repr=False)
    _by_role: dict[str, Usage] = field(default_factory=lambda: defaultdict(Usage), repr=False)
    _total: Usage = field(default_factory=Usage, repr=False)
    _models: dict[str, dict[str, None]] = field(default_factory=lambda: defaultdict(dict), repr=False)
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    keep_in_memory: bool = False
    notes: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.path is not None and (note := drop_torn_tail(self.path)):
            self.notes.append(note)

    def record(
        self,
        *,
        unit: str,
        role: str,
        model: str,
        step: str,
        messages: list[dict[str, Any]],
        output: Any,
        prompt_tokens: int,
        completion_tokens: int,
        latency_s: float,
        error: str | None = None,
        attempt: int = 1,
        queue_s: float = 0.0,
        cached: bool = False,
        agent: dict[str, Any] | None = None,
    ) -> None:
        """Append one exchange: ``latency_s`` = the endpoint's time from request to reply, ``queue_s`` = the
        wait before the request went out (the model's in-flight ceiling and rate limit), ``cached`` = the reply
        came from the response cache (no request was sent), ``agent`` = an agent target's turn
        (:mod:`runtime.agents.chat`: its thread, what it was sent, what it emitted, its state)."""
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
            "cost_usd": self._cost(model, prompt_tokens, completion_tokens),
        }
        if agent is not None:
            event["agent"] = agent
        self.log(event)

    def log(self, event: dict[str, Any]) -> None:
        """Append one exchange as :meth:`record` made it (here, or in another process: a Ray worker's)."""
        with self._lock:
            self._keep(event)
            if self.path is not None:
                append_line(self.path, event)

    def append_taken(self, take: Callable[[int], str]) -> int:
        """Append and count the JSON lines ``take(end)`` returns (exchanges logged in other processes: a Ray
        run's workers), ``end`` being the log's size in bytes as they are taken, where they will start; no other
        append comes between. Returns how many exchanges were appended."""
        with self._lock:
            end = self.path.stat().st_size if self.path is not None and self.path.exists() else 0
            lines = take(end)
            if not lines:
                return 0
            if self.path is not None:
                append_text(self.path, lines)
            events = [json.loads(line) for line in lines.split("\n") if line]  # not splitlines: a line may hold U+2028
            for event in events:
                self._keep(event)
            return len(events)

    def _keep(self, event: dict[str, Any]) -> None:
        self._count(event)
        if self.keep_in_memory or self.path is None:
            self.records.append(event)

    def _cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        return None if self.pricing is None else self.pricing.cost(model, prompt_tokens, completion_tokens)

    def _count(self, event: dict[str, Any]) -> None:
        self._usage[event.get("unit", "-")].count(event)
        self._by_role[event.get("role", "-")].count(event)
        self._models[event.get("role", "-")][event.get("model", "-")] = None
        self._total.count(event)

    def usage(self, unit: str) -> Usage:
        """Usage of one unit so far (a copy)."""
        with self._lock:
            return dataclasses.replace(self._usage.get(unit, Usage()))

    def release(self, unit: str) -> None:
        """Forget the usage of a unit that ended (its record holds it): a long run keeps no count per finished
        unit."""
        with self._lock:
            self._usage.pop(unit, None)

    def by_role(self) -> dict[str, Usage]:
        """Usage per role (failed attempts included), copies."""
        with self._lock:
            return {role: dataclasses.replace(u) for role, u in sorted(self._by_role.items())}

    def models_by_role(self) -> dict[str, list[str]]:
        """Role -> the models it called (every exchange of the run, resumed ones too)."""
        with self._lock:
            return {role: list(models) for role, models in sorted(self._models.items())}

    def total(self) -> Usage:
        """Usage of the whole run so far (a copy), counted as exchanges are logged: the budget asks before every
        request, so it is not summed over the units each time."""
        with self._lock:
            return dataclasses.replace(self._total)

    def load_existing(self) -> None:
        """Re-count usage from an existing log (resume keeps earlier cost; a log written before exchanges were
        priced is priced now)."""
        if self.path is None:
            return
        with self._lock:
            for e in read_records(self.path, self.notes):
                if "cost_usd" not in e:
                    e["cost_usd"] = self._cost(
                        e.get("model", ""), e.get("prompt_tokens") or 0, e.get("completion_tokens") or 0
                    )
                self._count(e)
