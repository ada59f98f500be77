"""ATAD (seed 003): agent-centric text anomaly detection benchmarks, generated and evaluated.

Generation (default mode): one unit = one problem = one thread of ``graphs/atad.py``;
``--per-task N`` units for each task type of ``--tasks``. Each unit's
inputs are seeded from ``--seed`` and its id: the topic from the task's domains
(Table 7) and a challenge factor with probability ``--challenge-prob`` (Appendix C).
At the end ``benchmark.jsonl`` is written into the run directory (final and base
problems with all metadata; see :mod:`protocols.atad.benchmark`).

Evaluation (``--evaluate MODEL ... --benchmark FILE ...`` and/or ``--review MODEL ...``):
handled in :meth:`AtadProtocol.custom_run`, which runs a second, small graph
(``graphs/atad_eval.py``) through the same batch runner. One evaluation unit = one
model x one problem version (final, and base when it differs from final; a base
identical to its final problem reuses that answer instead of asking twice) or one
reviewer x one final problem. So the evaluation phase is concurrent and resumable
exactly like generation (``--resume RUN_ID`` on the evaluation run). Its report has
Tables 1, 2, 3 and 5 and Figure 4 (see :mod:`protocols.atad.evaluation`).

Embedded model: SmolLM2-135M as teacher and orchestrator only shows that the
pipeline runs. Loops are small by default (3 base attempts, 2 attempts per
escalation step, 5 student loops); with the embedded model the student usually
fails at once, so ``--per-task 1`` costs about 3-10 calls per task.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dyneval.protocols.atad.benchmark import earlier_copy, item_record, write_benchmark
from dyneval.protocols.atad.metrics import generation_intervals, generation_stats, mean
from dyneval.results.headline import report_blocks as headline_blocks
from dyneval.results.report import bar_chart, figure_path
from dyneval.results.view.adapters import ATAD
from dyneval.runtime.agents.reference import check_agents
from dyneval.runtime.protocol import Protocol, Run, Unit
from dyneval.state.atad import ACCEPTANCE_TEXT, TASK_IDS, TASKS, AtadContext, parse_ladder
from dyneval.state.blocks import Block, Code, Details, Figure, Heading, Table, Text
from dyneval.state.context import described
from dyneval.state.errors import InputError

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph

BENCHMARK_FILE = "benchmark.jsonl"


def parse_tasks(text: str) -> list[str]:
    """``"t1,T3"`` -> ``["T1", "T3"]``; empty = every task type; ``ValueError`` naming an unknown one."""
    if not text:
        return list(TASK_IDS)
    tasks = [t.strip().upper() for t in str(text).split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASK_IDS]
    if bad or not tasks:
        raise ValueError(f"unknown task(s) {bad or text!r}; choose from {','.join(TASK_IDS)}")
    return list(dict.fromkeys(tasks))


@dataclass(kw_only=True)
class AtadBatch:
    """Batch-only options: which problems to generate, and the evaluation phase."""

    per_task: int = described(10, "problems per task type", minimum=1, maximum=10_000)
    tasks: str = described(",".join(TASK_IDS), "comma-separated task types, e.g. T1,T3", check=parse_tasks)
    problem_style: str = described("GRE", "exam style of the problems")
    challenge_prob: float = described(
        0.5, "probability of adding a challenge factor to a problem", minimum=0, maximum=1
    )
    evaluate: list[str] | None = described(
        None,
        "evaluation phase: models or agents to evaluate on --benchmark (local | NAME | MODEL@URL | graph:MODULE:ATTR)",
        metavar="MODEL",
        check=check_agents,
    )
    benchmark: list[str] | None = described(
        None,
        "benchmark JSONL file(s) to evaluate or review (one per generator); default: the shipped sample of "
        "seven hand-written problems",
        metavar="FILE",
    )
    fields: str | None = described(
        None,
        "column names of --benchmark records, e.g. id=item_id,task=type "
        "(names: id, task, item_status, problem, base_problem)",
    )
    review: list[str] | None = described(
        None, "quality review of --benchmark problems by these reviewer models (Table 3)", metavar="MODEL"
    )


class AtadProtocol(Protocol):
    name = "atad"
    viewer = ATAD
    description = "ATAD: teacher / orchestrator / student text anomaly benchmark generation and evaluation"
    context_cls = AtadContext
    batch_cls = AtadBatch
    roles = ("teacher", "orchestrator", "student")
    judge_roles = ("orchestrator",)
    rescore_note = (
        "The orchestrator's validation of each candidate is re-judged over the teacher's and student's "
        "replayed replies. Escalation follows its verdicts and feedback (seed 003, Sec. 3), so a problem "
        "whose verdict or feedback changed reaches requests the source never made and diverged."
    )

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.atad import builder

        return builder

    def context(self, run: Run) -> AtadContext:
        """The graph context, as ``context_cls`` builds it (:meth:`Protocol.context`)."""
        ctx = super().context(run)
        assert isinstance(ctx, AtadContext)
        return ctx

    # -- generation ---------------------------------------------------------------------------
    def plan(self, run: Run) -> list[Unit]:
        options = self.batch(run)
        units = []
        for task in parse_tasks(options.tasks):
            spec = TASKS[task]
            for i in range(options.per_task):
                uid = f"{task}-{i:04d}"
                rng = random.Random(f"{run.config.seed}:{uid}")
                topic = rng.choice(spec.topics)
                challenge = rng.choice(spec.challenge_factors) if rng.random() < options.challenge_prob else None
                target = rng.random() < 0.5 if spec.kind == "order" else None
                units.append(
                    Unit(
                        id=uid,
                        input={
                            "task": task,
                            "topic": topic,
                            "challenge": challenge,
                            "style": options.problem_style,
                            "target_coherent": target,
                        },
                        meta={"task": task, "topic": topic, "challenge": challenge},
                    )
                )
        return units

    def expected_calls(self, run: Run) -> str:
        ctx = self.context(run)
        worst = ctx.max_init_loops * 2 + ctx.max_student_loops * (2 + 2 * ctx.max_level_attempts)
        return f"3-{worst} (x2 with structured-output repairs)"

    def check_params(self, params: dict[str, Any]) -> None:
        """The declared checks, and the evaluation phase's inputs only with it: generation writes a new benchmark
        (Sec. 3), it does not extend one, so a ``--benchmark`` or ``--fields`` beside it would be ignored."""
        super().check_params(params)
        if not (params.get("evaluate") or params.get("review")):
            for flag in ("benchmark", "fields"):
                if params.get(flag):
                    raise InputError(
                        f"--{flag} is read by the evaluation phase (--evaluate MODEL or --review MODEL); generation "
                        "writes a new benchmark into its run folder",
                        field=f"--{flag}",
                    )

    def custom_run(self, run: Run) -> bool:
        if not (run.params.get("evaluate") or run.params.get("review")):
            return False
        from dyneval.protocols.atad.evaluation import run_evaluation

        run_evaluation(run)
        return True

    def _levels(self, run: Run) -> list[tuple[str, int]]:
        return parse_ladder(self.context(run).difficulty_ladder)

    def subjects(self, run: Run) -> list[str]:
        """The models evaluated (``--evaluate``), else the student that solves the generated problems."""
        return list(run.params.get("evaluate") or []) or super().subjects(run)

    def trials_refused(self, run: Run) -> str | None:
        """Trials repeat the evaluation's answers (each right or wrong, Table 1); a generated problem or a review
        is no pass or fail of the model under test."""
        if run.params.get("evaluate"):
            return None
        return (
            "--trials repeats the answers of the models evaluated (--evaluate MODEL): generation's units make "
            "problems and reviews score them, neither is a pass or fail of a model under test"
        )

    def ungraded(self, state: dict[str, Any]) -> int:
        """1 when the unit stopped because the orchestrator gave no usable verdict on a candidate."""
        return int(bool(state.get("ungraded")))

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        # the runner passes no run here; ladder and models are stamped in by summarize()
        return {"item": state}

    def _items(self, run: Run, records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Benchmark items of the finished units (``ok``) in unit order, made as they are read (an item holds its
        unit's history); a final problem identical to an earlier unit's is refused (discarded as its duplicate),
        whichever unit finished first. An ``ungraded`` unit stopped on an unjudged candidate and has no item yet
        (it is listed in ``summary["ungraded"]``)."""
        generator = {r: run.services.model_label(r) for r in self.roles}
        orchestrator = not run.params.get("no_orchestrator")
        levels = self._levels(run)
        kept: dict[str, str] = {}
        for r in sorted(records, key=lambda r: r["unit_id"]):
            if r["status"] != "ok":
                continue
            state, uid = r["item"], r["unit_id"]
            final = state.get("current") if state.get("status") == "finalized" else None
            copy = earlier_copy(kept, uid, state["task"], final) if final else None
            yield item_record(
                uid, state, levels=levels, orchestrator=orchestrator, generator=generator, duplicate_of=copy
            )

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        items = list(self._items(run, records))
        path = write_benchmark(run.run_dir / BENCHMARK_FILE, items)
        stats = generation_stats(items)
        ok = [r for r in records if r["status"] == "ok"]
        finalized_ids = {i["id"] for i in items if i["item_status"] == "finalized"}
        fin_records = [r for r in ok if r["unit_id"] in finalized_ids]
        n_fin = len(finalized_ids)
        total_wall = sum(r.get("wall_s", 0.0) for r in records)
        total_calls = sum((r.get("usage") or {}).get("calls", 0) for r in records)
        own_wall = mean(r.get("wall_s", 0.0) for r in fin_records)
        own_calls = mean((r.get("usage") or {}).get("calls", 0) for r in fin_records)
        stats["per_finalized"] = {
            # everything spent (discarded and errored units included) per finalized problem
            "wall_s": round(total_wall / n_fin, 3) if n_fin else None,
            "llm_calls": round(total_calls / n_fin, 3) if n_fin else None,
            # what a finalized problem itself took
            "own_wall_s": None if own_wall is None else round(own_wall, 3),
            "own_llm_calls": None if own_calls is None else round(own_calls, 3),
        }
        stats["benchmark_file"] = str(path)
        stats["orchestrator"] = not run.params.get("no_orchestrator")
        # units that stopped on an unusable orchestrator verdict: neither finalized nor discarded, redone on resume
        stats["ungraded"] = {r["unit_id"]: r["item"].get("ungraded") for r in records if r["status"] == "ungraded"}
        # final problems refused as copies of an earlier unit's (counted among the discarded)
        stats["duplicates_refused"] = sum(1 for i in items if i.get("duplicate_of"))
        # cost first and the long per-task breakdown last, so the console summary shows what matters
        per_task = stats.pop("per_task")
        stats = {
            "per_finalized": stats.pop("per_finalized"),
            **stats,
            "per_task": per_task,
            **generation_intervals(items),
        }
        run.console.print(f"benchmark: [bold]{path}[/] ({n_fin} finalized, {stats['discarded']} discarded)")
        if stats["duplicates_refused"]:
            run.console.print(
                f"[yellow]refused {stats['duplicates_refused']} final problem(s) identical to an earlier unit's "
                "(whitespace and case aside): discarded, each naming its duplicate_of"
            )
        return stats

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        m = summary["metrics"]
        cost = m["per_finalized"]
        per_finalized = (
            f"Per finalized problem: {cost['wall_s']} s wall and {cost['llm_calls']} LLM calls (all "
            "units' cost divided by the finalized ones)."
            if m["finalized"]
            else "No problem was finalized, so there is no cost per finalized problem."
        )
        blocks: list[Block] = [
            Text(
                f"Benchmark file: {m['benchmark_file']} ({m['finalized']} finalized, {m['discarded']} discarded"
                + (
                    f", {m['duplicates_refused']} of them refused as copies of an earlier problem"
                    if m.get("duplicates_refused")
                    else ""
                )
                + "; "
                f"orchestrator {'on' if m['orchestrator'] else 'off (ablation)'}). {per_finalized}"
            ),
            *headline_blocks(self.name, m),
        ]
        if m.get("ungraded"):
            blocks.append(
                Table(
                    ["unit", "why it stopped"],
                    [[u, why] for u, why in sorted(m["ungraded"].items())],
                    caption="Units stopped unjudged (the orchestrator gave no usable verdict after "
                    "retries and one repair): neither finalized nor discarded; --resume redoes "
                    "the validation",
                )
            )
        blocks.append(
            Table(
                ["task", "name", "finalized", "discarded"],
                [[t, TASKS[t].name, v["finalized"], v["discarded"]] for t, v in m["per_task"].items()],
                caption="Items per task type",
            )
        )
        if m["acceptance"]:
            blocks.append(
                Table(
                    ["acceptance", "meaning", "items"],
                    [[k, ACCEPTANCE_TEXT.get(k, k), v] for k, v in m["acceptance"].items()],
                    caption="Acceptance status of finalized items",
                )
            )
        levels = [name for name, _ in self._levels(run)]
        if m["difficulty"]:
            counts = [m["difficulty"].get(name, 0) for name in levels]
            blocks.append(
                Figure(
                    bar_chart(
                        figure_path(run.run_dir, "atad_difficulty"),
                        levels,
                        counts,
                        title="Difficulty reached by finalized problems",
                        ylabel="items",
                    ),
                    "Difficulty reached",
                )
            )
        if m["rejection_reasons"]:
            reasons = m["rejection_reasons"]
            blocks.append(
                Figure(
                    bar_chart(
                        figure_path(run.run_dir, "atad_rejections"),
                        list(reasons),
                        list(reasons.values()),
                        title="Rejection reasons",
                        ylabel="count",
                    ),
                    "Why candidates were rejected (structure checks in code, orchestrator verdicts)",
                )
            )
            blocks.append(Table(["reason", "count"], [[k, v] for k, v in reasons.items()], caption="Rejections"))
        rows: list[list[Any]] = []
        examples: list[dict[str, Any]] = []
        for i in self._items(run, records):
            rows.append(
                [
                    i["id"],
                    i["topic"],
                    i["challenge"] or "",
                    i["item_status"],
                    i["acceptance"] or "",
                    i["difficulty"] or "",
                    i["student_loops"],
                    i["teacher_attempts"],
                    (i["discard_reason"] or "")[:120],
                ]
            )
            if i["item_status"] == "finalized" and len(examples) < 3:
                examples.append(i)
        blocks.append(
            Table(
                [
                    "item",
                    "topic",
                    "challenge",
                    "status",
                    "acceptance",
                    "difficulty",
                    "student loops",
                    "teacher attempts",
                    "discard reason",
                ],
                rows,
                caption="Items",
            )
        )
        if examples:
            from dyneval.nodes.atad.problems import render_with_answer

            blocks.append(Heading("Example problems", level=3))
            for i in examples:
                blocks.append(
                    Details(
                        f"{i['id']} ({i['task_name']}, {i['difficulty']})",
                        [Code(render_with_answer(i["task"], i["problem"]))],
                    )
                )
        return blocks
