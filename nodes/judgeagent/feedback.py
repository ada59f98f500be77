"""Evaluation Feedback (seed 000, section 3.3; Algorithm 1, line 30; Table 13).

The evaluator reads the batch's whole Q&A history and returns flaws_knowledge, flaws_capability,
comprehensive_performance and suggestions. No answer leakage (section 4: suggestions are produced "without
directly providing the correct answer or background knowledge of seed questions"): for base questions the
history shows the question, the target's answer and whether it was judged correct, never the gold answer or
the reference texts; generated questions show their generated answer (the interviewer wrote it). A code check
then flags suggestions that quote a free-form gold answer which the question text itself does not contain.
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.judgeagent.common import clip, question_text
from dyneval.prompts import load_prompt
from dyneval.runtime.services import services_of
from dyneval.state.errors import ModelError
from dyneval.state.judgeagent import BaseQuestion, Feedback, JudgeAgentContext, JudgeAgentState
from dyneval.stores.choices import normalize_answer

REPLY_CHARS = 200
QUESTION_CHARS = 500


def _verdict(item: dict[str, Any]) -> str:
    """How a verdict reads in the history; an ungraded answer is shown as such, never as incorrect."""
    if item.get("verdict") == "ungraded":
        return "not judged (the judge failed)"
    return "correct" if item.get("correct") else "incorrect"


def feedback_history(state: JudgeAgentState) -> str:
    """The Q&A list of Table 13, without the gold answers of base questions."""
    lines: list[str] = []
    n = 0
    base = {b["id"]: b for b in state.get("base", [])}
    for q in (BaseQuestion(**x) for x in state["batch"]):
        n += 1
        b = base.get(q.id, {})
        lines += [
            f"Q{n} (base question, difficulty {q.difficulty or 'unlabeled'}): {clip(question_text(q), QUESTION_CHARS)}",
            f"   Model's answer: {clip(b.get('reply', ''), REPLY_CHARS)}",
            f"   Judged: {_verdict(b)} (correct answer withheld)",
        ]
    for r in state.get("rounds", []):
        if r.get("status") != "ok":
            continue
        n += 1
        lines += [
            f"Q{n} (follow-up question, difficulty {r['difficulty']}): {clip(r['question'], QUESTION_CHARS)}",
            f"   Correct answer: {r['answer']}",
            f"   Model's answer: {clip(r.get('reply', ''), REPLY_CHARS)}",
            f"   Judged: {_verdict(r)}",
        ]
    return "\n".join(lines)


def leaked_answers(state: JudgeAgentState, text: str) -> list[str]:
    """Base questions whose free-form gold answer the feedback quotes although their question does not."""
    found = []
    norm = normalize_answer(text)
    for q in (BaseQuestion(**x) for x in state["batch"]):
        gold = normalize_answer(q.answer)
        if q.options or len(gold) < 3 or gold in normalize_answer(q.question):
            continue
        if re.search(rf"\b{re.escape(gold)}\b", norm):
            found.append(q.id)
    return found


def feedback(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    svc = services_of(runtime.context)
    messages = load_prompt("judgeagent/evaluator_feedback").render(history=feedback_history(state))
    try:
        out = svc.llm("evaluator").structured(Feedback, messages, step="feedback")
    except ModelError as exc:
        return {"feedback": {"status": "failed", "reason": str(exc)[:300], "suggestions": ""}}
    data = out.model_dump()
    full = " ".join(str(v) for v in data.values())
    return {
        "feedback": {
            "status": "ok" if data["suggestions"].strip() else "empty",
            **data,
            "leak_suspects": leaked_answers(state, full),
        }
    }
