"""Judge node: 0-3 stars per answer with the Figure 11 rubric (LLMEval-3 section 2.3, appendix B).

Deterministic checks come first: an empty answer gets 0 stars without a call;
for true/false and multiple-choice questions the verdict or option letter of
the answer is compared with the key in code, and the judge's rating is kept
inside the band the rubric allows (correct -> 2-3, wrong -> 0-1), so the LLM
only grades the explanation there. A judge that returns no valid rating after
one repair (``ModelError``) falls back to the code verdict when there is one
(correct -> 2, wrong -> 0); otherwise the answer is left unscored and counted
in ``judge_failures`` (it never silently counts as 0 or 3).
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from nodes.llmeval.common import bank_of
from prompts import load_prompt
from runtime.concurrency import parallel_map
from runtime.errors import ModelError
from runtime.llm import RoleLLM
from runtime.services import services_of
from state.llmeval import JudgeRating, LLMEvalContext, LLMEvalState
from stores.question_bank import QuestionBank, question_text

_TF = re.compile(r"\b(true|false|correct|incorrect|yes|no)\b", re.I)
#: "answer is C", "Answer: (C)", "option C", or a line starting "C." / "(C)" / "C" alone (not the article "A ...")
_LETTER = re.compile(r"(?:(?i:\banswer)(?:\s+(?i:is)|:)?\s*\(?([A-J])\b|(?i:\boption)\s+\(?([A-J])\b"
                     r"|^\s*\(?([A-J])(?:[.):\]]|\s*$))", re.M)


def response_verdict(response: str) -> bool | None:
    """The true/false verdict an answer commits to (its first true/false word), or ``None``."""
    m = _TF.search(response)
    if not m:
        return None
    return m.group(1).lower() in {"true", "correct", "yes"}


def response_letters(response: str) -> str | None:
    """The option letter an answer commits to ("C", "Answer: C", "(C) ..."), or ``None``."""
    m = _LETTER.search(response)
    return next(g for g in m.groups() if g) if m else None


def code_verdict(item: dict[str, Any]) -> bool | None:
    """Is the answer's committed verdict/letter right? ``None`` when code cannot tell (free-form answers)."""
    from protocols.llmeval.augment import answer_letters, tf_value

    response = item.get("response") or ""
    if item["qtype"] == "true_false":
        key, said = tf_value(item["answer"]), response_verdict(response)
        return None if key is None or said is None else key == said
    if item["qtype"] == "mcq":
        said = response_letters(response)
        return None if said is None else [said] == answer_letters(item["answer"])
    return None


def judge_item(llm: RoleLLM, item: dict[str, Any]) -> tuple[int | None, str, str]:
    """``(stars, reason, status)`` for one answered slot; status is judged / banded / fallback / empty / failed."""
    response = (item.get("response") or "").strip()
    if not response:
        return 0, "empty answer", "empty"
    verdict = code_verdict(item)
    messages = load_prompt("llmeval/judge_rate").render(
        question=question_text(item["question"], item.get("options")), response=response,
        reference=item["answer"] + (f" ({item['explanation']})" if item.get("explanation") else ""))
    try:
        rating = llm.structured(JudgeRating, messages, step="judge")
    except ModelError as exc:
        if verdict is None:
            return None, f"judge gave no valid rating: {exc}", "failed"
        return (2 if verdict else 0), "judge gave no valid rating; stars from the code check of the answer", \
            "fallback"
    stars = rating.rating
    if verdict is True and stars < 2:
        return 2, f"{rating.reason} [raised to 2: the answer is correct]", "banded"
    if verdict is False and stars > 1:
        return 1, f"{rating.reason} [lowered to 1: the answer is wrong]", "banded"
    return stars, rating.reason, "judged"


def judge_session(bank: QuestionBank, session_id: str, llm: RoleLLM, concurrency: int) -> tuple[int, int]:
    """Judge every completed, not yet judged slot of a session concurrently; returns (judged, failures)."""
    todo = [i for i in bank.judged_items(session_id)
            if i["status"] == "completed" and i["judge_status"] in (None, "failed")]
    for it in todo:
        q = bank.get(it["question_uuid"])
        it["options"] = q.options if q else None

    def one(item: dict[str, Any]) -> None:
        stars, reason, status = judge_item(llm, item)
        bank.set_judgement(session_id, item["position"], stars, reason, status)

    parallel_map(one, todo, workers=concurrency)
    items = bank.judged_items(session_id)
    return sum(i["stars"] is not None for i in items), sum(i["judge_status"] == "failed" for i in items)


def judge_answers(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Judge the target's answers (and the reference model's, when there is one) with the evaluator role."""
    ctx = runtime.context
    bank = bank_of(ctx)
    llm = services_of(ctx).llm("evaluator")
    judged, failed = judge_session(bank, state["session_id"], llm, int(ctx.judge_concurrency))
    if state.get("reference_session_id"):
        judge_session(bank, state["reference_session_id"], llm, int(ctx.judge_concurrency))
    return {"judged": judged, "judge_failures": failed}

