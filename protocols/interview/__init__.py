"""LLM-as-an-Interviewer (seed 004): batch runs over seed questions and the Interview Report.

One unit = one interview session on one seed question (times ``--repeats``).
The graph is ``graphs/interview.py``; metrics in :mod:`protocols.interview.metrics`;
report blocks in :mod:`protocols.interview.report`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dyneval.protocols.interview import metrics
from dyneval.protocols.interview.data import CANONICAL, SAMPLE, load_seeds
from dyneval.protocols.interview.report import report_blocks
from dyneval.protocols.interview.terminal import ask
from dyneval.results.view.adapters import INTERVIEW
from dyneval.runtime.protocol import Protocol, Run, TrialVerdict, Unit
from dyneval.runtime.trials import trial_of
from dyneval.state.blocks import Block, Text
from dyneval.state.context import described
from dyneval.state.errors import InfraError, ModelError
from dyneval.state.interview import InterviewContext, TaskType
from dyneval.state.judgecheck import check_jury
from dyneval.state.verdicts import graded_correct, is_ungraded

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph

_input_lock = threading.Lock()


def unit_id(seed_id: str, repeat: int, repeats: int) -> str:
    return seed_id if repeats == 1 else f"{seed_id}~r{repeat}"


@dataclass(kw_only=True)
class InterviewBatch:
    """Batch-only options: the seed questions, repeats, and the report's sample-size check."""

    data: str | None = described(
        None,
        "seed questions (JSONL, JSON, CSV or TSV: question, solution, answer, task, "
        "level, id); default: the shipped sample",
    )
    fields: str | None = described(
        None,
        f"column names of --data or --hf-dataset, e.g. question=Problem,answer=Final (names: {', '.join(CANONICAL)})",
    )
    hf_dataset: str | None = described(
        None,
        "seed questions from a Hugging Face dataset id[:config] (or a local dataset folder), read from the local "
        "Hugging Face cache (HF_HUB_OFFLINE=0 lets it download); needs the [hub] extra",
    )
    hf_split: str = described("test", "split of --hf-dataset")
    task: TaskType | None = described(None, "treat every seed question as this task type")
    repeats: int = described(1, "interview every seed question K times (run-to-run std)", minimum=1, maximum=100)
    bootstrap_resamples: int = described(10_000, "resamples of the sample-size check", minimum=1, maximum=100_000)


class InterviewProtocol(Protocol):
    name = "interview"
    viewer = INTERVIEW
    description = (
        "LLM-as-an-Interviewer: modified seed questions, feedback and retries, follow-up questions, Interview Report"
    )
    context_cls = InterviewContext
    batch_cls = InterviewBatch
    roles = ("target", "evaluator", "grader")
    judge_roles = ("evaluator", "grader")
    rescore_note = (
        "A new grader (--grader) re-grades the replayed answers; Score@n, follow-up accuracy and the "
        "error analysis are re-scored where the grades leave the session's path as it was. Retries and "
        "follow-ups depend on the grades and the interviewer's feedback (seed 004, Sec. 3), so a session "
        "they change, and any session under a new interviewer (--evaluator) that rewrites its questions, "
        "diverged."
    )

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.interview import builder

        return builder

    def context(self, run: Run) -> InterviewContext:
        """The graph context, as ``context_cls`` builds it (:meth:`Protocol.context`)."""
        ctx = super().context(run)
        assert isinstance(ctx, InterviewContext)
        return ctx

    def plan(self, run: Run) -> list[Unit]:
        options = self.batch(run)
        check_jury(self.context(run).judge_jury, run.config.models, "--judge-jury")
        seeds = load_seeds(
            options.data, options.task, options.fields, hf_dataset=options.hf_dataset, hf_split=options.hf_split
        )
        run.console.print(f"seed questions: {self.inputs(run)}", markup=False, highlight=False)
        units = []
        for k in range(options.repeats):
            for s in seeds:
                uid = unit_id(s.id, k, options.repeats)
                units.append(
                    Unit(
                        id=uid,
                        input={"unit_id": uid, "seed": s.model_dump()},
                        meta={"seed_id": s.id, "repeat": k, "task": s.task, "level": s.level},
                    )
                )
        return units

    def within_limit(self, units: list[Unit], limit: int) -> list[Unit]:
        """``--limit N`` keeps the first ``N`` seed questions with every one of their ``--repeats``: the run-to-run
        spread (seed 004, Table 6) is taken across the repeats of one question, so a repeat is never cut off."""
        first = list(dict.fromkeys(u.meta["seed_id"] for u in units))[:limit]
        return [u for u in units if u.meta["seed_id"] in first]

    def inputs(self, run: Run) -> str:
        """Where the seed questions come from (the shipped sample only when no --data or --hf-dataset was given)."""
        if run.params.get("hf_dataset"):
            return f"Hugging Face {run.params['hf_dataset']} (split {run.params.get('hf_split') or 'test'})"
        return str(run.params["data"]) if run.params.get("data") else f"shipped sample {SAMPLE} (no --data given)"

    def expected_calls(self, run: Run) -> str:
        ctx = self.context(run)
        r, q = ctx.max_retries, ctx.max_questions
        low = 2 + 1 + 2 + 1
        high = 2 + 1 + (r + 1) * 2 + r * 2 + (q - 1) * 3 + 1
        return f"{low}-{high} (single-turn 2, modify 1, 2 per answer, 1-2 per feedback, 3 per follow-up, summary 1)"

    def roles_in(self, run: Run) -> tuple[str, ...]:
        """When a person answers (``--interviewee human``) the target role is never called."""
        human = self.context(run).interviewee == "human"
        return tuple(r for r in type(self).roles if r != "target") if human else type(self).roles

    def local_mode(self, run: Run) -> str | None:
        """A person answers on this process's terminal (:meth:`on_interrupt`), which no Ray runner has."""
        return "--interviewee human" if self.context(run).interviewee == "human" else None

    def on_interrupt(self, run: Run, unit: Unit, value: Any) -> Any:
        """Ask the human interviewee on the terminal, the run's live display paused meanwhile; the reply resumes
        the graph from its checkpoint."""
        question = value.get("question", value) if isinstance(value, dict) else value
        with _input_lock:
            head = f"[{unit.id}] " + (
                f"question {value.get('q')} try {value.get('attempt')}" if isinstance(value, dict) else ""
            )
            try:
                return ask(run.console, head, str(question))
            except EOFError:
                raise InfraError(
                    "no answer from the human interviewee (input closed); the session is kept at "
                    "its checkpoint: continue with --resume RUN_ID"
                ) from None

    def ungraded(self, state: dict[str, Any]) -> int:
        """Ungraded answers of the session (interactions and the single-turn judge answer)."""
        return sum(1 for i in state.get("interactions", []) if is_ungraded(i)) + int(
            is_ungraded(state.get("single_turn"))
        )

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        inter = state.get("interactions", [])
        seed_inter = sorted((i for i in inter if i["q"] == 0), key=lambda i: i["attempt"])
        if not seed_inter:
            raise ModelError("the session ended without a graded answer to the seed question")
        fups = [i for i in inter if i["kind"] == "followup" and i["attempt"] == 1]
        seed = state["seed"]
        solved_at = next((i["attempt"] for i in seed_inter if i["correct"]), None)
        return {
            "seed_id": seed["id"],
            "repeat": unit.meta.get("repeat", 0),
            "task": seed.get("task", "generic"),
            "level": seed.get("level"),
            "original_question": seed["question"],
            "question": next(
                (t["text"] for t in state.get("transcript", []) if t.get("q") == 0 and t.get("kind") == "question"),
                seed["question"],
            ),
            "modification": state.get("modification", {}),
            "seed_scores": [i["score"] for i in seed_inter],
            "seed_correct": [i["correct"] for i in seed_inter],
            "seed_solved": None if is_ungraded(seed_inter[-1]) else bool(seed_inter[-1]["correct"]),
            "solved_at": solved_at,
            "ungraded": self.ungraded(state),
            "stopped": state.get("stopped", ""),
            "seed_interactions": [_slim(i) for i in seed_inter],
            "followups": state.get("followups", []),
            "followup_results": [_slim(i) for i in fups],
            "feedbacks": state.get("feedbacks", []),
            "single_turn": _slim(state.get("single_turn", {})),
            "session_summary": state.get("session_summary", ""),
            "summary_source": state.get("summary_source", ""),
            "transcript": state.get("transcript", []),
        }

    def trials_refused(self, run: Run) -> str | None:
        return None

    def trial_verdicts(self, record: dict[str, Any]) -> list[TrialVerdict]:
        """The session's first answer to its seed question (Score@1's verdict): the item is the session (a seed
        question and its repeat), its seed question the cluster."""
        first = (record.get("seed_interactions") or [None])[0]
        if first is None:
            return []
        return [TrialVerdict("target", record["seed_id"], trial_of(record)[0], graded_correct(first))]

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ok = metrics.ok_records(records)
        n_max = 1 + self.context(run).max_retries
        n_max = max([n_max, *(len(r["seed_scores"]) for r in ok)])
        rates = metrics.score_at_n_rates(ok, n_max)
        scores = [r["value"] for r in rates]
        judge = metrics.judge_rate(ok)
        out: dict[str, Any] = {
            "inputs": {"seed_questions": self.inputs(run)},
            "sessions": len(ok),
            "sessions_ungraded": sum(1 for r in ok if r.get("ungraded")),
            "answers_ungraded": sum(
                1 for r in ok for i in [*r["seed_interactions"], *r["followup_results"]] if is_ungraded(i)
            ),
            "judge": judge["value"],
            **{f"score@{n + 1}": s for n, s in enumerate(scores)},
            "denominators": {
                "judge": {k: judge[k] for k in ("n", "ungraded")},
                **{f"score@{n + 1}": {k: r[k] for k in ("n", "ungraded")} for n, r in enumerate(rates)},
            },
            "delta": (scores[-1] - scores[0]) if None not in (scores[-1], scores[0]) else None,
            "followup_accuracy": metrics.followup_accuracy(ok),
            "by_task": {
                t: {"sessions": len(rs), "judge": metrics.judge_score(rs), "score_at_n": metrics.score_at_n(rs, n_max)}
                for t, rs in metrics.by_task(ok).items()
            },
            "by_level": {
                lv: {
                    "sessions": len(rs),
                    "judge": metrics.judge_score(rs),
                    "score_at_n": metrics.score_at_n(rs, n_max),
                    "run_to_run": metrics.run_to_run_std(rs, n_max),
                }
                for lv, rs in metrics.by_level(ok).items()
            },
            "error_types": metrics.error_distribution(ok),
            "verbosity_bias": metrics.verbosity_bias(ok, n_max),
            "run_to_run": metrics.run_to_run_std(ok, n_max),
            "bootstrap": metrics.bootstrap_table(
                ok, resamples=self.batch(run).bootstrap_resamples, seed=run.config.seed
            ),
            "feedback_checks": metrics.feedback_checks(ok),
            "graded_by": metrics.graded_by(ok),
            "modification": dict(sorted(_count(r["modification"].get("status", "?") for r in ok).items())),
            "n_max": n_max,
            **metrics.intervals(ok, n_max),
        }
        out["comprehensive_summary"], out["summary_source"] = self._overall_summary(run, ok, out)
        return out

    def _overall_summary(self, run: Run, ok: list[dict[str, Any]], out: dict[str, Any]) -> tuple[str, str]:
        """Comprehensive summary of the Interview Report (section 3.2 (3), Appendix D.3)."""
        if not ok:
            return "", "none"
        fa = out["followup_accuracy"]
        at_n = ", ".join(
            f"@{n}=" + ("n/a" if out[f"score@{n}"] is None else f"{out[f'score@{n}']:.2f}")
            for n in range(1, out["n_max"] + 1)
        )
        overall = "n/a" if fa["overall"] is None else f"{fa['overall']:.2f}"
        scores = f"Score@n: {at_n}; follow-up accuracy overall {overall}"
        if not self.context(run).summarize or not any(r["session_summary"] for r in ok):
            return _code_overall(ok, out), "code"
        summaries = "\n".join(f"- {r['session_summary'][:600]}" for r in ok[:40] if r["session_summary"])
        from dyneval.prompts import load_prompt  # LangChain's prompt classes: not with `dyneval --help`

        try:
            text = (
                run.services.llm("evaluator")
                .text(
                    load_prompt("interview/interviewer_report_summary").render(summaries=summaries, scores=scores),
                    step="report_summary",
                )
                .strip()
            )
        except (InfraError, ModelError) as exc:
            return _code_overall(ok, out) + f" (interviewer summary failed: {exc})", "code"
        return (text, "interviewer") if text else (_code_overall(ok, out), "code")

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        inputs = summary.get("metrics", {}).get("inputs", {})
        return [
            Text(f"Seed questions: {inputs.get('seed_questions')}."),
            *report_blocks(run, summary.get("metrics", {}), records),
        ]


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _slim(i: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in i.items() if k != "check"}


def _code_overall(ok: list[dict[str, Any]], out: dict[str, Any]) -> str:
    graded = [r for r in ok if r["seed_solved"] is not None]
    solved = sum(1 for r in graded if r["seed_solved"])
    first = sum(1 for r in graded if r["seed_correct"][0])
    after = solved - first
    errs = {t: v["count"] for t, v in out["error_types"]["types"].items() if v["count"]}
    fa = out["followup_accuracy"]
    parts = [
        f"Solved {first}/{len(graded)} graded seed questions at the first answer and {solved}/{len(graded)} "
        f"in the end ({after} thanks to feedback)."
    ]
    if len(graded) < len(ok):
        parts.append(f"{len(ok) - len(graded)} session(s) stopped at an ungraded answer and are not counted.")
    if errs:
        parts.append("Most frequent error type: " + max(errs, key=errs.__getitem__) + ".")
    if fa["n"]:
        parts.append(f"Answered {fa['overall']:.0%} of {fa['n']} follow-up questions correctly.")
    return " ".join(parts)
