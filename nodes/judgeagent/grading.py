"""Benchmark Grading (seed 000, section 3.1; Algorithm 1, lines 11-19).

The target answers every base question of the batch (concurrently); correctness is checked in code for
multiple choice and by the evaluator for free-form answers (:mod:`nodes.judgeagent.judging`). Each correct
answer adds the gain of its difficulty label (``c2`` when unlabeled, Appendix B rule R2); the average over
the answered questions decides the first extension difficulty (``DECIDE_DIFFICULTY``).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from prompts import load_prompt
from runtime.concurrency import parallel_map
from runtime.services import services_of
from state.judgeagent import BaseQuestion, JudgeAgentContext, JudgeAgentState
from nodes.judgeagent.common import options_block, question_text
from nodes.judgeagent.judging import grade_reply


def base_messages(q: BaseQuestion) -> list:
    if q.options:
        return load_prompt("judgeagent/target_answer_choice").render(question=q.question,
                                                                    options=options_block(q.options))
    return load_prompt("judgeagent/target_answer_free").render(question=q.question)


def next_difficulty(ctx: JudgeAgentContext, score: float, answered: int) -> str:
    """The adaptive level, or the fixed one for the "w/o difficulty-adaptive" ablation."""
    if ctx.no_difficulty_adaptation:
        return ctx.fixed_difficulty
    return ctx.control().next_difficulty(score, answered)


def grade_benchmark(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    ctx = runtime.context
    svc = services_of(ctx)
    control = ctx.control()
    questions = [BaseQuestion(**q) for q in state["batch"]]

    def one(q: BaseQuestion) -> dict[str, Any]:
        reply = svc.llm("target").text(base_messages(q), step="base_answer")
        verdict = grade_reply(svc, question_text(q), q.answer, reply, q.options, step="base_judge")
        gain = control.gain(q.difficulty) if verdict["correct"] else 0.0
        return {"id": q.id, "difficulty": q.difficulty, "reply": reply, "gain": gain, **verdict}

    base = parallel_map(one, questions)
    score = sum(b["gain"] for b in base)
    answered = len(base)
    nxt = next_difficulty(ctx, score, answered)
    return {"base": base, "score": score, "answered": answered, "difficulty": nxt,
            "trajectory": [{"after": "base", "avg": score / answered if answered else 0.0, "next": nxt}]}
