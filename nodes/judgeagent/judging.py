"""Correctness of target answers (Algorithm 1, lines 13 and 23; Algorithm 2, lines 11-12).

Three outcomes (:mod:`state.verdicts`): correct, wrong, ungraded.

Deterministic checks first, and only where code can decide: a multiple-choice reply that names an option
letter is compared with the gold letter in code; an empty reply is wrong; a free-form reply that IS the
reference after normalisation (nothing more, nothing less) is correct. No substring or keyword rule marks
an answer correct: "It is not Harl; it is Orden" goes to the evaluator for the reference "Harl", and so does
a multiple-choice reply that names no letter. The evaluator judges against the full reference with the
prompt of the run's answer format (``phrase``: the same fact; ``free``: the reference's key points, see
:func:`answer_format`). A judge that gives no valid verdict after retries and its one repair leaves the
answer ``ungraded`` with the reason; it never counts as wrong. With ``judge_jury`` each jury model judges in the
evaluator's place and the majority verdict counts (:func:`judge_free`); a vote without a majority leaves the
answer ungraded with ``how`` ``split``: counted, never correct or wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import Services
from dyneval.state.errors import ModelError
from dyneval.state.judgeagent import BaseQuestion, Verdict
from dyneval.state.judgecheck import SPLIT, jury_vote
from dyneval.state.verdicts import outcome
from dyneval.stores.choices import LETTERS, normalize_answer

_SENTENCE_END = re.compile(r"[.!?](?:\s+|$)")

#: A free-form reference with more words than this, or with two sentences, needs a free-form answer.
PHRASE_MAX_WORDS = 6


def is_phrase(reference: str) -> bool:
    """A reference short enough to be asked for as "a word or a phrase" (one sentence, few words)."""
    text = str(reference or "").strip()
    return len(text.split()) <= PHRASE_MAX_WORDS and len(_SENTENCE_END.findall(text.rstrip(".!?") + ".")) <= 1


def answer_format(requested: str, questions: Iterable[BaseQuestion]) -> Literal["phrase", "free"]:
    """The answer format of a run: ``phrase`` or ``free`` as requested, or chosen from the data for ``auto``.

    ``auto`` gives ``free`` as soon as one free-form reference is longer than a phrase (:func:`is_phrase`):
    asking for "a word or a phrase" when the reference is several sentences makes every verdict meaningless,
    while a free-form answer judged against a short reference still is a fair test.
    """
    if requested in ("phrase", "free"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"answer format must be auto, phrase or free, not {requested!r}")
    return "free" if any(not q.options and not is_phrase(q.answer) for q in questions) else "phrase"


def choice_letter(reply: str, options: list[str]) -> str | None:
    """The option letter a reply names ("B", "B.", "(B) ...", "the answer is B"), or None when it names none.

    Option texts are not matched: a reply that only quotes an option ("not Harl") goes to the evaluator.
    """
    text = str(reply or "").strip()
    if not text:
        return None
    valid = LETTERS[: len(options)]
    patterns = [
        rf"^\W*([{valid}])(?:$|[.):,\n]|\s+-)",  # "B", "B.", "(B) ...", "B - ..."
        rf"(?i:answer|option|choice)\s*(?:is|:)?\s*\(?([{valid}])\b(?![a-z])",
        rf"\(([{valid}])\)",
    ]
    for pat in patterns:
        m = re.search(pat, text)
        if m:
            return m.group(1)
    return None


def is_exact(reply: str, reference: str) -> bool:
    """The reply IS the reference after normalisation (the only free-form case code may accept)."""
    ref = normalize_answer(reference)
    return bool(ref) and normalize_answer(reply) == ref


def unwrap_json_answer(reply: str) -> str:
    """The ``answer`` value of a Table 14 JSON reply, or the reply itself when it is not such JSON."""
    text = str(reply or "").strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            data = json.loads(text[start : end + 1])
        except json.JSONDecodeError:
            return text
        if isinstance(data, dict) and "answer" in data:
            return str(data["answer"])
    return text


def judge_free(
    svc: Services,
    question: str,
    reference: str,
    reply: str,
    *,
    fmt: str = "phrase",
    step: str,
    llm: RoleLLM | None = None,
    jury: list[str] | None = None,
) -> dict[str, Any]:
    """Free-form correctness: empty -> wrong, exact normalised match -> correct, else the evaluator (or ``llm``,
    a judge-check jury member, in its place; or each ``jury`` model, ``--judge-jury``, by majority vote).

    Returns ``verdict`` (correct / wrong / ungraded), ``correct`` (None when ungraded), ``how`` (``empty``,
    ``exact``, ``evaluator``, ``ungraded`` or ``split``: the jury had no majority), the evaluator's ``reason``
    when it judged, when ungraded ``error`` and with a jury its tally ``jury`` (``correct, wrong, ungraded``; an
    ungraded member does not vote).
    """
    if not str(reply or "").strip():
        return {"verdict": "wrong", "correct": False, "how": "empty"}
    if is_exact(reply, reference):
        return {"verdict": "correct", "correct": True, "how": "exact"}
    prompt = "judgeagent/evaluator_judge_free" if fmt == "free" else "judgeagent/evaluator_judge"
    messages = load_prompt(prompt).render(question=question, reference=reference, response=reply)
    if llm is not None or not jury:
        return _judge(llm or svc.llm("evaluator"), messages, step)
    vote, keep, tally = jury_vote([_judge(svc.model(ref, role="evaluator"), messages, step) for ref in jury])
    if vote == SPLIT:
        return {
            "verdict": "ungraded",
            "correct": None,
            "how": "split",
            "jury": tally,
            "error": f"split: the judge jury has no majority ({tally})",
        }
    return {**keep, "jury": tally}


def _judge(llm: RoleLLM, messages: list, step: str) -> dict[str, Any]:
    try:
        verdict = llm.structured(Verdict, messages, step=step)
    except ModelError as exc:
        return {"verdict": "ungraded", "correct": None, "how": "ungraded", "error": str(exc)[:300]}
    return {
        "verdict": outcome(bool(verdict.correct)),
        "correct": bool(verdict.correct),
        "how": "evaluator",
        "reason": verdict.reason.strip(),
    }


def grade_reply(
    svc: Services,
    question: str,
    reference: str,
    reply: str,
    options: list[str] | None,
    *,
    fmt: str = "phrase",
    step: str,
    llm: RoleLLM | None = None,
    jury: list[str] | None = None,
) -> dict[str, Any]:
    """Correctness of ``reply``: an option letter in code, anything else via :func:`judge_free` (``llm`` and
    ``jury``: see there)."""
    if options:
        letter = choice_letter(reply, options)
        if letter is not None:
            return {
                "verdict": outcome(letter == reference),
                "correct": letter == reference,
                "how": "code",
                "choice": letter,
            }
        gold = LETTERS.index(reference) if reference in LETTERS[: len(options)] else None
        full = f"{reference}. {options[gold]}" if gold is not None else reference
        return judge_free(svc, question, full, reply, fmt="phrase", step=step, llm=llm, jury=jury) | {"choice": None}
    return judge_free(svc, question, reference, reply, fmt=fmt, step=step, llm=llm, jury=jury)
