"""What a protocol declares for the readers of its runs (``Protocol.viewer``): its headline metrics (name, label,
definition, denominator, how the interval is computed, which way is better), the small tables the console summary
shows after them, the per-unit outcomes a comparison pairs, the unit table's outcome columns and a unit's detail
sections. The console summary, ``--fail-under``, the
report, the viewer, the comparison page, the export and the leaderboard read every protocol, built-in or a user's
own (``DYNEVAL_PROTOCOLS``), through this one declaration (docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dyneval.state.blocks import Table

#: How dyneval computes a declared metric's 95 % interval from the units' ``outcome`` values when the protocol's
#: ``summarize`` writes none: ``proportion`` = exact binomial (Clopper-Pearson) of 0/1 outcomes, ``mean`` =
#: percentile bootstrap of the mean over units (``results.stats``). None: the protocol writes its own.
IntervalMethod = Literal["proportion", "mean"]


@dataclass(frozen=True)
class Metric:
    """A headline metric: ``path`` is dotted into ``summary["metrics"]``; ``n`` (dotted) is its denominator, a
    count or a ``{"n", "ungraded"}`` object. A ``*`` in ``path`` repeats the metric for each key of that mapping
    (``{key}`` in ``label``, or ``{name}``: the entry's ``name`` field, else its key; the same key replaces ``*``
    in ``n``). ``column`` heads the metric's leaderboard column (default: ``label``; a ``*`` metric's rows are its
    keys, so its column names the measure alone); ``better`` says which way the leaderboard ranks it.
    ``interval`` with ``outcome`` (an entry of the adapter's ``outcomes``) has dyneval compute the value and its
    interval over the units that have that outcome, where the protocol's summary writes none."""

    path: str
    label: str
    definition: str
    n: str | None = None
    column: str = ""
    better: Literal["higher", "lower"] = "higher"
    interval: IntervalMethod | None = None
    outcome: str = ""

    @property
    def heading(self) -> str:
        """The metric's leaderboard column."""
        return self.column or self.label


Outcome = Callable[[dict[str, Any]], "float | None"]
#: The small tables of a run's console summary from its ``summary["metrics"]`` (a table's ``caption`` is its title;
#: a cell that is not text is shown as a number, None as "-").
SummaryTables = Callable[[dict[str, Any]], list[Table]]
Section = dict[str, Any]  # {"title", "headers", "rows"} or {"title", "text"}
Items = Callable[[dict[str, Any]], list[dict[str, Any]]]
#: Sections per unit id that need more than the unit's record (llmeval's answers are in its question bank):
#: ``(run folder, its config.json as read, the unit records) -> {unit id: sections}``.
RunSections = Callable[[Path, Any, list[dict[str, Any]]], dict[str, list[Section]]]


@dataclass(frozen=True)
class Adapter:
    metrics: tuple[Metric, ...] = ()
    #: the console summary's tables after the headline metrics (per task, round, model, judge ...)
    tables: SummaryTables = lambda metrics: []
    #: name -> the unit's numeric outcome from its record (None = no value: not graded, not finished)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    #: the unit table's outcome columns, shown right after the unit id (name -> value from the record)
    columns: dict[str, Callable[[dict[str, Any]], Any]] = field(default_factory=dict)
    #: record fields the columns and sections show (under another name): no generic column or table of their own
    replaces: tuple[str, ...] = ()
    #: detail sections shown first in a unit's drill-down, from the record and the unit's input (its plan line)
    sections: Callable[[dict[str, Any], dict[str, Any]], list[Section]] = lambda record, unit_input: []
    #: further sections read from the run folder, after ``sections`` (None: none)
    run_sections: RunSections | None = None
    #: the per-item results inside a unit's record (one export row each; ``step`` says which part of the unit)
    items: Items = lambda record: []
    #: the role whose model a leaderboard row names for a metric without ``*`` (a ``*`` metric's rows are its keys)
    subject: str = "target"
    #: parameters naming the models under test (ATAD's ``--evaluate``): not part of a run's set-up on the leaderboard
    subject_params: tuple[str, ...] = ()
