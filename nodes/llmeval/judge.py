"""Judge node: 0-3 stars per answer with the Figure 11 rubric (LLMEval-3 section 2.3, appendix B).

Deterministic checks come first: an empty answer gets 0 stars without a call;
for true/false and multiple-choice questions the verdict or option letter of
the answer is compared with the key in code, and the judge's rating is kept
inside the band the rubric allows (correct -> 2-3, wrong -> 0-1), so the LLM
only grades the explanation there. The stars always come from the judge: one
that returns no valid rating after retries and one repair (``ModelError``)
leaves the answer ``ungraded`` (no stars, whatever the code check says), so it
counts neither for nor against the model; the session counts it in
``ungraded`` and resume re-judges exactly those answers.
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.llmeval.augment import tf_value
from dyneval.nodes.llmeval.common import bank_of
from dyneval.prompts import load_prompt
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import services_of
from dyneval.state.errors import ModelError
from dyneval.state.judgecheck import SPLIT, majority
from dyneval.state.llmeval import JudgeRating, LLMEvalContext, LLMEvalState
from dyneval.stores.bank_sessions import question_text
from dyneval.stores.choices import key_letters
from dyneval.stores.question_bank import QuestionBank

_TF = re.compile(r"\b(true|false|correct|incorrect|yes|no)\b", re.I)
#: "answer is C", "Answer: (C)", "option C", or a line starting "C." / "(C)" / "C" alone (not the article "A ...")
_LETTER = re.compile(
    r"(?:(?i:\banswer)(?:\s+(?i:is)|:)?\s*\(?([A-J])\b|(?i:\boption)\s+\(?([A-J])\b"
    r"|^\s*\(?([A-J])(?:[.):\]]|\s*$))",
    re.M,
)


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
    response = item.get("response") or ""
    if item["qtype"] == "true_false":
        key, said = tf_value(item["answer"]), response_verdict(response)
        return None if key is None or said is None else key == said
    if item["qtype"] == "mcq":
        letter = response_letters(response)
        return None if letter is None else [letter] == key_letters(item["answer"])
    return None


def judge_item(llm: RoleLLM, item: dict[str, Any]) -> tuple[int | None, str, str]:
    """``(stars, reason, status)`` for one answered slot; status is judged / banded / empty / ungraded."""
    response = (item.get("response") or "").strip()
    if not response:
        return 0, "empty answer", "empty"
    verdict = code_verdict(item)
    messages = load_prompt("llmeval/judge_rate").render(
        question=question_text(item["question"], item.get("options")),
        response=response,
        reference=item["answer"] + (f" ({item['explanation']})" if item.get("explanation") else ""),
    )
    try:
        rating = llm.structured(JudgeRating, messages, step="judge")
    except ModelError as exc:
        return None, f"ungraded: the judge gave no valid rating: {exc}"[:600], "ungraded"
    stars = rating.rating
    if verdict is True and stars < 2:
        return 2, f"{rating.reason} [raised to 2: the answer is correct]", "banded"
    if verdict is False and stars > 1:
        return 1, f"{rating.reason} [lowered to 1: the answer is wrong]", "banded"
    return stars, rating.reason, "judged"


def jury_item(llms: list[RoleLLM], item: dict[str, Any]) -> tuple[int | None, str, str]:
    """:func:`judge_item` by each judge of a jury (``--judge-jury``), combined by majority vote of the stars
    (:func:`state.judgecheck.majority`, ungraded members do not vote). A vote without a majority leaves the
    answer without stars, status ``split`` (final, shown in the session's judge statuses and unscored count):
    a disagreement is never turned into a score. A single judge is :func:`judge_item` itself."""
    if len(llms) == 1:
        return judge_item(llms[0], item)
    results = [judge_item(llm, item) for llm in llms]
    stars = [None if s is None else str(s) for s, _, _ in results]
    votes = ", ".join("-" if s is None else s for s in stars)
    vote = majority(stars)
    if vote is None:
        return None, f"ungraded: no jury member gave a valid rating (votes {votes})", "ungraded"
    if vote == SPLIT:
        return None, f"split: the jury has no majority (votes {votes})", "split"
    _, reason, status = next(r for r, s in zip(results, stars) if s == vote)
    return int(vote), f"jury majority ({votes}): {reason}", status


def judge_session(bank: QuestionBank, session_id: str, llms: list[RoleLLM], concurrency: int) -> tuple[int, int]:
    """Judge every completed slot not judged yet (or left ungraded) concurrently; returns (judged, ungraded)."""
    todo = [
        i
        for i in bank.judged_items(session_id)
        if i["status"] == "completed" and i["judge_status"] in (None, "ungraded")
    ]
    for it in todo:
        q = bank.get(it["question_uuid"])
        it["options"] = q.options if q else None

    def one(item: dict[str, Any]) -> None:
        stars, reason, status = jury_item(llms, item)
        bank.set_judgement(session_id, item["position"], stars, reason, status)

    parallel_map(one, todo, workers=concurrency)
    items = bank.judged_items(session_id)
    return sum(i["stars"] is not None for i in items), sum(i["judge_status"] == "ungraded" for i in items)


def judges(ctx: LLMEvalContext) -> list[RoleLLM]:
    """The judges of a run: the ``judge_jury`` models, else the evaluator role."""
    svc = services_of(ctx)
    return [svc.model(ref, role="evaluator") for ref in ctx.judge_jury] if ctx.judge_jury else [svc.llm("evaluator")]


def judge_answers(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Judge the target's answers (and the reference model's, when there is one) with the evaluator role, or
    with the ``judge_jury`` models by majority vote."""
    ctx = runtime.context
    bank = bank_of(ctx)
    llms = judges(ctx)
    judged, ungraded = judge_session(bank, state["session_id"], llms, int(ctx.judge_concurrency))
    reference_ungraded = 0
    if state.get("reference_session_id"):
        _, reference_ungraded = judge_session(bank, state["reference_session_id"], llms, int(ctx.judge_concurrency))
    return {"judged": judged, "ungraded": ungraded, "reference_ungraded": reference_ungraded}
