"""JudgeAgent (seeds 000 and 001): knowledge-driven, difficulty-adaptive dynamic evaluation.

One unit = one batch of ``--batch-size`` base questions = one thread of ``graphs/judgeagent.py``:
Benchmark Grading, ``--rounds`` Interactive Extension rounds over the context graph (``--hops``
chunks per knowledge path), Evaluation Feedback and the Algorithm 2 validation. Batches run concurrently
(``--concurrency``) and a killed run resumes without redoing finished batches (the runner).

Inputs are read and validated in ``plan`` (before the run spends anything): the questions (``--data``,
``--fields``; :mod:`protocols.judgeagent.data`) and the knowledge base: ``--kb PATH`` (a .txt/.md file, a
JSONL/JSON/CSV/TSV file of documents mapped with ``--kb-fields``, or a folder of such files;
:func:`stores.knowledge_base.load_knowledge_base`); else the reference texts of the planned questions
(``references`` field); else, only when no ``--data`` was given, the shipped sample articles. The console,
``summary.json`` (``inputs``) and the report say which. ``prepare`` starts the context-graph build on a background
thread: the batches grade their base questions and label their question entities meanwhile, and wait for the
graph at their first knowledge path (Algorithm 1 needs it only there; the "w/o context graph" ablation draws its
random chunks without it). The graph is cached under ``<out>/_cache`` by corpus hash and extraction model, so a
second run on the same corpus makes no extraction call; ``--build-kb-only`` builds it and stops.

Ablations (section 4.5 / seed 001 Table 3): ``--no-context-graph``, ``--no-difficulty-adaptation``
(``--fixed-difficulty``), ``--no-extension``.

Embedded model: SmolLM2-135M as the evaluator labels entities, writes questions and judges poorly; the
results then only show that the pipeline runs (the runner prints the smoke-test warning). Entities it cannot
label come from the keyword fallback of :mod:`nodes.judgeagent.knowledge`; when no entity at all came from
the evaluator, the console, ``kb_stats.json``, ``summary.json`` and the report say so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dyneval.nodes.judgeagent.judging import answer_format
from dyneval.protocols.judgeagent.data import SAMPLE_DATA, load_questions, split_batches, uses_sample
from dyneval.protocols.judgeagent.metrics import (
    accuracy,
    difficulty_distribution,
    dynamic_table,
    intervals,
    overall_score,
    ungraded_answers,
    unvalidated,
    validation_by_label,
)
from dyneval.protocols.judgeagent.report import build_report
from dyneval.results.view.adapters import JUDGEAGENT
from dyneval.runtime.protocol import Protocol, Run, TrialVerdict, Unit, with_results
from dyneval.runtime.trials import trial_of
from dyneval.state.blocks import Block, Text
from dyneval.state.context import described
from dyneval.state.errors import InputError
from dyneval.state.judgeagent import SAMPLE_KB, BaseQuestion, DifficultyConfigError, JudgeAgentContext
from dyneval.state.judgecheck import check_jury
from dyneval.state.llmeval import IrtModel
from dyneval.state.verdicts import graded_correct, is_ungraded
from dyneval.stores.choices import AnswerForm

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph
    from rich.table import Table

    from dyneval.stores.context_graph import ContextGraph

KB_STATS = "kb_stats.json"


@dataclass(kw_only=True)
class JudgeAgentBatch:
    """Batch-only options: the questions, how they are batched, and the build-only mode."""

    data: str | None = described(None, "base questions: JSONL, JSON, CSV or TSV (default: shipped sample)")
    fields: str | None = described(
        None,
        "column names: id, question, answer, options, difficulty, references, "
        "e.g. question=QUESTION,answer=final_decision,references=CONTEXTS "
        "(options=A+B+C+D and references=P1+P2 join columns)",
    )
    choices: str | None = described(None, "the same options for every question, e.g. yes,no,maybe")
    answer_form: AnswerForm = described(
        "any",
        "how a multiple-choice answer is read: any (an option letter, a "
        "0-based index or an option's text; refused when two name different "
        "options), or only as letter, index or text",
    )
    hf_dataset: str | None = described(
        None,
        "Hugging Face dataset id[:config], read from the local Hugging Face cache (HF_HUB_OFFLINE=0 lets it download)",
    )
    hf_split: str = described("test", "split of --hf-dataset")
    batch_size: int = described(3, "N_B questions per batch", minimum=1, maximum=100)
    build_kb_only: bool = described(False, "build (or load) the context graph, print its statistics and stop")
    irt_runs: str | None = described(
        None,
        "adaptive base questions: earlier judgeagent runs of other targets on "
        "these questions (directories or globs, comma-separated) whose verdicts "
        "calibrate the questions; each batch's --batch-size questions become a "
        "pool, --irt-items of them asked (protocols/judgeagent/irt.py)",
        metavar="DIR[,DIR...]",
    )
    irt_model: IrtModel = described("2pl", "with --irt-runs: item response model")
    irt_min_responses: int = described(
        5, "with --irt-runs: responses a question needs to be calibrated (others are not asked)", minimum=2
    )


class JudgeAgentProtocol(Protocol):
    name = "judgeagent"
    viewer = JUDGEAGENT
    description = "JudgeAgent: benchmark grading, knowledge-driven adaptive extension, feedback and validation"
    context_cls = JudgeAgentContext
    batch_cls = JudgeAgentBatch
    roles = ("target", "evaluator")
    judge_roles = ("evaluator",)
    rescore_note = (
        "Base-question grading is re-judged over the replayed target answers. The extension rounds "
        "adapt the difficulty to the verdicts and the evaluator writes their questions (seed 000, Sec. "
        "3), so a batch whose extension questions change diverged; the capability score, difficulty "
        "trajectory and validation metrics cover the batches that kept their path."
    )
    uses_chroma = True  # the context graph's chunk and entity vectors

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.judgeagent import builder

        return builder

    def context(self, run: Run) -> JudgeAgentContext:
        """The graph context, as ``context_cls`` builds it (:meth:`Protocol.context`)."""
        ctx = super().context(run)
        assert isinstance(ctx, JudgeAgentContext)
        return ctx

    # -- inputs --------------------------------------------------------------------------------
    def _check_params(self, run: Run) -> JudgeAgentContext:
        """The declared checks, then those across options; the ``--kb`` file is read and validated."""
        ctx = self.context(run)
        try:
            ctx.control()
        except DifficultyConfigError as exc:
            raise InputError(str(exc), field="--gains/--thresholds") from None
        if ctx.kb_fields and not ctx.kb:
            raise InputError("--kb-fields maps the records of a --kb file; no --kb was given", field="--kb-fields")
        for name in ("irt_items", "irt_exposure_k", "irt_model", "irt_min_responses"):
            if run.params.get(name) is not None and not run.params.get("irt_runs"):
                flag = "--" + name.replace("_", "-")
                raise InputError(f"{flag} sets the adaptive base questions; no --irt-runs was given", field=flag)
        if ctx.kb and not ctx.no_extension:
            from dyneval.stores.knowledge_base import load_knowledge_base  # read when planning: not with --help

            load_knowledge_base(ctx.kb, ctx.kb_fields or None)  # validated now; the graph is built in prepare()
        return ctx

    def inputs(self, run: Run, questions: list[BaseQuestion] | None = None) -> dict[str, str]:
        """Where this run's questions and knowledge base come from (shipped samples only when none was given)."""
        p = run.params
        if uses_sample(p):
            data = f"shipped sample {SAMPLE_DATA} (no --data given)"
        else:
            data = f"Hugging Face {p['hf_dataset']}" if p.get("hf_dataset") else str(p["data"])
        if p.get("no_extension"):
            kb = "none (--no-extension)"
        elif p.get("kb"):
            kb = str(p["kb"])
        elif questions is not None and any(q.references for q in questions):
            kb = "the reference texts of the questions (no --kb given)"
        else:
            kb = f"shipped sample {SAMPLE_KB} (no --kb given)"
        return {"questions": data, "knowledge_base": kb}

    def plan(self, run: Run) -> list[Unit]:
        ctx = self._check_params(run)
        check_jury(ctx.judge_jury, run.config.models, "--judge-jury")
        questions, source = load_questions(run.params)
        if not (
            run.params.get("kb")
            or run.params.get("no_extension")
            or any(q.references for q in questions)
            or uses_sample(run.params)
        ):
            raise InputError(
                "no knowledge base: pass --kb or map a references field with --fields", file=source, field="--kb"
            )
        for name, where in self.inputs(run, questions).items():
            run.console.print(f"{name.replace('_', ' ')}: {where}", markup=False, highlight=False)
        requested = ctx.answer_format
        run.params["answer_format"] = answer_format(requested, questions)
        run.console.print(
            f"answer format: {run.params['answer_format']}"
            + (" (auto: chosen from the reference answers)" if requested == "auto" else ""),
            markup=False,
            highlight=False,
        )
        if run.params.get("irt_runs"):
            return irt_plan().adaptive_units(run, questions, ctx, self.batch(run), source)
        units = []
        for i, batch in enumerate(split_batches(questions, self.batch(run).batch_size), 1):
            units.append(
                Unit(
                    id=f"batch-{i:04d}",
                    input={"batch": [q.model_dump() for q in batch]},
                    meta={"questions": [q.id for q in batch], "source": source},
                )
            )
        return units

    def expected_calls(self, run: Run) -> str:
        n = self.batch(run).batch_size
        if run.params.get("irt_runs"):  # up to --irt-items of each pool are asked
            n = min(n, self.context(run).irt_items)
        r = self._rounds(run)
        return (
            f"{n} base answers (+ a judge call for each that is not an option letter or the exact reference), "
            f"1 entity call, {r} x (generate, answer, judge unless exact), 1 feedback, {n} validation answers "
            "(+ judge calls likewise); graph build: chunks/extract_batch calls on first use only"
        )

    def _rounds(self, run: Run) -> int:
        """Extension rounds per batch (none with ``--no-extension``)."""
        ctx = self.context(run)
        return 0 if ctx.no_extension else ctx.rounds

    def resolve_kb(self, run: Run, questions: list[BaseQuestion]) -> str:
        """The knowledge base path for this run (writes the references corpus when it is used)."""
        if run.params.get("kb"):
            return str(run.params["kb"])
        refs = [q for q in questions if q.references]
        if refs:
            path = run.run_dir / "data" / "kb_references.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as fh:
                for q in refs:
                    fh.write(
                        json.dumps(
                            {"id": f"q:{q.id}", "title": f"references of {q.id}", "text": "\n\n".join(q.references)},
                            ensure_ascii=False,
                        )
                        + "\n"
                    )
            return str(path)
        return str(SAMPLE_KB)

    def prepare(self, run: Run, units: list[Unit]) -> None:
        self._check_params(run)
        questions = [BaseQuestion(**q) for u in units for q in u.input["batch"]]
        source = self.inputs(run, questions)["knowledge_base"]
        run.params["kb"] = self.resolve_kb(run, questions)
        if run.params.get("no_extension"):
            return
        self._start_graph(run, source)

    def local_mode(self, run: Run) -> str | None:
        """``--build-kb-only`` builds the context graph and runs no unit: nothing to run on Ray runners."""
        return "--build-kb-only" if run.params.get("build_kb_only") else None

    def custom_run(self, run: Run) -> bool:
        if not run.params.get("build_kb_only"):
            return False
        self._check_params(run)
        questions: list[BaseQuestion] = []
        if not run.params.get("kb"):
            questions, _ = load_questions(run.params)
        source = self.inputs(run, questions)["knowledge_base"]
        run.params["kb"] = self.resolve_kb(run, questions)
        self._start_graph(run, source)  # the runner shows its progress and waits for it
        return True

    def _start_graph(self, run: Run, source: str) -> None:
        """Build (or load) the context graph in the background (units that do not need it yet run meanwhile,
        the runner shows its progress); its statistics are written and shown when it is ready."""
        from dyneval.nodes.judgeagent.knowledge import start_context_graph  # the graph's modules: not with --help

        start_context_graph(
            run.services, self.context(run), run.console.print, lambda graph: self._graph_stats(run, source, graph)
        )

    def _graph_stats(self, run: Run, source: str, graph: ContextGraph) -> None:
        """Write and print the statistics of the run's context graph.

        When the evaluator labelled no chunk at all, every entity comes from the keyword fallback: the
        statistics carry a ``warning`` that the console, ``summary.json`` and the report repeat.
        """
        stats: dict[str, Any] = {"kb": run.params["kb"], "source": source, "folder": str(graph.folder), **graph.stats()}
        sources = stats["entity_sources"]
        if stats["chunks"] and not sources.get("llm"):
            stats["warning"] = (
                f"the evaluator labelled no entity in any of the {stats['chunks']} knowledge-base "
                "chunks; all context-graph entities come from the keyword fallback "
                f"({sources.get('keyword', 0)} entities), so knowledge paths follow keywords, "
                "not the evaluator's entity labels (Table 11)"
            )
        (run.run_dir / KB_STATS).write_text(json.dumps(stats, indent=2), encoding="utf-8")
        run.console.print(stats_table(stats))
        if stats.get("warning"):
            run.console.print(f"warning: {stats['warning']}", style="yellow", markup=False, highlight=False)

    # -- results -------------------------------------------------------------------------------
    def ungraded(self, state: dict[str, Any]) -> int:
        """Ungraded answers (base, rounds, validation re-answers), plus 1 for a batch left unvalidated
        because its feedback failed or came back empty: resume redoes that step like a failed judgement."""
        answers = [*state.get("base", []), *state.get("rounds", [])]
        count = sum(1 for x in answers if is_ungraded(x))
        count += sum(1 for v in state.get("validation", []) if v.get("verdict2") == "ungraded")
        feedback = state.get("feedback") or {}
        return count + int(bool(feedback) and feedback.get("status") != "ok")

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "questions": unit.meta.get("questions", []),
            "answer_format": state.get("answer_format"),
            "ungraded": self.ungraded(state),
            "base": state.get("base", []),
            "score": state.get("score", 0.0),
            "answered": state.get("answered", 0),
            "trajectory": state.get("trajectory", []),
            "rounds": state.get("rounds", []),
            "question_entities": state.get("question_entities", []),
            "feedback": state.get("feedback", {}),
            "validation": state.get("validation", []),
            **(irt_plan().adaptive_result(state) if state.get("irt") else {}),
        }

    def trials_refused(self, run: Run) -> str | None:
        return None

    def trial_verdicts(self, record: dict[str, Any]) -> list[TrialVerdict]:
        """The base questions' verdicts (Algorithm 1's Benchmark grading; the extension rounds differ between
        trials, as they follow the answers), each question an item, its batch the cluster."""
        batch = trial_of(record)[0]
        return [TrialVerdict("target", batch, b["id"], graded_correct(b)) for b in record.get("base") or []]

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ok = with_results(records)
        rounds = self._rounds(run)
        n_questions = sum(len(r["base"]) for r in ok)
        tokens = sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in ok)
        seconds = sum(r.get("wall_s", 0.0) for r in ok)
        gen = [x for r in ok for x in r["rounds"]]
        hows: dict[str, int] = {}
        for r in ok:
            for x in [*r["base"], *[g for g in r["rounds"] if g.get("status") == "ok"]]:
                hows[x.get("how", "?")] = hows.get(x.get("how", "?"), 0) + 1
        validated = [v for r in ok for v in r["validation"]]
        dynamic = dynamic_table(ok, rounds)
        # the format the batches were asked in: plan() resolves it into run.params, which a resumed run (its units
        # read back, not planned again) does not have
        fmt = " / ".join(sorted({r["answer_format"] for r in ok if r.get("answer_format")})) or None
        settings = {
            k: run.params.get(k)
            for k in (
                "kb",
                "batch_size",
                "rounds",
                "hops",
                "gains",
                "thresholds",
                "no_context_graph",
                "no_difficulty_adaptation",
                "fixed_difficulty",
                "no_extension",
            )
        }
        return {
            "batches": len(ok),
            "batches_ungraded": sum(1 for r in ok if r.get("ungraded")),
            "base_questions": n_questions,
            "answer_format": fmt,
            "score": overall_score(ok),
            "score_denominator": {"n": sum(r["answered"] for r in ok), "ungraded": ungraded_answers(ok)},
            "base_accuracy": accuracy(ok),
            "dynamic_scores": {k: v["value"] for k, v in dynamic.items()},
            "dynamic_denominators": {k: {"n": v["n"], "ungraded": v["ungraded"]} for k, v in dynamic.items()},
            "difficulty_distribution": difficulty_distribution(ok),
            "validation": validation_by_label(validated) if validated else None,
            "validated_batches": sum(1 for r in ok if r["validation"]),
            "unvalidated_batches": unvalidated(ok),
            "feedback_status": _count(r["feedback"].get("status", "none") for r in ok),
            "leak_suspects": [q for r in ok for q in r["feedback"].get("leak_suspects", [])],
            "generation": {
                "rounds": len(gen),
                "failed": sum(1 for x in gen if x.get("status") != "ok"),
                "path_modes": _count(x["path"].get("mode") for x in gen),
            },
            "judged_by": hows,
            "efficiency": {
                "avg_tokens_per_seed_question": tokens / n_questions if n_questions else None,
                "avg_seconds_per_seed_question": seconds / n_questions if n_questions else None,
            },
            "inputs": self._run_inputs(run),
            "settings": {**settings, "answer_format": fmt},
            **(irt_plan().adaptive_summary(run, ok) if run.params.get("irt_runs") else {}),
            **intervals(ok),
        }

    def _run_inputs(self, run: Run) -> dict[str, Any]:
        """``inputs()`` for the summary: the knowledge base as ``prepare`` recorded it, with any fallback warning."""
        out: dict[str, Any] = self.inputs(run)
        path = run.run_dir / KB_STATS
        if path.exists():
            stats = json.loads(path.read_text(encoding="utf-8"))
            out["knowledge_base"] = stats.get("source", out["knowledge_base"])
            out["entity_sources"] = stats.get("entity_sources")
            if stats.get("warning"):
                out["knowledge_base_warning"] = stats["warning"]
        return out

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        inputs = summary["metrics"].get("inputs", {})
        blocks: list[Block] = [
            Text(f"Questions: {inputs.get('questions')}. Knowledge base: {inputs.get('knowledge_base')}.")
        ]
        if inputs.get("knowledge_base_warning"):
            blocks.append(Text(f"Warning: {inputs['knowledge_base_warning']}."))
        return blocks + build_report(run, summary["metrics"], records)


def irt_plan() -> Any:
    """:mod:`protocols.judgeagent.irt`, imported when ``--irt-runs`` asks for it (it loads scipy)."""
    from dyneval.protocols.judgeagent import irt

    return irt


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


__all__ = ["JudgeAgentProtocol", "SAMPLE_DATA"]


def stats_table(stats: dict[str, Any]) -> Table:
    """The context graph's statistics (Section 3.2: documents, chunks, entities and their mentions) as one row, with
    where its entities came from (the evaluator's labels or the keyword fallback) and its folder."""
    from rich.table import Table

    table = Table(title="context graph", title_justify="left", show_edge=False)
    sources = ", ".join(f"{name} {n}" for name, n in sorted(stats["entity_sources"].items())) or "-"
    row = {
        "documents": stats["documents"],
        "chunks": stats["chunks"],
        "entities": stats["entities"],
        "mentions": stats["mentions"],
        "entities from": sources,
        "folder": stats["folder"],
    }
    for name in row:
        table.add_column(name, justify="left" if name in ("entities from", "folder") else "right", overflow="fold")
    table.add_row(*(str(v) for v in row.values()))
    return table
