"""ATAD evaluation phase (section 2.2.3, label g) and quality review (section 4.4).

:func:`run_evaluation` is called from ``AtadProtocol.custom_run`` when
``--evaluate`` or ``--review`` is given. It plans evaluation units over the
benchmark files and hands them to the ordinary batch runner with
:class:`AtadEvalProtocol` (graph ``graphs/atad_eval.py``): concurrency,
checkpoints, ``--resume`` and the usage accounting come for free.

Units (ids are stable, so a resumed evaluation skips finished work):
``ans-m<i>-b<j>-<item>-final`` and, when the base problem differs from the
final one, ``ans-m<i>-b<j>-<item>-base``; ``rev-r<i>-b<j>-<item>`` for reviews.

Outputs (``summary.json`` metrics and the report):
Table 1 (accuracy per task T1-T7 and average, averaged over benchmark files),
Table 2 (base vs final accuracy per benchmark file), Table 5 (per generator
file, per task) with the generator x evaluated-model matrix, Table 3 (reviewer
scores and approval, and accuracy, with vs without orchestrator) and Figure 4
(accuracy vs number of samples per task, band = std of task-wise deviations from
the full benchmark). Unparseable answers count as wrong; ``infra_error`` units
never enter any accuracy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any

from rich.table import Table as RichTable

from dyneval.nodes.atad.problems import problem_key
from dyneval.prompts import load_prompt
from dyneval.protocols.atad.benchmark import benchmark_items, earlier_copy
from dyneval.protocols.atad.metrics import (
    average_tables,
    consistency_curve,
    curve_sizes,
    evaluation_intervals,
    per_task_accuracy,
    review_summary,
)
from dyneval.results.headline import report_blocks as headline_blocks
from dyneval.results.report import bar_chart, figure_path, heatmap, line_chart
from dyneval.runtime.protocol import RESULT_STATUSES, Protocol, Run, TrialVerdict, Unit, with_results
from dyneval.samples import sample, shown
from dyneval.state.agent import is_agent_ref
from dyneval.state.atad import TASK_IDS, EvalContext
from dyneval.state.blocks import Block, Figure, Table, Text
from dyneval.state.errors import InfraError, InputError

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph


def _fmt(v: Any) -> Any:
    return round(v, 2) if isinstance(v, float) else ("-" if v is None else v)


def _file_label(first: dict[str, Any], path: str) -> str:
    """Column label of a benchmark file from its first item: generator (teacher) model, '(no orch.)' for the
    ablation."""
    label = (first.get("generator") or {}).get("teacher") or path
    return label + " (no orch.)" if not first.get("orchestrator", True) else label


def _distinct_labels(labels: list[str]) -> list[str]:
    """``labels`` with a label that several files share numbered (``label #2``)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for label in labels:
        seen[label] += 1
        out.append(label if labels.count(label) == 1 else f"{label} #{seen[label]}")
    return out


#: What --evaluate / --review answer without --benchmark: seven hand-written problems, one per task type.
SAMPLE_BENCHMARK = sample("atad", "benchmark.jsonl")


#: The fields of a finalized item that the plan reads: a record's other fields (its generation history, its
#: validations) are not kept while a benchmark is read, so a large benchmark is never held whole.
PLANNED = ("id", "task", "problem", "base_problem", "orchestrator")


def distinct_finalized(items: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The finalized items of one benchmark (their :data:`PLANNED` fields), each problem once (its first copy in
    file order), and the copies left out (copy id -> the id kept): identical problems under different ids are one
    problem, so Table 1's denominator counts distinct problems (seed 003, section 4)."""
    kept: dict[str, str] = {}
    distinct, copies = [], {}
    for item in items:
        if item["item_status"] != "finalized":
            continue
        first = earlier_copy(kept, item["id"], item["task"], item["problem"])
        if first is None:
            distinct.append({k: item[k] for k in PLANNED if k in item})
        else:
            copies[item["id"]] = first
    return distinct, copies


def plan_units(params: dict[str, Any], warn: Callable[[str], None] | None = None) -> list[Unit]:
    """Evaluation and review units over the benchmark files (no LLM calls); ``warn`` is told, in one line, how
    many problems repeat an earlier one of their file (each is evaluated once)."""
    paths = list(params.get("benchmark") or [str(SAMPLE_BENCHMARK)])
    names = list(params.get("benchmark") or [shown(SAMPLE_BENCHMARK)])  # as given, the sample as samples/...
    models = list(params.get("evaluate") or [])
    reviewers = list(params.get("review") or [])
    files, labels = [], []
    for path, name in zip(paths, names):
        items = benchmark_items(path, params.get("fields"))  # read an item at a time
        first = next(items)  # a file holds one record at least (else an InputError)
        labels.append(_file_label(first, name))
        files.append(distinct_finalized(chain([first], items)))
    labels = _distinct_labels(labels)
    units: list[Unit] = []
    merged: list[str] = []
    for bi, (finalized, copies) in enumerate(files):
        if not finalized:
            raise InputError(
                "the benchmark holds no finalized item to evaluate", file=str(paths[bi]), field="--benchmark"
            )
        copies_of: dict[str, list[str]] = defaultdict(list)
        for copy, kept in copies.items():
            copies_of[kept].append(copy)
        merged += [f"{names[bi]}: {copy} = {first}" for copy, first in copies.items()]
        for pos, item in enumerate(finalized):
            common = {
                "bench": bi,
                "bench_label": labels[bi],
                "bench_file": names[bi],
                "item": item["id"],
                "task": item["task"],
                "pos": pos,
                "problem_key": problem_key(item["task"], item["problem"]),
                "orchestrator": bool(item.get("orchestrator", True)),
            }
            same_as = sorted(copies_of.get(item["id"], []))
            if same_as:
                common["copies"] = same_as
            same = item["base_problem"] == item["problem"]
            for mi, model in enumerate(models):
                versions = ["final"] if same else ["final", "base"]
                for version in versions:
                    problem = item["problem"] if version == "final" else item["base_problem"]
                    units.append(
                        Unit(
                            id=f"ans-m{mi}-b{bi}-{item['id']}-{version}",
                            input={"kind": "answer", "model": model, "task": item["task"], "problem": problem},
                            meta={
                                **common,
                                "kind": "answer",
                                "model": model,
                                "version": version,
                                "base_is_final": same,
                            },
                        )
                    )
            for ri, reviewer in enumerate(reviewers):
                units.append(
                    Unit(
                        id=f"rev-r{ri}-b{bi}-{item['id']}",
                        input={"kind": "review", "model": reviewer, "task": item["task"], "problem": item["problem"]},
                        meta={**common, "kind": "review", "model": reviewer},
                    )
                )
    if merged and warn is not None:
        listed = ", ".join(merged[:5]) + (f" and {len(merged) - 5} more" if len(merged) > 5 else "")
        warn(
            f"{len(merged)} problem(s) of --benchmark repeat an earlier problem of their file under another id "
            f"(whitespace and case aside); each problem is evaluated once, under its first id: {listed}"
        )
    return units


def _warner(run: Run) -> Callable[[str], None]:
    """How the plan's warning reaches the console."""
    return lambda line: run.console.print(line, style="yellow", markup=False)


class AtadEvalProtocol(Protocol):
    """The evaluation phase as a batch of (model, problem) units; driven by ``AtadProtocol``."""

    name = "atad"
    description = "ATAD evaluation phase: accuracy of models on generated benchmarks (Tables 1, 2, 3, 5; Figure 4)"
    context_cls = EvalContext
    roles = ()

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.atad_eval import builder

        return builder

    def __init__(self, planned: list[Unit] | None = None) -> None:
        self._planned = planned  # the plan run_evaluation made to check the inputs before any ping

    def plan(self, run: Run) -> list[Unit]:
        """The units (the plan made before the pings, handed over once, else a new one)."""
        planned, self._planned = self._planned, None
        return planned if planned is not None else plan_units(run.params, warn=_warner(run))

    def expected_calls(self, run: Run) -> str:
        return "1 (2 with a structured-output repair)"

    def subjects(self, run: Run) -> list[str]:
        return list(run.params.get("evaluate") or [])

    def trials_refused(self, run: Run) -> str | None:
        return None

    def trial_verdicts(self, record: dict[str, Any]) -> list[TrialVerdict]:
        """An answer unit's verdict (an unparseable answer is wrong, as in Table 1), by the model that gave it;
        the item is the problem version answered, its copies merged as in Table 1; reviews have none."""
        meta = record["meta"]
        if meta["kind"] != "answer":
            return []
        problem = f"{meta['bench']}:{meta['item']}"
        return [TrialVerdict(meta["model"], problem, f"{problem}:{meta['version']}", bool(record["correct"]))]

    def ungraded(self, state: dict[str, Any]) -> int:
        """A review unit whose reviewer gave no usable review (after retries and one repair) is ungraded.

        An answer unit is never ungraded: the evaluated model is the one under test and its answer is compared
        in code, so an unusable answer is that model's wrong answer (counted in ``parse_errors``).
        """
        return int(state.get("kind") == "review" and state.get("review") is None and bool(state.get("parse_error")))

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "correct": state.get("correct"),
            "predicted": state.get("predicted"),
            "explanation": state.get("explanation"),
            "parse_error": state.get("parse_error"),
            "review": state.get("review"),
        }

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        return evaluation_metrics(records)

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        return evaluation_report(run, summary["metrics"])


def evaluation_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """All evaluation tables from the unit records that hold results (``ok`` and ``ungraded``); an ungraded
    review is in no Table 3 mean and counted in ``reviews_ungraded``."""
    ok = with_results(records)
    answers = [r for r in ok if r["meta"]["kind"] == "answer"]
    reviews = [r for r in ok if r["meta"]["kind"] == "review"]
    models = list(dict.fromkeys(r["meta"]["model"] for r in records if r["meta"]["kind"] == "answer"))
    benches = sorted({(r["meta"]["bench"], r["meta"]["bench_label"], r["meta"]["orchestrator"]) for r in records})
    final: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    base: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for r in answers:
        m = r["meta"]
        (final if m["version"] == "final" else base)[(m["model"], m["bench"])][m["item"]] = r
    per_file: dict[str, dict[str, Any]] = {}
    table2: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    table1: dict[str, Any] = {}
    answered: dict[str, list[tuple[str, str, bool, str]]] = {}  # (file, task, correct, problem) of final problems
    for model in models:
        tables = []
        for bi, label, _ in benches:
            fin = final.get((model, bi), {})
            rows = [(r["meta"]["task"], bool(r["correct"])) for r in fin.values()]
            answered.setdefault(model, []).extend(
                (label, r["meta"]["task"], bool(r["correct"]), r["meta"].get("problem_key") or f"{label}#{item}")
                for item, r in fin.items()
            )  # a run planned before problem keys existed: each item its own problem
            table = per_task_accuracy(rows)
            per_file.setdefault(label, {})[model] = table
            tables.append(table)
            base_rows = []
            for item, r in fin.items():
                if r["meta"]["base_is_final"]:
                    base_rows.append((r["meta"]["task"], bool(r["correct"])))
                elif item in base.get((model, bi), {}):
                    base_rows.append((r["meta"]["task"], bool(base[(model, bi)][item]["correct"])))
            table2.setdefault(model, {})[label] = {
                "base": per_task_accuracy(base_rows)["avg"],
                "final": table["avg"],
                "n": table["n"],
            }
            by_task: dict[str, list[bool]] = defaultdict(list)
            for r in sorted(fin.values(), key=lambda r: r["meta"]["pos"]):
                by_task[r["meta"]["task"]].append(bool(r["correct"]))
            longest = max((len(v) for v in by_task.values()), default=0)
            curves.setdefault(model, {})[label] = consistency_curve(by_task, curve_sizes(longest))
        table1[model] = average_tables([t for t in tables if t["n"]])
    table3: dict[str, Any] = {"reviews": {}, "performance": {}}
    for reviewer in dict.fromkeys(r["meta"]["model"] for r in reviews):
        for orch in (False, True):
            rs = [r["review"] for r in reviews if r["meta"]["model"] == reviewer and r["meta"]["orchestrator"] == orch]
            if rs:
                table3["reviews"].setdefault(reviewer, {})["with" if orch else "without"] = review_summary(rs)
    for model in models:
        for orch in (False, True):
            tabs = [per_file[label][model] for bi, label, o in benches if o == orch and per_file[label][model]["n"]]
            if tabs:
                table3["performance"].setdefault(model, {})["with" if orch else "without"] = average_tables(tabs)["avg"]
    return {
        "models": models,
        "benchmarks": [label for _, label, _ in benches],
        "table1": table1,
        "table2": table2,
        "table5": per_file,
        "table3": table3,
        "consistency": curves,
        "parse_errors": sum(1 for r in answers if r.get("parse_error")),
        "answers": len(answers),
        "reviews": len(reviews),
        "reviews_ungraded": sum(1 for r in reviews if r.get("review") is None),
        "excluded_infra_errors": sum(1 for r in records if r["status"] not in RESULT_STATUSES),
        **evaluation_intervals(answered),
    }


def _task_rows(tables: dict[str, dict[str, Any]]) -> list[list[Any]]:
    return [
        [name, *[_fmt(t.get(k)) for k in TASK_IDS], _fmt(t.get("avg")), t.get("n", 0)] for name, t in tables.items()
    ]


def evaluation_report(run: Run, m: dict[str, Any]) -> list[Block]:
    headers = ["model", *TASK_IDS, "Avg.", "n"]
    blocks: list[Block] = [
        Text(
            f"{m['answers']} answers ({m['parse_errors']} unparseable, counted wrong: the evaluated model gave no "
            f"usable answer), {m['reviews']} reviews ({m.get('reviews_ungraded', 0)} ungraded: the reviewer gave no "
            f"usable review; in no mean, redone by --resume); {m['excluded_infra_errors']} units with endpoint errors "
            "excluded from every metric. Accuracy in %."
        ),
        Text(
            "What this run measured: each evaluated model's answers, scored in code against the benchmark's "
            "answer keys (no LLM judge is involved, so the embedded model is measured honestly here). Generating "
            "a benchmark of your own needs a teacher and an orchestrator much stronger than the embedded 135M "
            "model: dyneval --protocol atad --teacher MODEL@URL --orchestrator MODEL@URL --per-task 2, then "
            "dyneval --protocol atad --evaluate local MODEL@URL --benchmark runs/RUN_ID/benchmark.jsonl"
        ),
        *headline_blocks("atad", m),
    ]
    if m["models"]:
        blocks.append(
            Table(
                headers,
                _task_rows(m["table1"]),
                caption="Table 1: accuracy per task on the final problems (mean over benchmark files)",
            )
        )
        vals = [[m["table1"][mo].get(t) or 0.0 for t in TASK_IDS] for mo in m["models"]]
        blocks.append(
            Figure(
                heatmap(
                    figure_path(run.run_dir, "atad_task_heatmap"),
                    m["models"],
                    list(TASK_IDS),
                    vals,
                    title="Accuracy per task (%)",
                ),
                "Per-task accuracy",
            )
        )
        rows = [
            [
                mo,
                label,
                _fmt(v["base"]),
                _fmt(v["final"]),
                _fmt(v["base"] - v["final"]) if v["base"] is not None and v["final"] is not None else "-",
            ]
            for mo, files in m["table2"].items()
            for label, v in files.items()
        ]
        blocks.append(
            Table(
                ["model", "benchmark", "base", "final", "drop"],
                rows,
                caption="Table 2: accuracy on base vs final problems",
            )
        )
        labels = [f"{mo} | {label}" for mo, files in m["table2"].items() for label in files]
        drops = [(v["base"] or 0.0) - (v["final"] or 0.0) for files in m["table2"].values() for v in files.values()]
        blocks.append(
            Figure(
                bar_chart(
                    figure_path(run.run_dir, "atad_base_final_drop"),
                    labels,
                    drops,
                    title="Base -> final accuracy drop",
                    ylabel="percentage points",
                ),
                "Accuracy drop from base to final problems",
            )
        )
        for label, tables in m["table5"].items():
            blocks.append(Table(headers, _task_rows(tables), caption=f"Table 5: benchmark generated by {label}"))
        if len(m["benchmarks"]) > 1:
            matrix = [[mo, *[_fmt(m["table5"][b][mo]["avg"]) for b in m["benchmarks"]]] for mo in m["models"]]
            blocks.append(
                Table(
                    ["evaluated model", *m["benchmarks"]],
                    matrix,
                    caption="Generator x evaluated model: average accuracy",
                )
            )
        for model, files in m["consistency"].items():
            for label, points in files.items():
                if len(points) < 2:
                    continue
                avg = [p["avg"] for p in points]
                band = ([p["avg"] - p["std"] for p in points], [p["avg"] + p["std"] for p in points])
                path = figure_path(run.run_dir, f"atad_consistency_{abs(hash((model, label))) % 10**8}")
                blocks.append(
                    Figure(
                        line_chart(
                            path,
                            {model: avg},
                            x=[p["n"] for p in points],
                            band={model: band},
                            title=f"Consistency on {label}",
                            xlabel="samples per task",
                            ylabel="avg accuracy (%)",
                        ),
                        f"Figure 4: {model} on {label}; band = std of task-wise deviations from the full benchmark",
                    )
                )
    t3 = m["table3"]
    if t3["reviews"] or any(len(v) > 1 for v in t3["performance"].values()):
        rows = []
        for name in dict.fromkeys([*t3["performance"], *t3["reviews"]]):
            perf = t3["performance"].get(name, {})
            rev = t3["reviews"].get(name, {})
            row = [name, _fmt(perf.get("without")), _fmt(perf.get("with"))]
            for key in ("validity", "coherence", "fairness", "approval"):
                row += [_fmt((rev.get("without") or {}).get(key)), _fmt((rev.get("with") or {}).get(key))]
            rows.append(row)
        blocks.append(
            Table(
                [
                    "model",
                    "acc w/o orch.",
                    "acc w/ orch.",
                    "validity w/o",
                    "validity w/",
                    "coherence w/o",
                    "coherence w/",
                    "fairness w/o",
                    "fairness w/",
                    "approval % w/o",
                    "approval % w/",
                ],
                rows,
                caption="Table 3: performance and problem quality",
            )
        )
    return blocks


def preflight_models(run: Run, refs: list[str]) -> None:
    """One ping per evaluated / reviewing model before any real tokens are spent."""
    for ref in dict.fromkeys(refs):
        if ref in run.services.chat_overrides or is_agent_ref(ref):
            continue  # a stand-in; an agent, imported at start-up (a ping would be a turn in its store)
        try:
            run.services.model(ref, role="student").text(load_prompt("common/ping").render(), step="preflight")
        except ValueError as exc:
            raise InputError(str(exc), field="--evaluate") from None
        except InfraError as exc:
            raise InputError(f"model {ref} does not answer: {exc}", field="--evaluate") from None


def print_tables(run: Run, metrics: dict[str, Any], models: list[str]) -> None:
    """The per-task table (Table 1) and base vs final (Table 2) on the console."""
    if not models:
        return
    table = RichTable(title="ATAD accuracy per task (%), final problems")
    for h in ["model", *TASK_IDS, "Avg.", "n"]:
        table.add_column(h)
    for row in _task_rows({m: metrics["table1"].get(m, {"n": 0}) for m in models}):
        table.add_row(*[str(x) for x in row])
    run.console.print(table)
    t2 = RichTable(title="Base vs final accuracy (%)")
    for h in ["model", "benchmark", "base", "final"]:
        t2.add_column(h)
    for mo, files in metrics["table2"].items():
        for label, v in files.items():
            t2.add_row(mo, label, str(_fmt(v["base"])), str(_fmt(v["final"])))
    run.console.print(t2)


def run_evaluation(run: Run) -> dict[str, Any]:
    """Evaluate / review through the batch runner; prints the per-task table."""
    from dyneval.runtime.runner import execute

    refs = [*(run.params.get("evaluate") or []), *(run.params.get("review") or [])]
    # planned before any ping, so that bad input fails first; the protocol alone holds the plan (the runner lets
    # each unit go once it ran, bench/atad_memory.py)
    protocol = AtadEvalProtocol(None if run.resumed else plan_units(run.params, warn=_warner(run)))
    preflight_models(run, refs)
    summary = execute(protocol, run, skip_preflight=True)
    if summary and not summary["units"]:
        run.console.print("[yellow]the benchmark file(s) hold no finalized problem: nothing to evaluate")
    if summary:
        print_tables(run, summary["metrics"], run.params.get("evaluate") or [])
    return summary
