"""Table 6 structure checks reject malformed problems of every task type with a reason; ladder parsing."""

from __future__ import annotations

import pytest

from dyneval.nodes.atad.problems import copies_example, is_correct, normalize, render, structure_errors
from dyneval.state.atad import level_for, parse_ladder

FIVE = ["Alpha rises.", "Beta falls.", "Gamma waits.", "Delta turns.", "Epsilon ends."]
CHOICES = ["bright", "dim", "loud", "quiet", "warm"]
VALID = {
    "T1": {"sentences": FIVE + ["Zeta closes."], "answer": 6},
    "T2": {"sentences": FIVE, "coherent": False},
    "T3": {"sentence": "The room was ___ at night.", "choices": CHOICES, "answer": 3},
    "T4": {
        "first": "Markets opened early today in the city.",
        "second": "Prices therefore rose before noon today.",
        "choices": [f"Bridge number {i} links them." for i in range(5)],
        "answer": 2,
    },
    "T5": {"sentences": FIVE, "answer": 1},
    "T6": {"sentences": FIVE, "answer": 5},
    "T7": {"sentences": FIVE, "answer": 2},
}


def codes(errors):
    return {e.split(":", 1)[0] for e in errors}


@pytest.mark.parametrize("task", sorted(VALID))
def test_well_formed_problem_of_every_task_passes(task):
    assert structure_errors(task, VALID[task]) == []


@pytest.mark.parametrize("task", ["T1", "T2", "T5", "T6", "T7"])
def test_wrong_sentence_count_is_rejected_with_reason(task):
    problem = dict(VALID[task], sentences=FIVE[:4])
    errors = structure_errors(task, problem)
    assert "sentence_count" in codes(errors)
    assert any("got 4" in e for e in errors)


def test_t1_accepts_six_but_not_seven_sentences():
    assert structure_errors("T1", {"sentences": FIVE + ["Six."], "answer": 2}) == []
    assert "sentence_count" in codes(structure_errors("T1", {"sentences": FIVE + ["Six.", "Seven."], "answer": 2}))


@pytest.mark.parametrize("task", ["T1", "T3", "T4", "T5", "T6", "T7"])
@pytest.mark.parametrize("answer", [0, 7, -1])
def test_answer_index_out_of_range_is_rejected(task, answer):
    errors = structure_errors(task, dict(VALID[task], answer=answer))
    assert "answer_range" in codes(errors), errors


@pytest.mark.parametrize("task", ["T3", "T4"])
def test_duplicate_choices_are_rejected(task):
    choices = list(VALID[task]["choices"])
    choices[4] = choices[1].upper()  # same text up to case and punctuation
    errors = structure_errors(task, dict(VALID[task], choices=choices))
    assert any(e.startswith("duplicate_choices") and "2 and 5" in e for e in errors)


@pytest.mark.parametrize("task", ["T3", "T4"])
def test_wrong_choice_count_is_rejected(task):
    errors = structure_errors(task, dict(VALID[task], choices=VALID[task]["choices"][:4], answer=1))
    assert "choice_count" in codes(errors)


@pytest.mark.parametrize("task", ["T1", "T2", "T5", "T6", "T7"])
def test_duplicate_sentences_are_rejected(task):
    sentences = list(VALID[task]["sentences"])
    sentences[3] = sentences[0]
    assert "duplicate_sentences" in codes(structure_errors(task, dict(VALID[task], sentences=sentences)))


def test_t3_needs_exactly_one_blank():
    assert "blank_count" in codes(structure_errors("T3", dict(VALID["T3"], sentence="No gap here.")))
    assert "blank_count" in codes(structure_errors("T3", dict(VALID["T3"], sentence="Two ___ gaps ___ here.")))


def test_t4_needs_two_real_paragraphs():
    assert "missing_paragraph" in codes(structure_errors("T4", dict(VALID["T4"], second="Too short.")))


def test_t2_label_must_match_the_requested_order():
    errors = structure_errors("T2", VALID["T2"], target_coherent=True)
    assert "label_mismatch" in codes(errors)
    assert structure_errors("T2", VALID["T2"], target_coherent=False) == []


def test_missing_lists_are_reported_not_crashing():
    assert codes(structure_errors("T1", {"answer": 1})) == {"missing_sentences"}
    assert codes(structure_errors("T3", {"sentence": "a ___ b", "answer": 1})) == {"missing_choices"}


def test_normalize_strips_enumerations_the_model_adds():
    p = normalize("T1", {"sentences": ["1. Alpha rises.", "(2) Beta falls.", "- Gamma waits."], "answer": 1})
    assert p["sentences"] == ["Alpha rises.", "Beta falls.", "Gamma waits."]


def test_enumerated_copies_become_duplicates_after_normalizing():
    p = normalize("T5", {"sentences": [f"{i}. Same text" for i in range(1, 6)], "answer": 1})
    assert "duplicate_sentences" in codes(structure_errors("T5", p))


def test_render_hides_answer_and_is_correct_compares_in_code():
    text = render("T3", VALID["T3"])
    assert "3. loud" in text and "answer" not in text.lower()
    assert is_correct("T3", VALID["T3"], 3) and not is_correct("T3", VALID["T3"], 2)
    assert not is_correct("T3", VALID["T3"], True)  # a bool is not an option number
    assert is_correct("T2", VALID["T2"], False) and not is_correct("T2", VALID["T2"], 0)


def test_default_ladder_escalates_after_one_two_and_four_successes():
    ladder = parse_ladder("easy:0,hard:1,extreme:2,impossible:4")
    assert [ladder[level_for(ladder, s)][0] for s in range(6)] == [
        "easy",
        "hard",
        "extreme",
        "extreme",
        "impossible",
        "impossible",
    ]


@pytest.mark.parametrize("bad", ["", "easy:1,hard:2", "easy:0,hard:0", "easy:0,hard", "easy:0,hard:x"])
def test_bad_ladders_are_refused(bad):
    with pytest.raises(ValueError):
        parse_ladder(bad)


def test_verbatim_copies_of_the_format_example_are_rejected():
    copied = {
        "sentences": ["Bees collect nectar.", "They turn it into honey.", "Own one.", "Own two.", "Own three."],
        "answer": 3,
    }
    assert copies_example("T5", copied)
    assert [e.split(":")[0] for e in structure_errors("T5", copied)] == ["copies_format_example"]
    assert not copies_example("T5", VALID["T5"]) and not structure_errors("T5", VALID["T5"])
    assert not copies_example("T3", VALID["T3"])


def test_placeholder_choices_count_as_empty():
    bridge = {**VALID["T4"], "choices": [VALID["T4"]["choices"][0], "...", "...", "…", "- -"]}
    assert [e.split(":")[0] for e in structure_errors("T4", bridge)] == ["empty_choices"]
