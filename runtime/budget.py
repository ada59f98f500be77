"""A run's budget (``--max-calls``, ``--max-tokens``): no request starts once it is spent.

:class:`runtime.llm.RoleLLM` asks :meth:`Budget.check` right before each request (after the Ctrl-C check). What is
spent is the run's event log total: requests sent (failed attempts included) and their prompt plus completion
tokens, earlier sessions of a resumed run included; replies from the response cache or replayed by a re-score
spend nothing. Once spent, the check raises the run-wide stop flag (:mod:`runtime.stop`), so every thread's next
request is refused and the run ends like an interrupted one: requests already in flight finish, a partial summary
and report are written, and ``--resume`` with a higher budget continues.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from runtime import stop
from runtime.events import EventLog, Usage


class BudgetSpent(stop.StopRequested):
    """Raised in place of a request once the run's budget is spent."""


@dataclass
class Budget:
    events: EventLog
    max_calls: int | None = None
    max_tokens: int | None = None
    #: What was spent when the budget was reached (``None`` while it was not).
    reached: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        """Refuse the next request (:class:`BudgetSpent`) when the budget is spent; the first refusal stops the run."""
        with self._lock:
            if self.reached is None:
                total = self.events.total()
                if not self._spent(total):
                    return
                self.reached = self.describe(total)
                stop.request_stop()
        stop.refuse(f"the run's budget is spent: {self.reached}", BudgetSpent)

    def _spent(self, total: Usage) -> bool:
        tokens = total.prompt_tokens + total.completion_tokens
        return (self.max_calls is not None and total.calls >= self.max_calls) or \
            (self.max_tokens is not None and tokens >= self.max_tokens)

    def describe(self, total: Usage) -> str:
        """What was spent against which limit, e.g. ``12 calls of --max-calls 12, 300 tokens``."""
        calls = f"{total.calls} calls" + (f" of --max-calls {self.max_calls}" if self.max_calls is not None else "")
        tokens = total.prompt_tokens + total.completion_tokens
        tokens_text = f"{tokens} tokens" + (f" of --max-tokens {self.max_tokens}" if self.max_tokens is not None
                                            else "")
        return f"{calls}, {tokens_text}"
