"""A run's budget (``--max-calls``, ``--max-tokens``, ``--max-cost``): no request starts once it is spent.

:class:`runtime.llm.RoleLLM` asks :meth:`Budget.check` right before each request (after the Ctrl-C check). What is
spent is the run's event log total: requests sent (failed attempts included), their prompt plus completion
tokens and their USD (:mod:`runtime.pricing`), earlier sessions of a resumed run included; replies from the
response cache or replayed by a re-score spend nothing. Once spent, the check raises the run-wide stop flag
(:mod:`runtime.stop`), so every thread's next request is refused and the run ends like an interrupted one:
requests already in flight finish, a partial summary and report are written, and ``--resume`` with a higher
budget continues. A cost budget needs every model the run calls to have a price: :func:`check_priced` refuses
one whose roles' models have none before the run starts; a model without a price called later (an extra
evaluated model) stops the run as a spent cost budget would.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from dyneval.runtime import stop
from dyneval.runtime.events import Usage
from dyneval.state.errors import InputError

if TYPE_CHECKING:  # a Ray run's coordinator imports this module: not the model layer the pricing needs
    from dyneval.runtime.pricing import Pricing


class BudgetSpent(stop.StopRequested):
    """Raised in place of a request once the run's budget is spent."""


class Spending(Protocol):
    """What a budget reads of the usage: a run's :class:`runtime.events.EventLog`, or the coordinator's tally of
    every Ray worker's (:mod:`runtime.cluster`)."""

    def total(self) -> Usage: ...

    def by_role(self) -> dict[str, Usage]: ...


@dataclass
class Budget:
    events: Spending
    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    #: Per role as logged (``--max-tokens-per-role evaluator=N``): one role reaching its limit stops the run.
    max_tokens_per_role: dict[str, int] = field(default_factory=dict)
    max_cost_per_role: dict[str, float] = field(default_factory=dict)
    #: What was spent when the budget was reached (``None`` while it was not).
    reached: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        """Refuse the next request (:class:`BudgetSpent`) when the budget is spent; the first refusal stops the run."""
        with self._lock:
            if self.reached is None:
                total = self.events.total()
                role = self._role_spent()
                if role is None and not self._spent(total):
                    return
                self.reached = self.describe(total) + (f"; {role}" if role else "")
                stop.request_stop()
        stop.refuse(f"the run's budget is spent: {self.reached}", BudgetSpent)

    def _spent(self, total: Usage) -> bool:
        tokens = total.prompt_tokens + total.completion_tokens
        return (
            (self.max_calls is not None and total.calls >= self.max_calls)
            or (self.max_tokens is not None and tokens >= self.max_tokens)
            or (self.max_cost is not None and (total.cost_usd >= self.max_cost or total.unpriced > 0))
        )

    def _role_spent(self) -> str | None:
        """Which role's own budget is spent, e.g. ``evaluator: 300 tokens of --max-tokens-per-role 250``."""
        if not (self.max_tokens_per_role or self.max_cost_per_role):
            return None
        used = self.events.by_role()
        for role, limit in self.max_tokens_per_role.items():
            tokens = used[role].prompt_tokens + used[role].completion_tokens if role in used else 0
            if tokens >= limit:
                return f"{role}: {tokens} tokens of --max-tokens-per-role {limit}"
        for role, cost_limit in self.max_cost_per_role.items():
            u = used.get(role, Usage())
            if u.cost_usd >= cost_limit or u.unpriced:
                return f"{role}: ${u.cost_usd:.6g} of --max-cost-per-role {cost_limit}"
        return None

    def describe(self, total: Usage) -> str:
        """What was spent against which limit, e.g. ``12 calls of --max-calls 12, 300 tokens``."""
        calls = f"{total.calls} calls" + (f" of --max-calls {self.max_calls}" if self.max_calls is not None else "")
        tokens = total.prompt_tokens + total.completion_tokens
        tokens_text = f"{tokens} tokens" + (
            f" of --max-tokens {self.max_tokens}" if self.max_tokens is not None else ""
        )
        unknown = f" + {total.unpriced} exchange(s) of models without a price" if total.unpriced else ""
        cost = f"${total.cost_usd:.6g}{unknown}" + (
            f" of --max-cost {self.max_cost}" if self.max_cost is not None else ""
        )
        return f"{calls}, {tokens_text}, {cost}"


def check_priced(flag: str | None, pricing: Pricing, labels: dict[str, str]) -> None:
    """Refuse a cost budget (``flag``: ``--max-cost`` ...; exit 2, before any request) when a model the run calls
    has no price. ``labels``: role -> the label of the model it calls."""
    if flag is None:
        return
    unpriced = sorted({f"{label} ({role})" for role, label in labels.items() if pricing.price(label) is None})
    if unpriced:
        raise InputError(
            f"cannot hold the run to a cost budget: no price for {', '.join(unpriced)}; add it to a "
            "--pricing file or set price_in / price_out in its [models.NAME] spec",
            setting=flag,
        )
