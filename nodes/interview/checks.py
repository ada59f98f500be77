"""Deterministic checks of the interview, done in code next to (never instead of) LLM judgement.

* final-answer extraction and numeric comparison for math answers (Appendix C.1:
  binary correctness of the final answer),
* answer-leak detection and redaction for feedback (section 4.2, "Feedback Criteria":
  the interviewer must not provide the correct answer directly; Appendix C.4.1),
* the follow-up type by task and outcome (Table 1, Appendix D.2.2),
* the long-form status and score from labelled atomic facts (FActScore precision, App. C.1).

None of them marks an answer correct on its own: a correct verdict always needs the grader model.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from dyneval.state.interview import FEEDBACK_KINDS

_NUM = re.compile(r"(?<![\w.])[-+]?\$?\s?\d[\d,]*(?:\.\d+)?(?:\s?/\s?\d+(?:\.\d+)?)?%?")
_FINAL = re.compile(r"(?:final answer|answer is|answer:|####)\s*[:=]?\s*(.+)", re.IGNORECASE)
_SYMBOLIC = re.compile(r"(\d[a-zA-Z]\b|\b[a-zA-Z]\s*[*+\-/^]\s*\w|\b[xyzwnk]\b)")
_WORD = re.compile(r"[a-z0-9]+")
REDACTED = "[withheld]"


# -- numbers and final answers ---------------------------------------------------------------------


def parse_number(text: str) -> float | None:
    """A number written as ``18``, ``$1,200``, ``7.5``, ``3/4`` or ``40%`` (``None`` if it is none of these)."""
    s = str(text or "").strip().rstrip(".").replace("$", "").replace(",", "").replace(" ", "")
    if not s:
        return None
    s = s.rstrip("%")
    try:
        if "/" in s:
            num, _, den = s.partition("/")
            value = float(num) / float(den)
        else:
            value = float(s)
    except (ValueError, ZeroDivisionError):
        return None
    return value  # "40%" compares as 40, the way a reference answer states it


def numbers_in(text: str) -> list[tuple[float, tuple[int, int]]]:
    """Every number in ``text`` with its span."""
    out = []
    for m in _NUM.finditer(str(text or "")):
        value = parse_number(m.group(0))
        if value is not None:
            out.append((value, m.span()))
    return out


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def final_answer(response: str) -> tuple[str, float | None, bool]:
    """``(segment, value, symbolic)`` of the interviewee's final answer.

    The segment is the text after the last "final answer"/"answer is"/"####" marker,
    else the last line holding a number. ``symbolic`` is true when the segment is an
    expression in unknowns (e.g. ``5y``), which only an LLM grader can judge.
    """
    text = str(response or "").strip()
    segment = ""
    matches = list(_FINAL.finditer(text))
    if matches:
        segment = matches[-1].group(1).strip().splitlines()[0] if matches[-1].group(1).strip() else ""
    if not segment:
        lines = [ln for ln in text.splitlines() if numbers_in(ln)]
        segment = lines[-1].strip() if lines else ""
    if not segment:
        return "", None, False
    symbolic = bool(_SYMBOLIC.search(re.sub(r"\$|dollars?|cents?|units?", "", segment)))
    nums = numbers_in(segment)
    if symbolic or not nums:
        return segment, None, symbolic
    return segment, nums[-1][0], False


def numeric_reference(answer: str) -> float | None:
    """The reference answer as a number, when it is one."""
    direct = parse_number(answer)
    if direct is not None:
        return direct
    nums = numbers_in(answer)
    if len(nums) != 1:
        return None
    start, end = nums[0][1]
    rest = str(answer)[:start] + " " + str(answer)[end:]
    if re.search(r"[\^*/+=]|\b[a-zA-Z]\b", rest):
        return None  # an expression such as x^2 or 2x + 1, not a number with a unit
    return nums[0][0]


def check_math_answer(response: str, reference: str) -> dict[str, Any]:
    """Code check of a math answer: ``match`` is True/False, or None when code cannot decide."""
    ref = numeric_reference(reference)
    segment, value, symbolic = final_answer(response)
    if ref is None:
        return {"match": None, "extracted": segment, "why": "reference is not a number"}
    if symbolic:
        return {"match": None, "extracted": segment, "why": "symbolic answer"}
    if value is None:
        return {"match": False, "extracted": segment, "why": "no final number in the answer"}
    return {"match": same_number(value, ref), "extracted": segment, "why": "numeric comparison"}


# -- answer leaks in feedback --------------------------------------------------------------------


def _norm_words(text: str) -> list[str]:
    return _WORD.findall(str(text or "").lower())


def leak_spans(feedback: str, reference_answer: str) -> list[tuple[int, int]]:
    """Spans of ``feedback`` that disclose the reference final answer (empty = no leak).

    Numeric answers: any number in the feedback equal to the answer. Short text
    answers (<= 12 words): the answer's words in sequence, case-insensitive. Long
    answers: any run of 8 consecutive words of the answer.
    """
    ref = str(reference_answer or "").strip()
    if not ref:
        return []
    value = numeric_reference(ref)
    if value is not None:
        return [span for v, span in numbers_in(feedback) if same_number(v, value)]
    words = _norm_words(ref)
    if not words:
        return []
    n = len(words) if len(words) <= 12 else 8
    spans: list[tuple[int, int]] = []
    grams = {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    tokens = [(m.group(0), m.span()) for m in _WORD.finditer(feedback.lower())]
    for i in range(len(tokens) - n + 1):
        if tuple(t for t, _ in tokens[i : i + n]) in grams:
            spans.append((tokens[i][1][0], tokens[i + n - 1][1][1]))
    return spans


def leaks_answer(feedback: str, reference_answer: str) -> bool:
    return bool(leak_spans(feedback, reference_answer))


def redact(feedback: str, reference_answer: str) -> str:
    """``feedback`` with every span disclosing the answer replaced by ``[withheld]``."""
    spans = sorted(leak_spans(feedback, reference_answer))
    out, last = [], 0
    for start, end in spans:
        if start < last:
            continue
        out.append(feedback[last:start])
        out.append(REDACTED)
        last = end
    out.append(feedback[last:])
    return "".join(out)


def repeats_previous(feedback: str, previous: list[str]) -> bool:
    """True if ``feedback`` is the same text as an earlier feedback (guidelines: never repeat)."""
    key = " ".join(_norm_words(feedback))
    return any(key == " ".join(_norm_words(p)) for p in previous)


# -- normalising labels -------------------------------------------------------------------------


def error_type(value: str) -> str:
    """One of Concept / Misinterpret / Calculation / N/A from a grader's free label."""
    v = str(value or "").strip().lower()
    for name, keys in (
        ("Concept", ("concept",)),
        ("Misinterpret", ("misinterp", "misunder", "interpret")),
        ("Calculation", ("calcul", "arithmetic", "comput")),
    ):
        if any(k in v for k in keys):
            return name
    return "N/A"


def feedback_kind(value: str) -> str:
    v = str(value or "").strip().lower().replace(" ", "_").replace("-", "_")
    for kind in FEEDBACK_KINDS:
        if kind.split("_")[0] in v:
            return kind
    return "other"


# -- long-form facts ----------------------------------------------------------------------------


def precision(facts: list[dict[str, Any]]) -> float:
    """Factual precision: supported facts / all facts (0 when the answer states nothing)."""
    return sum(1 for f in facts if f.get("supported")) / len(facts) if facts else 0.0


def factual_status(facts: list[dict[str, Any]], complete: bool) -> str:
    """complete / partially_correct / incorrect (STEM feedback generator, Appendix D.2.1)."""
    p = precision(facts)
    if facts and p == 1.0 and complete:
        return "complete"
    return "partially_correct" if p > 0 else "incorrect"


# -- follow-up type (Table 1) -------------------------------------------------------------------


def followup_type(task: str, solved: bool, rng: random.Random) -> str:
    """The Table 1 follow-up type for a session outcome.

    math / generic: rationale when solved, clarification (by error type) when failed;
    factual: additional facts either way; instruction following: correction when
    failed, else modification of conditions or additional explanation.
    """
    if task == "factual":
        return "additional_facts"
    if task == "instruction":
        if not solved:
            return "correction"
        return rng.choice(["modification_of_conditions", "additional_explanation"])
    return "rationale" if solved else "clarification"
