"""What a protocol gives the batch runner: its units, graph, context, results, summary and report.

A protocol module under ``protocols/`` subclasses :class:`Protocol`; the graph
itself stays in ``graphs/<name>.py`` (``builder`` + ``graph``).
"""

from __future__ import annotations

import argparse
import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from langgraph.graph import StateGraph
from rich.console import Console

from runtime.report import Block
from runtime.services import Services
from state.config import RunConfig
from state.context import BaseContext


#: Statuses that end a unit for good; anything else is redone on resume.
FINAL_STATUSES = frozenset({"ok", "model_error"})
#: Statuses whose record holds the unit's results: ``ungraded`` = the graph reached END but some verdicts are
#: ungraded (a judge failed after retries and one repair); those units are re-judged on resume.
RESULT_STATUSES = frozenset({"ok", "ungraded"})


def with_results(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The unit records that hold results (status ``ok`` or ``ungraded``)."""
    return [r for r in records if r.get("status") in RESULT_STATUSES]


@dataclass
class Unit:
    """One unit of work = one graph thread (``id`` is the thread id)."""

    id: str
    input: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """What a protocol sees of the current run."""

    config: RunConfig
    run_dir: Path
    services: Services
    console: Console
    resumed: bool = False

    @property
    def params(self) -> dict[str, Any]:
        return self.config.params


class Protocol(ABC):
    """Base class of the four protocols (and of any a user adds)."""

    name: ClassVar[str]
    description: ClassVar[str]
    context_cls: ClassVar[type[BaseContext]] = BaseContext
    #: Roles whose endpoints pre-flight pings before any tokens are spent.
    roles: ClassVar[tuple[str, ...]] = ("target", "evaluator")

    # -- command line --------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """Add this protocol's own flags (their ``dest`` become ``config.params`` keys)."""

    # -- the batch -----------------------------------------------------------------------------
    @abstractmethod
    def builder(self) -> StateGraph:
        """The uncompiled graph (``graphs.<name>.builder``)."""

    @abstractmethod
    def plan(self, run: Run) -> list[Unit]:
        """Load and validate inputs (raise ``InputError``) and list the units; no LLM calls."""

    def expected_calls(self, run: Run) -> str:
        """Expected LLM calls per unit, for ``--dry-run`` (a short phrase)."""
        return "unknown"

    def prepare(self, run: Run, units: list[Unit]) -> None:
        """Work before the units run (e.g. build a knowledge graph); skipped by --dry-run."""

    def custom_run(self, run: Run) -> bool:
        """Handle modes that are not a unit batch (``--serve``, ``--evaluate`` ...); True = handled."""
        return False

    def context(self, run: Run) -> BaseContext:
        """The graph context: protocol params that name context fields, plus live services."""
        names = {f.name for f in dataclasses.fields(self.context_cls)}
        values = {k: v for k, v in run.params.items() if k in names}
        values.update({role: ref for role, ref in run.config.roles.items() if role in names})
        return self.context_cls(**values, seed=run.config.seed, run_dir=str(run.run_dir), services=run.services)

    def on_interrupt(self, run: Run, unit: Unit, value: Any) -> Any:
        """Answer a graph ``interrupt()`` (e.g. ask a human); the return value resumes the graph."""
        raise RuntimeError(f"{self.name}: unit {unit.id} paused for input, but this run cannot answer it")

    def ungraded(self, state: dict[str, Any]) -> int:
        """How many verdicts in this graph state are ungraded (a judge failed after retries and one repair).

        A unit that reached END with ungraded verdicts is recorded as ``ungraded``, never as final; on
        resume it is re-judged from the checkpoint before its first ungraded verdict.
        """
        return 0

    @abstractmethod
    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        """The JSON record of a finished unit, from its final graph state."""

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Protocol metrics over all unit records (those with status ``ok`` hold results)."""
        return {}

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        """Report blocks (tables, figures, text) after the common header."""
        return []
