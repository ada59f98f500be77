"""What a protocol gives the batch runner: its units, graph, context, results, summary and report.

A protocol module under ``protocols/`` subclasses :class:`Protocol`; the graph
itself stays in ``graphs/<name>.py`` (``builder`` + ``graph``). Its parameters are
declared once, with :func:`state.context.described`: the graph's options as fields
of ``context_cls``, the few batch-only ones (input files, modes) as fields of
``batch_cls``; the command-line flags are generated from both.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Console

from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.services import Services
from dyneval.state.blocks import Block
from dyneval.state.config import RunConfig
from dyneval.state.context import BaseContext, Option, options
from dyneval.state.errors import InputError
from dyneval.state.viewer import Adapter

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph


#: Statuses that end a unit for good; anything else is redone on resume. ``diverged``: in a re-score
#: (``--rescore``), the new judge led the unit to a request its source run never made (:mod:`results.rescore`).
#: The status of a unit whose path under the new judge left the source run's recorded requests.
DIVERGED = "diverged"
FINAL_STATUSES = frozenset({"ok", "model_error", DIVERGED})
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


@dataclass(frozen=True)
class TrialVerdict:
    """One binary verdict a unit's record holds, as ``--trials`` repeats it (:mod:`results.trials`): ``subject``
    the model or agent under test that gave the answer, ``item`` what each trial asks again (a question, a
    problem), ``cluster`` the independent unit the item belongs to (items of one JudgeAgent batch share its
    topic), ``correct`` None for an ungraded verdict."""

    subject: str
    cluster: str
    item: str
    correct: bool | None


@dataclass
class Run:
    """What a protocol sees of the current run. ``executor`` is where this session's units run: every batch the
    session executes, a mode's own (ATAD's ``--evaluate``) included, runs there."""

    config: RunConfig
    run_dir: Path
    services: Services
    console: Console
    executor: ExecutorChoice
    resumed: bool = False

    def __post_init__(self) -> None:
        if self.services.console is None:
            self.services.console = self.console  # the services' slow steps (the embedded model's start) show here

    @property
    def params(self) -> dict[str, Any]:
        return self.config.params


class Protocol(ABC):
    """Base class of the four protocols (and of any a user adds)."""

    name: ClassVar[str]
    description: ClassVar[str]
    context_cls: ClassVar[type[BaseContext]] = BaseContext
    #: A dataclass of the batch-only options (``described`` fields), or ``None``.
    batch_cls: ClassVar[type | None] = None
    #: Roles whose endpoints pre-flight pings before any tokens are spent (a run's own: :meth:`roles_in`).
    roles: ClassVar[tuple[str, ...]] = ("target", "evaluator")
    #: Roles whose output is a verdict on another role's output: what ``--rescore`` asks again (every other role
    #: is replayed from the source run). Empty = the protocol cannot be re-scored.
    judge_roles: ClassVar[tuple[str, ...]] = ()
    #: For a re-score's report: which metrics are re-scored as-is and which depend on the verdicts' path.
    rescore_note: ClassVar[str] = ""
    #: Whether the protocol keeps vectors in Chroma: a ``--chroma-url`` server is reached before the run starts.
    uses_chroma: ClassVar[bool] = False
    #: What the readers of its runs show (:class:`state.viewer.Adapter`): headline metrics with how their intervals
    #: are computed (console summary, report, ``--fail-under``, leaderboard), comparison outcomes, viewer sections.
    viewer: ClassVar[Adapter] = Adapter()

    def databases(self, run: Run) -> dict[str, str]:
        """Databases ``run`` opens besides its checkpoints, by the flag naming each (a SQLite file or a PostgreSQL
        DSN): a server among them is reached before the run starts (:mod:`runtime.reach`)."""
        return {}

    def roles_in(self, run: Run) -> tuple[str, ...]:
        """The roles ``run`` calls: the class's ``roles`` unless one of the run's settings leaves a role unused. The
        cost budget's check, the pre-flight pings, the smoke-test warning, the plan and the summary's models all ask
        this, so no model is priced, pinged or shown for a role the run never calls."""
        return type(self).roles

    def subjects(self, run: Run) -> list[str]:
        """The models (or agents) under test in ``run``, by reference: the target and student roles it calls
        (ATAD's ``--evaluate`` list names its own)."""
        called = self.roles_in(run)
        return list(dict.fromkeys(run.config.role_ref(r) for r in ("target", "student") if r in called))

    # -- parameters ----------------------------------------------------------------------------
    @classmethod
    def options(cls) -> list[Option]:
        """Every declared parameter: the context's fields, then the batch-only ones."""
        return options(cls.context_cls) + options(cls.batch_cls)

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """One flag per declared parameter with ``cli`` (its ``dest`` becomes a ``config.params`` key)."""
        for option in cls.options():
            if option.cli:
                add_flag(group, option)

    def check_params(self, params: dict[str, Any]) -> None:
        """The declared checks of every given parameter (:class:`InputError` naming the flag)."""
        for option in self.options():
            option.validate(params.get(option.name))

    # -- the batch -----------------------------------------------------------------------------
    @abstractmethod
    def builder(self) -> StateGraph:
        """The uncompiled graph (``graphs.<name>.builder``)."""

    @abstractmethod
    def plan(self, run: Run) -> list[Unit]:
        """Load and validate inputs (raise ``InputError``) and list the units; no LLM calls."""

    def within_limit(self, units: list[Unit], limit: int) -> list[Unit]:
        """The units ``--limit N`` keeps: the first ``N`` of the plan (a protocol whose units come in groups that
        only make sense whole keeps whole groups instead, and says so in its ``--limit`` note)."""
        return units[:limit]

    def expected_calls(self, run: Run) -> str:
        """Expected LLM calls per unit, for ``--dry-run`` (a short phrase)."""
        return "unknown"

    def prepare(self, run: Run, units: list[Unit]) -> None:  # noqa: B027 (optional hook: most protocols prepare nothing)
        """Work before the units run (e.g. build a knowledge graph); skipped by --dry-run."""

    def custom_run(self, run: Run) -> bool:
        """Handle modes that are not a unit batch (``--serve``, ``--evaluate`` ...); True = handled."""
        return False

    def local_mode(self, run: Run) -> str | None:
        """The flag of a mode ``run`` asks for that works in this process only (it has no units to hand to an
        executor, as llmeval's ``--serve`` and JudgeAgent's ``--build-kb-only``, or its units need this process,
        as interview's human interviewee its terminal), or None: ``--executor ray`` refuses it rather than run it
        here."""
        return None

    def leaves_no_run(self, run: Run) -> bool:
        """True for a mode that only prints (llmeval's ``--admin-token``): like a dry run, it leaves no run folder."""
        return False

    def context(self, run: Run) -> BaseContext:
        """The graph context: protocol params that name context fields (checked), plus live services."""
        self.check_params(run.params)
        names = {f.name for f in dataclasses.fields(self.context_cls)}
        values = {k: v for k, v in run.params.items() if k in names}
        values.update({role: ref for role, ref in run.config.roles.items() if role in names})
        return self.context_cls(**values, seed=run.config.seed, run_dir=str(run.run_dir), services=run.services)

    def batch(self, run: Run) -> Any:
        """The batch-only options (``batch_cls``): the given params (checked) over the declared defaults."""
        self.check_params(run.params)
        assert self.batch_cls is not None, f"{self.name} declares no batch options"
        names = {f.name for f in dataclasses.fields(self.batch_cls)}
        return self.batch_cls(**{k: v for k, v in run.params.items() if k in names and v is not None})

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

    def trials_refused(self, run: Run) -> str | None:
        """Why ``--trials`` cannot repeat ``run``'s units (their records hold no binary verdict to count pass^k
        and the flip rate on), or None when :meth:`trial_verdicts` gives them."""
        return f"{self.name}'s units hold no binary verdict per item (Protocol.trial_verdicts) to count pass^k on"

    def trial_verdicts(self, record: dict[str, Any]) -> list[TrialVerdict]:
        """The binary verdicts of one unit record that holds results (``ok`` or ``ungraded``), for ``--trials``."""
        return []

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Protocol metrics over all unit records (those with status ``ok`` hold results); with ``--trials``, the
        records of the first trial (a run without it gives the same), all trials going to pass^k."""
        return {}

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        """Report blocks (tables, figures, text) after the common header."""
        return []


def add_flag(group: argparse._ArgumentGroup, option: Option) -> None:
    """The command-line flag of a declared parameter: type, choices and help with the real default.

    Its argparse default stays ``None`` (not given), so a config file or environment value is not
    overridden by a flag the user did not pass.
    """
    kind, default = option.type, option.default
    kwargs: dict[str, Any] = {"dest": option.name, "default": None, "help": option.description.replace("%", "%%")}
    if kind is bool:
        negatable = default or option.negatable
        kwargs["action"] = argparse.BooleanOptionalAction if negatable else "store_true"
        if negatable:
            kwargs["help"] += f" (default: {'on' if default else 'off'})"
    else:
        if typing.get_origin(kind) is list:
            kwargs["nargs"] = "+"
            kind = typing.get_args(kind)[0]
        if kind in (int, float):
            kwargs["type"] = kind
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
        if option.metavar:
            kwargs["metavar"] = option.metavar
        notes = [f"default: {default}"] if default not in (None, "") else []
        notes += [bounds] if (bounds := _bounds(option)) is not None else []
        if notes:
            kwargs["help"] += f" ({'; '.join(notes)})"
    group.add_argument(option.flag, **kwargs)


def _bounds(option: Option) -> str | None:
    """The declared range of a numeric parameter as its help states it, or ``None``."""
    low, high = option.minimum, option.maximum
    fmt = "{:g}".format
    if low is not None and high is not None:
        return f"{fmt(low)} to {fmt(high)}"
    if high is not None:
        return f"at most {fmt(high)}"
    return f"at least {fmt(low)}" if low is not None else None


#: The protocols by name -> ``"module:Class"`` (a :class:`Protocol` subclass). A user's own join through
#: ``DYNEVAL_PROTOCOLS="name=package.module:Class,other=..."`` (docs/plugins.md). It lives beside the base class
#: so that everything reading a run (the ``results`` layer) finds a protocol's :attr:`Protocol.viewer` by name.
REGISTRY: dict[str, str] = {
    "atad": "dyneval.protocols.atad:AtadProtocol",
    "judgeagent": "dyneval.protocols.judgeagent:JudgeAgentProtocol",
    "interview": "dyneval.protocols.interview:InterviewProtocol",
    "llmeval": "dyneval.protocols.llmeval.protocol:LLMEvalProtocol",
    "judgecheck": "dyneval.protocols.judgecheck:JudgeCheckProtocol",
}
for _entry in filter(None, os.environ.get("DYNEVAL_PROTOCOLS", "").split(",")):
    _name, _, _target = _entry.partition("=")
    REGISTRY[_name.strip()] = _target.strip()


def protocol_class(name: str) -> type[Protocol]:
    """The class registered as ``name`` (:data:`REGISTRY`), imported on first use."""
    if name not in REGISTRY:
        raise InputError(f"unknown protocol {name!r}; choose one of {', '.join(REGISTRY)}", field="--protocol")
    module_name, _, cls_name = REGISTRY[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InputError(f"protocol {name!r} is not implemented yet", field="--protocol") from None
        raise
    cls: type[Protocol] = getattr(module, cls_name)
    return cls
