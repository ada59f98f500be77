"""The console summary a person reads when a run ends: the run's counts and cost, the protocol's headline metrics
with their 95 % intervals and denominators (ungraded counts included), then one or two small tables (per task,
difficulty, round, model, discipline or judge). Never the raw dotted keys of ``summary.json``: everything else is
in ``summary.json``, the report and the viewer.

Every column folds a long cell (a ``model@http://host/v1`` name) onto further lines instead of cutting it, so at
80 columns no name loses characters.

``dyneval --leaderboard`` prints the leaderboards of a folder of runs here too (:func:`render_leaderboards`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from dyneval.results.headline import headlines, interval_text, method_text, number
from dyneval.results.leaderboard import Board, cell_text, statement
from dyneval.runtime.events import usd
from dyneval.state.atad import TASKS


def _table(title: str, *headers: str) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for h in headers:
        table.add_column(h, overflow="fold")
    return table


def _cell(x: Any) -> str:
    return "-" if x is None else number(x)


def _run_table(summary: dict[str, Any]) -> Table:
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


def _headline_table(summary: dict[str, Any]) -> Table | None:
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


# -- one or two small tables per protocol -------------------------------------------------------------------


def _judgeagent(m: dict[str, Any]) -> list[Table]:
    out = []
    rounds = m.get("dynamic_scores") or {}
    if rounds:
        table = _table("Running score per round (Algorithm 1)", "after", "score", "graded", "ungraded")
        for key, value in rounds.items():
            den = (m.get("dynamic_denominators") or {}).get(key) or {}
            table.add_row(
                "base questions" if key == "base" else f"round {key.lstrip('@')}",
                _cell(value),
                str(den.get("n", "")),
                str(den.get("ungraded", "")),
            )
        out.append(table)
    validation = {k: v for k, v in (m.get("validation") or {}).items() if k != "overall"}
    if validation:
        table = _table("Validation per difficulty (Algorithm 2)", "difficulty", "n", "ACC1", "ACC2", "CR", "CtE")
        for label, v in validation.items():
            table.add_row(label, str(v["n"]), *[_cell(v.get(k)) for k in ("acc1", "acc2", "cr", "cte")])
        out.append(table)
    return out


def _atad(m: dict[str, Any]) -> list[Table]:
    if "table1" in m:  # --evaluate: per evaluated model
        table = _table("Accuracy per evaluated model (Table 1, %)", "model", "accuracy [95 % interval]", "answers")
        for model, t in m["table1"].items():
            interval = (m.get("intervals") or {}).get(f"table1.{model}.avg")
            table.add_row(model, f"{_cell(t.get('avg'))} {interval_text(interval)}", str(t.get("n", 0)))
        return [table]
    table = _table("Problems per task", "task", "name", "finalized", "discarded")
    for task, v in (m.get("per_task") or {}).items():
        table.add_row(task, TASKS[task].name if task in TASKS else task, str(v["finalized"]), str(v["discarded"]))
    return [table]


def _interview(m: dict[str, Any]) -> list[Table]:
    n_max = int(m.get("n_max") or 0)
    by_task = m.get("by_task") or {}
    if not by_task:
        return []
    table = _table("Per task", "task", "sessions", "judge", *[f"Score@{n}" for n in range(1, n_max + 1)])
    for task, t in by_task.items():
        table.add_row(task, str(t["sessions"]), _cell(t.get("judge")), *[_cell(x) for x in t["score_at_n"]])
    return [table]


def _llmeval(m: dict[str, Any]) -> list[Table]:
    out = []
    if m.get("leaderboard"):
        table = _table("Per model (every model the bank has judged)", "model", "S (0-100)", "R (%)", "sessions")
        for r in m["leaderboard"]:
            table.add_row(str(r["model"]), _cell(r.get("S")), _cell(r.get("R")), str(r.get("sessions")))
        out.append(table)
    if m.get("disciplines"):
        table = _table("Per discipline (mean stars / 3 x 10)", "discipline", "score out of 10")
        for d, v in m["disciplines"].items():
            table.add_row(d, _cell(v))
        out.append(table)
    return out


#: judgecheck measures shown per judge, first found: the pairwise mode's names, then the label modes'.
_ACCURACY = (
    ("accuracy_mean", "accuracy (mean of both orders)"),
    ("accuracy_original", "accuracy"),
    ("accuracy", "accuracy"),
)
_KAPPA = (("kappa_original", "kappa"), ("kappa", "kappa"))


def _measure(measures: dict[str, Any], names: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    for key, label in names:
        if key in measures:
            v = measures[key]
            low, high = v.get("low"), v.get("high")
            span = f" [{number(low)}, {number(high)}]" if low is not None and high is not None else ""
            return label, f"{_cell(v.get('value'))}{span} (n={v.get('n')}, {v.get('ungraded', 0)} ungraded)"
    return names[-1][1], "-"


def _judgecheck(m: dict[str, Any]) -> list[Table]:
    raters = m.get("raters") or {}
    if not raters:
        return []
    first = next(iter(raters.values())).get("measures") or {}
    acc_label, _ = _measure(first, _ACCURACY)
    kappa_label, _ = _measure(first, _KAPPA)
    table = _table(
        f"Per judge ({m.get('judge')} verdicts against the human labels; 95 % bootstrap intervals)",
        "judge",
        "items",
        f"{acc_label} [95 %]",
        f"{kappa_label} [95 %]",
    )
    for name, r in raters.items():
        measures = r.get("measures") or {}
        table.add_row(
            str(r.get("model") or name),
            str(r.get("items")),
            _measure(measures, _ACCURACY)[1],
            _measure(measures, _KAPPA)[1],
        )
    return [table]


TABLES: dict[str, Callable[[dict[str, Any]], list[Table]]] = {
    "judgeagent": _judgeagent,
    "atad": _atad,
    "interview": _interview,
    "llmeval": _llmeval,
    "judgecheck": _judgecheck,
}


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print ``summary`` (``summary.json``'s content) for a person: run figures, headline metrics with their
    intervals and denominators, and the protocol's small tables."""
    console.print(_run_table(summary))
    headline = _headline_table(summary)
    if headline is not None:
        console.print(headline)
    for table in TABLES.get(summary["protocol"], lambda m: [])(summary.get("metrics") or {}):
        console.print(table)
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
