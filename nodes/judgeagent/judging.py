"""Correctness of target answers (Algorithm 1, lines 13 and 23; Algorithm 2, lines 11-12).

Deterministic checks first: a multiple-choice answer is the option letter read from the reply (or the one
option whose text the reply quotes) compared in code; a free-form answer is accepted in code when it equals
or contains the reference answer (normalised, whole words). Only the remaining free-form answers go to the
evaluator (``evaluator_judge`` prompt). A judge that gives no valid verdict after its repair attempt makes
the answer count as wrong, recorded as ``how = "judge_error"``.
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

from prompts import load_prompt
from runtime.errors import ModelError
from runtime.services import Services
from state.judgeagent import Verdict

from nodes.judgeagent.common import LETTERS

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """SQuAD-style answer normalisation: lower case, no punctuation or articles, single spaces."""
    text = str(text or "").lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def choice_letter(reply: str, options: list[str]) -> str | None:
    """The option letter a reply chooses, or None when it names no single option."""
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
    norm = normalize(text)
    hits = [LETTERS[i] for i, opt in enumerate(options) if normalize(opt) and re.search(
        rf"\b{re.escape(normalize(opt))}\b", norm)]
    return hits[0] if len(hits) == 1 else None


def contains_answer(reply: str, reference: str) -> bool:
    """Code check for free-form answers: the normalised reference appears as whole words in the reply."""
    ref, got = normalize(reference), normalize(reply)
    if not ref or not got:
        return False
    return ref == got or re.search(rf"\b{re.escape(ref)}\b", got) is not None


def unwrap_json_answer(reply: str) -> str:
    """The ``answer`` value of a Table 14 JSON reply, or the reply itself when it is not such JSON."""
    text = str(reply or "").strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            data = json.loads(text[start:end + 1])
        except json.JSONDecodeError:
            return text
        if isinstance(data, dict) and "answer" in data:
            return str(data["answer"])
    return text


def judge_free(svc: Services, question: str, reference: str, reply: str, *, step: str) -> dict[str, Any]:
    """Free-form correctness: code check, then the evaluator."""
    if not str(reply or "").strip():
        return {"correct": False, "how": "empty"}
    if contains_answer(reply, reference):
        return {"correct": True, "how": "code"}
    messages = load_prompt("judgeagent/evaluator_judge").render(question=question, reference=reference,
                                                               response=reply)
    try:
        verdict = svc.llm("evaluator").structured(Verdict, messages, step=step)
    except ModelError as exc:
        return {"correct": False, "how": "judge_error", "error": str(exc)[:300]}
    return {"correct": bool(verdict.correct), "how": "evaluator"}


def grade_reply(svc: Services, question: str, reference: str, reply: str, options: list[str] | None, *,
                step: str) -> dict[str, Any]:
    """Correctness of ``reply``: multiple choice in code, free-form via :func:`judge_free`."""
    if options:
        letter = choice_letter(reply, options)
        return {"correct": letter == reference, "how": "code", "choice": letter}
    return judge_free(svc, question, reference, reply, step=step)
