"""Benchmark Grading (seed 000, section 3.1; Algorithm 1, lines 11-19).

The target answers every base question of the batch (concurrently); correctness is checked in code for
option letters and by the evaluator otherwise (:mod:`nodes.judgeagent.judging`). Questions without options
are asked and judged in the batch's answer format (``phrase`` or ``free``, :func:`judging.answer_format`).
Each correct answer adds the gain of its difficulty label (``c2`` when unlabeled, Appendix B rule R2); the
average over the graded answers decides the first extension difficulty (``DECIDE_DIFFICULTY``).

Ungraded answers (the evaluator failed after retries and one repair) are left out of ``sc_B`` and of
``RND_total`` alike: Appendix B's average is over answers known to be right or wrong. When no base answer
is graded there is nothing to decide from, so the extension starts at ``medium``, the level of an unlabeled
question (rule R2), and the unit is recorded as ``ungraded`` for resume to re-judge.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.judgeagent.common import options_block, question_text
from dyneval.nodes.judgeagent.judging import answer_format, grade_reply
from dyneval.prompts import load_prompt
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.services import services_of
from dyneval.state.judgeagent import BaseQuestion, JudgeAgentContext, JudgeAgentState

#: Starting extension level when no base answer could be graded (the level of an unlabeled question, R2).
NEUTRAL_DIFFICULTY = "medium"


def base_messages(q: BaseQuestion, fmt: str) -> list:
    if q.options:
        return load_prompt("judgeagent/target_answer_choice").render(
            question=q.question, options=options_block(q.options)
        )
    return load_prompt(f"judgeagent/target_answer_{fmt}").render(question=q.question)


def next_difficulty(ctx: JudgeAgentContext, score: float, answered: int, current: str | None = None) -> str:
    """The adaptive level, or the fixed one for the "w/o difficulty-adaptive" ablation.

    With no graded answer yet (``answered == 0``) the level does not move: ``current``, or
    :data:`NEUTRAL_DIFFICULTY` before the first decision.
    """
    if ctx.no_difficulty_adaptation:
        return ctx.fixed_difficulty
    if answered == 0:
        return current or NEUTRAL_DIFFICULTY
    return ctx.control().next_difficulty(score, answered)


def grade_question(ctx: JudgeAgentContext, q: BaseQuestion, fmt: str) -> dict[str, Any]:
    """Algorithm 1, lines 12-14 for one base question: the target's answer, its verdict and its gain."""
    svc = services_of(ctx)
    reply = svc.llm("target").text(base_messages(q, fmt), step="base_answer")
    verdict = grade_reply(
        svc, question_text(q), q.answer, reply, q.options, fmt=fmt, step="base_judge", jury=ctx.judge_jury
    )
    gain = ctx.control().gain(q.difficulty) if verdict["correct"] else 0.0
    return {"id": q.id, "question": q.question, "difficulty": q.difficulty, "reply": reply, "gain": gain, **verdict}


def base_totals(base: list[dict[str, Any]]) -> tuple[float, int]:
    """``sc_B`` and ``RND_total`` of the graded base answers (an ungraded answer counts neither way)."""
    return sum(b["gain"] for b in base), sum(1 for b in base if b["verdict"] != "ungraded")


def grade_benchmark(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    ctx = runtime.context
    questions = [BaseQuestion(**q) for q in state["batch"]]
    fmt = answer_format(ctx.answer_format, questions)
    base = parallel_map(lambda q: grade_question(ctx, q, fmt), questions)
    score, answered = base_totals(base)
    nxt = next_difficulty(ctx, score, answered)
    return {
        "answer_format": fmt,
        "base": base,
        "score": score,
        "answered": answered,
        "difficulty": nxt,
        "trajectory": [
            {
                "after": "base",
                "avg": score / answered if answered else None,
                "next": nxt,
                "ungraded": len(base) - answered,
            }
        ],
    }
