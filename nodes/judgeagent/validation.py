"""Validation of the evaluation (seed 000, section 4; Algorithm 2; Table 14).

The target answers the batch's base questions again with the batch's suggestions; correctness is checked
exactly as in Benchmark Grading (same answer format). The first answer is the one from Benchmark Grading
(the paper keeps "the responses to seed questions unchanged"), so the target is not asked twice for the same
thing. Each row keeps both verdicts (``verdict1``, ``verdict2``: correct / wrong / ungraded); a row with an
ungraded verdict enters no Algorithm 2 rate and is counted as ungraded. A batch whose feedback failed or
came back empty has no suggestions and is not validated (the graph skips this node); the protocol shows it
as unvalidated with its reason and resume redoes it.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.judgeagent.common import clip, question_text
from dyneval.nodes.judgeagent.judging import grade_reply, unwrap_json_answer
from dyneval.prompts import load_prompt
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.services import services_of
from dyneval.state.judgeagent import BaseQuestion, JudgeAgentContext, JudgeAgentState

SUGGESTION_CHARS = 2000
FORMAT_HINTS = {
    "choice": "The answer must be the letter of the correct option.",
    "phrase": "The answer must be short: a word or a phrase.",
    "free": "Answer completely and precisely, in a few sentences, conclusion first.",
}


def validate(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    svc = services_of(runtime.context)
    suggestions = clip(state["feedback"].get("suggestions", ""), SUGGESTION_CHARS)
    base = {b["id"]: b for b in state["base"]}
    prompt = load_prompt("judgeagent/target_answer_with_suggestions")
    fmt = state.get("answer_format") or "phrase"

    def one(q: BaseQuestion) -> dict[str, Any]:
        messages = prompt.render(
            question=question_text(q), suggestions=suggestions, format_hint=FORMAT_HINTS["choice" if q.options else fmt]
        )
        reply = svc.llm("target").text(messages, step="validation_answer")
        verdict = grade_reply(
            svc,
            question_text(q),
            q.answer,
            unwrap_json_answer(reply),
            q.options,
            fmt=fmt,
            step="validation_judge",
            jury=runtime.context.judge_jury,
        )
        first = base[q.id]
        return {
            "id": q.id,
            "question": q.question,
            "difficulty": q.difficulty,
            "verdict1": first["verdict"],
            "correct1": first["correct"],
            "verdict2": verdict["verdict"],
            "correct2": verdict["correct"],
            "reply2": reply,
            "how2": verdict["how"],
            **{f"{key}2": verdict[key] for key in ("reason", "error") if key in verdict},
        }

    return {"validation": parallel_map(one, [BaseQuestion(**x) for x in state["batch"]])}
