"""Deterministic problem handling for ATAD: normalise, check structure (Table 6), render, score.

Everything that can be checked in code is checked here before any LLM judgement:
sentence and choice counts, index ranges, duplicates, the blank of T3 and the
requested label of T2. Each failure is one reason string ``"<code>: <message>"``;
the code names the rejection kind in reports, the message goes back to the teacher.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dyneval.state.atad import N_CHOICES, TASKS

_ENUM = re.compile(r"^\s*(?:\(?\d{1,2}[.):]|\(?[A-Ea-e][.)]|[-*\u2022])\s+")
_BLANK = re.compile(r"_{2,}|\[blank\]|\(blank\)", re.IGNORECASE)


def _clean(text: Any) -> str:
    """Strip whitespace and a leading enumeration ("1. ", "(2)", "B) ", "- ") the model may add."""
    return _ENUM.sub("", str(text or "")).strip()


def normalize(task: str, problem: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``problem`` with cleaned sentences / choices (structure is not fixed here)."""
    out = dict(problem)
    for key in ("sentences", "choices"):
        if key in out and isinstance(out[key], list):
            out[key] = [_clean(x) for x in out[key]]
    for key in ("sentence", "first", "second"):
        if key in out:
            out[key] = str(out[key] or "").strip()
    return out


def _distinct_errors(items: list[str], what: str) -> list[str]:
    """Empty items (nothing but punctuation counts as empty: "...") and duplicates."""
    errors = []
    empty = [i + 1 for i, x in enumerate(items) if not re.search(r"\w", x)]
    if empty:
        errors.append(f"empty_{what}: {what} {empty} are empty")
    seen: dict[str, int] = {}
    for i, x in enumerate(items, 1):
        key = re.sub(r"\W+", " ", x.lower()).strip()
        if key and key in seen:
            errors.append(f"duplicate_{what}: {what} {seen[key]} and {i} are the same")
        seen.setdefault(key, i)
    return errors


def _index_error(answer: Any, n: int) -> list[str]:
    if not isinstance(answer, int) or isinstance(answer, bool):
        return [f"answer_type: the answer must be a number from 1 to {n}"]
    if not 1 <= answer <= n:
        return [f"answer_range: answer {answer} is not between 1 and {n}"]
    return []


def structure_errors(task: str, problem: dict[str, Any], *, target_coherent: bool | None = None) -> list[str]:
    """Reasons why ``problem`` violates the Table 6 structure of ``task`` (empty list = well-formed).

    A problem that repeats the prompt's format example is no new problem (weak
    teachers copy it): it is rejected like any other structure fault.
    """
    errors = _shape_errors(task, problem, target_coherent)
    if not errors and copies_example(task, problem):
        errors.append("copies_format_example: two or more options repeat the format example verbatim")
    return errors


def _shape_errors(task: str, problem: dict[str, Any], target_coherent: bool | None) -> list[str]:
    spec = TASKS[task]
    errors: list[str] = []
    if spec.kind in ("sentences", "order"):
        sentences = problem.get("sentences")
        if not isinstance(sentences, list):
            return ["missing_sentences: give the paragraph as a list of sentences"]
        n = len(sentences)
        if not spec.min_sentences <= n <= spec.max_sentences:
            want = (
                f"{spec.min_sentences}"
                if spec.min_sentences == spec.max_sentences
                else f"{spec.min_sentences} to {spec.max_sentences}"
            )
            errors.append(f"sentence_count: expected {want} sentences, got {n}")
        errors += _distinct_errors([str(s) for s in sentences], "sentences")
        if spec.kind == "sentences":
            errors += _index_error(problem.get("answer"), n)
        else:
            coherent = problem.get("coherent")
            if not isinstance(coherent, bool):
                errors.append("label_type: coherent must be true or false")
            elif target_coherent is not None and coherent != target_coherent:
                want = "coherent" if target_coherent else "scrambled (incoherent)"
                errors.append(f"label_mismatch: the order was requested to be {want}, but coherent={coherent}")
        return errors
    choices = problem.get("choices")
    if not isinstance(choices, list):
        return [f"missing_choices: give exactly {N_CHOICES} choices as a list"]
    if len(choices) != N_CHOICES:
        errors.append(f"choice_count: expected {N_CHOICES} choices, got {len(choices)}")
    errors += _distinct_errors([str(c) for c in choices], "choices")
    errors += _index_error(problem.get("answer"), len(choices))
    if spec.kind == "blank":
        sentence = str(problem.get("sentence") or "")
        if not sentence:
            errors.append("missing_sentence: the sentence with the blank is empty")
        elif len(_BLANK.findall(sentence)) != 1:
            errors.append(
                f"blank_count: the sentence must contain exactly one blank ___, found {len(_BLANK.findall(sentence))}"
            )
    else:  # bridge
        for key, label in (("first", "first paragraph"), ("second", "second paragraph")):
            if len(str(problem.get(key) or "").split()) < 5:
                errors.append(f"missing_paragraph: the {label} is missing or shorter than five words")
        if str(problem.get("first") or "").strip() and problem.get("first") == problem.get("second"):
            errors.append("duplicate_paragraphs: the two paragraphs are identical")
    return errors


def gold(task: str, problem: dict[str, Any]) -> Any:
    """The correct answer: a 1-based option number, or the T2 boolean."""
    return problem["coherent"] if TASKS[task].kind == "order" else problem["answer"]


def options_of(task: str, problem: dict[str, Any]) -> list[str]:
    kind = TASKS[task].kind
    return list(problem.get("choices") or []) if kind in ("blank", "bridge") else list(problem.get("sentences") or [])


def render(task: str, problem: dict[str, Any]) -> str:
    """The problem as the student sees it (numbered options, no answer)."""
    kind = TASKS[task].kind
    lines: list[str] = []
    if kind == "blank":
        lines += [f"Sentence: {problem.get('sentence', '')}", "Choices:"]
    elif kind == "bridge":
        lines += [
            f"Paragraph A: {problem.get('first', '')}",
            f"Paragraph B: {problem.get('second', '')}",
            "Candidate bridge sentences:",
        ]
    lines += [f"{i}. {x}" for i, x in enumerate(options_of(task, problem), 1)]
    return "\n".join(lines)


def problem_key(task: str, problem: dict[str, Any]) -> str:
    """What makes two problems the same problem: the task and the text the student sees (:func:`render`), with
    whitespace collapsed and case folded, so copies that differ only there are one problem."""
    return task + "\x1f" + " ".join(render(task, problem).split()).casefold()


def render_with_answer(task: str, problem: dict[str, Any]) -> str:
    """The problem plus its intended answer (for the orchestrator, reviewers and the teacher)."""
    answer = gold(task, problem)
    if TASKS[task].kind == "order":
        tail = f"Correct answer: {'coherent order' if answer else 'incoherent order'} (coherent={answer})"
    else:
        tail = f"Correct answer: option {answer}"
    return render(task, problem) + "\n" + tail


def is_correct(task: str, problem: dict[str, Any], predicted: Any) -> bool:
    """Compare a student's answer to the gold answer in code (no LLM)."""
    want = gold(task, problem)
    if TASKS[task].kind == "order":
        return isinstance(predicted, bool) and predicted == want
    return isinstance(predicted, int) and not isinstance(predicted, bool) and predicted == want


#: What the teacher fills in, per Table 6 structure kind (the schema field names).
STRUCTURE_TEXT: dict[str, str] = {
    "sentences": "sentences = list of {n} sentences forming one paragraph (one sentence per item, no numbering); "
    "answer = number of the anomalous sentence (1 = first).",
    "order": "sentences = list of 5 sentences in the order the solver will see them (no numbering); "
    "coherent = true if that order is coherent, false if it is scrambled.",
    "blank": "sentence = one sentence with exactly one blank written as ___; choices = list of 5 different "
    "words or phrases for the blank; answer = number of the inappropriate choice (1 = first).",
    "bridge": "first = paragraph A; second = paragraph B; choices = list of 5 different candidate sentences to "
    "put between them; answer = number of the candidate that does not connect them (1 = first).",
}

#: A tiny example of the output shape per structure kind, on an unrelated subject (small models need it).
EXAMPLE_TEXT: dict[str, str] = {
    "sentences": '{"sentences": ["Bees collect nectar.", "They turn it into honey.", "Honey feeds the hive in '
    'winter.", "Granite forms from magma.", "Workers guard the entrance."], "answer": 4}',
    "order": '{"sentences": ["The bread was eaten.", "Flour was mixed with water.", "The dough was baked.", '
    '"The dough rose.", "The wheat was ground."], "coherent": false}',
    "blank": '{"sentence": "The lecture was so ___ that half the audience fell asleep.", "choices": ["dull", '
    '"tedious", "monotonous", "thrilling", "dry"], "answer": 4}',
    "bridge": '{"first": "Rivers carry sediment to the sea.", "second": "Deltas therefore grow each year.", '
    '"choices": ["The sediment settles where the river slows.", "...", "...", "...", "..."], "answer": 3}',
}

#: The question the student answers, per structure kind.
QUESTION_TEXT: dict[str, str] = {
    "sentences": "Exactly one sentence below is anomalous: {anomaly}. Which sentence is it?",
    "order": "Are the sentences below in a coherent order (topic flow, causes before effects, time order)?",
    "blank": "Each choice could fill the blank. Exactly one of them is inappropriate in this context: {anomaly}. "
    "Which choice is it?",
    "bridge": "Each candidate could be placed between paragraph A and paragraph B. Exactly one fails to connect "
    "them coherently. Which candidate is it?",
}

ANSWER_FORMAT: dict[bool, str] = {
    False: "Give the number of your choice as answer (1 = first) and a short explanation.",
    True: "Set coherent to true or false and give a short explanation.",
}


def structure_text(task: str) -> str:
    spec = TASKS[task]
    n = (
        str(spec.min_sentences)
        if spec.min_sentences == spec.max_sentences
        else f"{spec.min_sentences} or {spec.max_sentences}"
    )
    return (
        STRUCTURE_TEXT[spec.kind].replace("{n}", n) + "\nShape of the answer (example on another subject, "
        "write your own on the topic): " + EXAMPLE_TEXT[spec.kind]
    )


def question_text(task: str) -> str:
    spec = TASKS[task]
    return QUESTION_TEXT[spec.kind].replace("{anomaly}", spec.anomaly)


def answer_format(task: str) -> str:
    return ANSWER_FORMAT[TASKS[task].kind == "order"]


def copies_example(task: str, problem: dict[str, Any] | None) -> bool:
    """True when at least two options repeat the format example verbatim (weak teachers copy it)."""
    if not problem:
        return False
    example = json.loads(EXAMPLE_TEXT[TASKS[task].kind])
    shown = {x.lower().strip() for x in example.get("sentences", []) + example.get("choices", []) if x != "..."}
    return len(shown.intersection(str(x).lower().strip() for x in options_of(task, problem))) >= 2
