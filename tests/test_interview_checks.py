"""Deterministic checks of the interview: answer leaks in feedback, final answers, follow-up types, statuses."""

from __future__ import annotations

import random

import pytest

from dyneval.nodes.interview import checks
from dyneval.nodes.interview.interviewer import modification_problem


@pytest.mark.parametrize(
    "feedback, answer",
    [
        ("Close! The bakery fills 14 bags.", "14"),
        ("You should get $1,200 in total.", "1200"),
        ("The result is 7.50 dollars.", "7.5"),
        ("Half of it, 3/4, is what remains", "0.75"),
        ("Remember the capital is ottawa, ONTARIO.", "Ottawa, Ontario"),
        ("So the answer=54.", "54"),
    ],
)
def test_leak_check_finds_the_reference_answer_in_constructed_feedback(feedback, answer):
    assert checks.leaks_answer(feedback, answer)
    redacted = checks.redact(feedback, answer)
    assert not checks.leaks_answer(redacted, answer)
    assert checks.REDACTED in redacted


@pytest.mark.parametrize(
    "feedback, answer",
    [
        ("Check how you combined 48 and 36 before dividing.", "14"),
        ("The value 140 is not what the question asks.", "14"),  # 140 is a different number
        ("Think about which province the city lies in.", "Ottawa, Ontario"),
        ("", "14"),
    ],
)
def test_leak_check_lets_guidance_without_the_answer_through(feedback, answer):
    assert not checks.leaks_answer(feedback, answer)
    assert checks.redact(feedback, answer) == feedback


def test_long_reference_leaks_only_on_a_copied_run_of_eight_words():
    solution = (
        "The Earth has seasons because its rotation axis is tilted by about 23.5 degrees relative to "
        "the plane of its orbit around the Sun."
    )
    copied = "Hint: its rotation axis is tilted by about 23.5 degrees relative to the plane, think about it."
    assert checks.leaks_answer(copied, solution)
    assert not checks.leaks_answer("Think about the tilt of the axis and the angle of sunlight.", solution)


@pytest.mark.parametrize(
    "response, value, symbolic",
    [
        ("48 + 36 = 84, 84 / 6 = 14\nFinal answer: 14", 14.0, False),
        ("So he makes $1,200.\n#### 1200", 1200.0, False),
        ("Steps... The answer is 7.5 km.", 7.5, False),
        ("The total is 5y + 2.\nFinal answer: 5y + 2", None, True),
        ("no idea", None, False),
        ("First 3 then 4 then finally 9", 9.0, False),
    ],
)
def test_final_answer_extraction(response, value, symbolic):
    _, got, sym = checks.final_answer(response)
    assert got == value and sym == symbolic


def test_math_check_matches_numerically_and_defers_on_symbolic_answers():
    assert checks.check_math_answer("Final answer: 14.0", "14")["match"] is True
    assert checks.check_math_answer("Final answer: 15", "14")["match"] is False
    assert checks.check_math_answer("I cannot solve it", "14")["match"] is False
    assert checks.check_math_answer("Final answer: 2x", "14")["match"] is None
    assert checks.check_math_answer("Final answer: 14", "x^2")["match"] is None


def test_followup_type_follows_table_1_by_task_and_outcome():
    rng = random.Random(0)
    assert checks.followup_type("math", True, rng) == "rationale"
    assert checks.followup_type("math", False, rng) == "clarification"
    assert checks.followup_type("generic", True, rng) == "rationale"
    assert checks.followup_type("factual", True, rng) == "additional_facts"
    assert checks.followup_type("factual", False, rng) == "additional_facts"
    assert checks.followup_type("instruction", False, rng) == "correction"
    solved = {checks.followup_type("instruction", True, random.Random(i)) for i in range(20)}
    assert solved == {"modification_of_conditions", "additional_explanation"}


def test_factual_status_and_precision():
    facts = [{"fact": "a", "supported": True}, {"fact": "b", "supported": False}]
    assert checks.precision(facts) == 0.5
    assert checks.factual_status(facts, True) == "partially_correct"
    assert checks.factual_status([facts[0]], True) == "complete"
    assert checks.factual_status([facts[0]], False) == "partially_correct"
    assert checks.factual_status([facts[1]], True) == "incorrect"
    assert checks.factual_status([], True) == "incorrect"


def test_error_type_labels_are_normalised():
    assert checks.error_type("calculation error") == "Calculation"
    assert checks.error_type("Misinterpretation") == "Misinterpret"
    assert checks.error_type("conceptual") == "Concept"
    assert checks.error_type("something else") == "N/A"


def test_math_modification_must_hide_a_value_and_add_none():
    original = "A train travels at 80 km/h for 2 hours. How far does it go?"
    assert modification_problem("math", original, "A train travels at v km/h for 2 hours. How far does it go?") is None
    assert modification_problem("math", original, original) == "identical to the original question"
    assert "hidden" in modification_problem("math", original, "A train goes 80 km/h for 2 hours. How far?")
    assert "introduces" in modification_problem("math", original, "A train travels at 95 km/h for x hours.")
    assert modification_problem("paraphrase", "Say hi.", "  ") == "empty question"
    solution = "The Earth has seasons because its rotation axis is tilted relative to the plane of its orbit."
    copied = "The Earth has seasons because its rotation axis is tilted relative to the plane?"
    assert modification_problem("factual", "Why seasons?", copied, solution) == "copies the reference solution"
    assert modification_problem("factual", "Why seasons?", "How does axial tilt change daylight?", solution) is None
