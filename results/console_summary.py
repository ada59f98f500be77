"""The console summary a person reads when a run ends: the run's counts and cost, the protocol's headline metrics
with their 95 % intervals and denominators (ungraded counts included), then the small tables the protocol declares
(``Adapter.tables``: per task, difficulty, round, model, discipline or judge), built-in and a user's protocol alike.
Never the raw dotted keys of ``summary.json``: everything else is in ``summary.json``, the report and the viewer.

Every column folds a long cell (a ``model@http://host/v1`` name) onto further lines instead of cutting it, so at
80 columns no name loses characters.

``dyneval --leaderboard`` prints the leaderboards of a folder of runs here too (:func:`render_leaderboards`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from dyneval.results.headline import headlines, method_text
from dyneval.results.leaderboard import Board, cell_text, statement
from dyneval.results.numbers import cell, interval_text, number
from dyneval.results.view.adapters import adapter
from dyneval.runtime.events import usd
from dyneval.state.blocks import Table


def _table(title: str, *headers: str) -> RichTable:
    table = RichTable(title=title, title_justify="left", show_lines=False)
    for h in headers:
        table.add_column(h, overflow="fold")
    return table


def _small_table(table: Table) -> RichTable:
    """A table the protocol declares (``Adapter.tables``): its caption as the title, each cell as text."""
    out = _table(table.caption, *table.headers)
    for row in table.rows:
        out.add_row(*(c if isinstance(c, str) else cell(c) for c in row))
    return out


def _run_table(summary: dict[str, Any]) -> RichTable:
    table = _table(f"{summary['protocol']} run", "", "")  # the id as a row: a title folds where the table ends
    table.show_header = False
    if summary.get("run_id"):
        table.add_row("run", str(summary["run_id"]))
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary["status_counts"].items()))
    table.add_row("units", f"{summary['units']} ({statuses})")
    if summary.get("ungraded_verdicts"):
        table.add_row("ungraded verdicts", f"{summary['ungraded_verdicts']} (resume re-judges them)")
    if summary.get("rescored_from"):
        table.add_row(
            "re-scored from",
            f"{summary['rescored_from']} ({len(summary.get('diverged_units') or [])} "
            "unit(s) diverged: need a full re-run)",
        )
    if summary.get("interrupted"):
        table.add_row("interrupted", f"{summary['interrupted']['unfinished_units']} units unfinished (partial)")
    usage = summary["usage"]
    table.add_row("LLM calls", str(usage["calls"]))
    table.add_row("tokens", str(usage["prompt_tokens"] + usage["completion_tokens"]))
    table.add_row(
        "cost",
        usd(usage)
        + (f", {usd(usage, 'cost_saved_by_cache_usd')} saved by the cache" if usage.get("cache_hits") else ""),
    )
    return table


def _headline_table(summary: dict[str, Any]) -> RichTable | None:
    rows = headlines(summary["protocol"], summary.get("metrics") or {})
    if not rows:
        return None
    table = _table("Headline metrics", "metric", "value [95 % interval]", "denominator; interval method")
    for h in rows:
        method = method_text(h.interval).partition(", ")[2]
        table.add_row(
            h.label,
            f"{number(h.value)} {interval_text(h.interval)}",
            "; ".join(x for x in (h.denominator, method) if x),
        )
    return table


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print ``summary`` (``summary.json``'s content) for a person: run figures, headline metrics with their
    intervals and denominators, and the protocol's small tables."""
    console.print(_run_table(summary))
    headline = _headline_table(summary)
    if headline is not None:
        console.print(headline)
    for table in adapter(summary["protocol"]).tables(summary.get("metrics") or {}):
        console.print(_small_table(table))
    console.print(
        "More (every metric, smallest separable differences, per-unit drill-downs): summary.json, "
        "report.md and view.html in the run directory.",
        markup=False,
        highlight=False,
    )


def render_leaderboards(boards: list[Board], console: Console, pooled: bool = True) -> None:
    """Print each leaderboard (:mod:`results.leaderboard`): models ranked by the first headline metric, every
    metric's value with its interval (pooled over the model's runs, or its latest run's), the probability of being
    best, and how sure the order is."""
    for board in boards:
        first = board.metrics[0] if board.metrics else None
        ranking = board.ranking(first, pooled) if first else None
        table = _table(
            f"{board.protocol}, data {board.data_label} ({board.data}), judge and other models: {board.judge}",
            "rank",
            "model",
            *(m.heading + (" (lower is better)" if m.better == "lower" else "") for m in board.metrics),
            "P(best)",
            "runs",
        )
        ranked = ranking.order if ranking else []
        rows = board.cells(pooled)
        for model in [*ranked, *(m for m in rows if m not in ranked)]:
            cells = rows[model]
            place = str(ranked.index(model) + 1) if model in ranked else "-"
            best = ranking.p_best.get(model) if ranking else None
            runs = sorted({r for c in cells.values() for r in c.runs or (c.run_id,)})
            table.add_row(
                place,
                model,
                *(cell_text(cells.get(m.path)) or "-" for m in board.metrics),
                "-" if best is None else f"{best:.2f}",
                ", ".join(runs),
            )
        console.print(table)
        if first and ranking:
            console.print(statement(first, ranking, pooled), markup=False, highlight=False, soft_wrap=True)
