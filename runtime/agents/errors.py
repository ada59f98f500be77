"""How an agent target's turn fails: never a wrong answer, always a failed unit with its reason.

An agent that raises, exceeds its recursion limit or returns no AI message with text failed on its own and would
fail again: :class:`AgentModelError` (unit ``model_error``, final, not retried). A turn that outlasts its timeout
may be a slow dependency of the agent: :class:`AgentTimeout` (unit ``infra_error``, continued on a resume as an
endpoint fault is, on a fresh agent thread: :mod:`runtime.agents.chat`), as is a deployed agent's server that stops
answering mid-run: :class:`AgentServerError`.
"""

from __future__ import annotations

from typing import Any

from dyneval.state.errors import InfraError, ModelError


class _FailedTurn(Exception):
    """A failed turn; ``turn`` is what the event log keeps of it (its thread, what was sent, what the agent emitted
    before it failed: :mod:`runtime.agents.chat`)."""

    def __init__(self, message: str, turn: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.turn = turn


class AgentModelError(_FailedTurn, ModelError):
    """The agent raised, looped past its recursion limit, or gave no AI message with text."""


class AgentTimeout(_FailedTurn, InfraError):
    """The agent's turn did not end within its per-turn timeout."""


class AgentServerError(InfraError):
    """A deployed agent's server did not answer, or failed a request, mid-run (:mod:`runtime.agents.remote`)."""
