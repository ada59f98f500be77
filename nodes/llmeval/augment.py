"""Question augmentation and format checks of LLMEval-3 (section 2.1, appendix A.2).

* :func:`expand_mcq`: a multiple-choice question with ``n`` options becomes ``n``
  true/false questions "is it correct to put option X in the blank?" (Figure 7);
  the answer is ``true`` exactly for the keyed option(s).
* :func:`check_format`: format validation of appendix A.2 (consistent option
  counts and answer letters for multiple choice, one answer per blank for
  fill-in-the-blank); :func:`stores.choices.key_letters` / :func:`tf_value` read answer keys.
  An imported answer is read against its options by :func:`stores.choices.option_letters` first (a letter,
  a 0-based index or an option's text becomes the letter), so a stored key is always option letters.
* Redundancy checks (duplicates among split questions, unique UUIDs) are done by
  :func:`redundant_variants` and by the importer (:mod:`nodes.llmeval.bankio`).
* :func:`rewrite_material`: the teacher's LLM rewrite of a material-analysis question
  into true/false statements; counts and texts of its output are checked in code.
"""

from __future__ import annotations

import re
import uuid as uuidlib

from dyneval.prompts import load_prompt
from dyneval.runtime.services import Services
from dyneval.state.errors import ModelError
from dyneval.state.llmeval import TFStatements
from dyneval.stores.choices import key_letters
from dyneval.stores.question_bank import Question, content_hash

#: Markers of an answer slot in a question ("( )", "（ ）", "____").
BLANK_RE = re.compile(r"\(\s*\)|（\s*）|_{3,}")
MIN_OPTIONS, MAX_OPTIONS = 2, 10
_VARIANT_NS = uuidlib.UUID("6f1c7d0e-2b7a-4d55-9a3e-0c1f5e2d9b11")
_REWRITE_NS = uuidlib.UUID("0b7e1d52-8a61-4c3f-b2f4-5d8e1a9c7e23")
#: The true/false form of one option (Figure 7); {stem} ends with the answer slot.
TF_TEMPLATE = (
    '{stem}\nIs it correct to place the answer "{option}" in the blank? Answer true or false and give your reason.'
)


def check_format(q: Question) -> list[tuple[str, str]]:
    """Format problems of one question as ``(field, message)`` pairs (empty = valid)."""
    problems: list[tuple[str, str]] = []
    if q.qtype == "mcq":
        options = q.options or []
        if not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
            problems.append(
                ("options", f"a multiple-choice question needs {MIN_OPTIONS}-{MAX_OPTIONS} options, got {len(options)}")
            )
        if any(not str(o).strip() for o in options):
            problems.append(("options", "empty option"))
        if len({str(o).strip().casefold() for o in options}) != len(options):
            problems.append(("options", "two options are identical"))
        letters = key_letters(q.answer)
        if not letters:
            problems.append(("answer", f"a multiple-choice answer must be option letters, got {q.answer!r}"))
        elif any(ord(ch) - 65 >= len(options) for ch in letters):
            problems.append(("answer", f"answer {q.answer!r} names an option beyond the {len(options)} given"))
    elif q.options:
        problems.append(("options", f"options given for a {q.qtype} question"))
    if q.qtype == "true_false" and tf_value(q.answer) is None:
        problems.append(("answer", f"a true/false answer must be true or false, got {q.answer!r}"))
    if q.qtype == "fill_blank":
        blanks = len(BLANK_RE.findall(q.question))
        answers = [a for a in re.split(r"[;；]", q.answer) if a.strip()]
        if blanks == 0:
            problems.append(("question", "a fill-in-the-blank question has no blank ('( )' or '___')"))
        elif blanks != len(answers):
            problems.append(("answer", f"{blanks} blank(s) but {len(answers)} answer(s) (separate answers with ';')"))
    return problems


def tf_value(text: str) -> bool | None:
    """``True``/``False`` for a true/false key (true, false, yes, no, correct, incorrect, T, F ...)."""
    word = text.strip().strip(".").casefold()
    if word in {"true", "t", "yes", "correct", "right", "对", "正确", "√"}:
        return True
    if word in {"false", "f", "no", "incorrect", "wrong", "错", "错误", "×"}:
        return False
    return None


def _stem(question: str) -> str:
    """The question with its answer slot normalised to '( )' (appended when it has none)."""
    if BLANK_RE.search(question):
        return BLANK_RE.sub("( )", question, count=1)
    return question.rstrip() + " ( )"


def expand_mcq(q: Question) -> list[Question]:
    """Figure 7: one true/false variant per option; UUIDs derived from the parent (re-import is idempotent)."""
    letters = set(key_letters(q.answer))
    stem, options = _stem(q.question), q.options or []
    keyed = ", ".join(str(options[ord(ch) - 65]) for ch in sorted(letters))
    out = []
    for i, option in enumerate(options):
        correct = chr(65 + i) in letters
        why = f"The correct option is: {keyed}." + (f" {q.explanation}" if q.explanation else "")
        out.append(
            Question(
                uuid=str(uuidlib.uuid5(_VARIANT_NS, f"{q.uuid}:{i}")),
                discipline=q.discipline,
                sub_discipline=q.sub_discipline,
                qtype="true_false",
                question=TF_TEMPLATE.format(stem=stem, option=str(option).strip()),
                answer="true" if correct else "false",
                explanation=why,
                source=q.source,
                parent_uuid=q.uuid,
            )
        )
    return out


def redundant_variants(variants: list[Question]) -> list[Question]:
    """Variants that duplicate an earlier split question (equal normalised text) - dropped by the caller."""
    seen: set[str] = set()
    dups = []
    for v in variants:
        digest = content_hash(v.question)
        if digest in seen:
            dups.append(v)
        seen.add(digest)
    return dups


def rewrite_material(svc: Services, q: Question) -> tuple[list[Question], str | None]:
    """``(true/false variants, problem)``: the teacher decomposes ``q``; counts and texts are checked in code."""
    messages = load_prompt("llmeval/teacher_rewrite").render(question=q.question, answer=q.answer)
    try:
        out = svc.llm("teacher").structured(TFStatements, messages, step="rewrite")
    except ModelError as exc:
        return [], f"rewrite failed: {exc}"
    if len(out.statements) != len(out.truths):
        return [], f"{len(out.statements)} statements but {len(out.truths)} truth values"
    texts = [s.strip() for s in out.statements]
    if not 2 <= len(texts) <= 5 or any(len(t) < 10 for t in texts) or len(set(texts)) != len(texts):
        return [], "need 2-5 distinct statements of at least 10 characters"
    variants = [
        Question(
            uuid=str(uuidlib.uuid5(_REWRITE_NS, f"{q.uuid}:{t}")),
            discipline=q.discipline,
            sub_discipline=q.sub_discipline,
            qtype="true_false",
            question=f"True or false? {t} Give your reason.",
            answer="true" if truth else "false",
            explanation=f"Derived from the material-analysis question {q.uuid}.",
            source=q.source,
            parent_uuid=q.uuid,
        )
        for t, truth in zip(texts, out.truths)
    ]
    return variants, None
