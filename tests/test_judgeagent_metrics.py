"""Difficulty control (Appendix B) and Algorithm 2 / Table 3 metrics against hand-computed values."""

from __future__ import annotations

import pytest

from dyneval.protocols.judgeagent.metrics import (
    difficulty_distribution,
    dynamic_scores,
    overall_score,
    validation_by_label,
    validation_metrics,
)
from dyneval.state.judgeagent import DifficultyConfigError, DifficultyControl


@pytest.mark.parametrize(
    "score,answered,expected",
    [
        (0.0, 3, "easy"),
        (1.5, 3, "easy"),  # avg 0.5 = t12 -> still easy
        (2.0, 3, "medium"),
        (3.0, 3, "medium"),  # avg 1.0 = t23 -> still medium
        (3.5, 3, "hard"),
        (4.0, 2, "hard"),
        (0.0, 0, "easy"),
    ],
)
def test_next_difficulty_hand_computed(score, answered, expected):
    assert DifficultyControl().next_difficulty(score, answered) == expected


def test_gains_and_unlabeled_questions():
    c = DifficultyControl()
    assert [c.gain("easy"), c.gain("medium"), c.gain("hard"), c.gain(None)] == [1.0, 1.5, 2.0, 1.5]
    # correct easy + correct hard + wrong medium: (1 + 2) / 3 = 1.0 -> medium
    assert c.next_difficulty(c.gain("easy") + c.gain("hard"), 3) == "medium"


def test_other_configurations_satisfying_appendix_b_are_accepted():
    c = DifficultyControl.parse("2,3,4", "1,2")
    assert c.next_difficulty(4.1, 2) == "hard" and c.gain(None) == 3


@pytest.mark.parametrize(
    "gains,thresholds,problem",
    [
        ("1,2,1.5", "0.6667,1.3333", "increase"),
        ("1,1.5,2.5", "0.5,1", "c1 + c3 = 2*c2"),
        ("1,1.5,2", "0.4,1", "t12 must be c2/3"),
        ("1,1.5,2", "0.5,1.2", "t23 must be 2*c2/3"),
        ("0.4,1.5,2.6", "0.5,1", "c1 > t12"),
        ("1,1.5", "0.5,1", "three gains"),
        ("a,b,c", "0.5,1", "numbers"),
    ],
)
def test_configurations_breaking_appendix_b_are_refused(gains, thresholds, problem):
    with pytest.raises(DifficultyConfigError, match=problem.replace("*", r"\*").replace("+", r"\+")):
        DifficultyControl.parse(gains, thresholds)


def rows(pairs, label=None):
    return [{"correct1": a, "correct2": b, "difficulty": label} for a, b in pairs]


def test_algorithm2_rates_over_all_questions_and_conditional_rates():
    # 10 questions: 6 right before; of them 1 turns wrong; of the 4 wrong, 3 turn right
    data = rows([(True, True)] * 5 + [(True, False)] + [(False, True)] * 3 + [(False, False)])
    m = validation_metrics(data)
    assert m["n"] == 10
    assert m["acc1"] == pytest.approx(0.6) and m["acc2"] == pytest.approx(0.8)
    assert m["cr"] == pytest.approx(0.3) and m["cte"] == pytest.approx(0.1)
    assert m["acc2"] == pytest.approx(m["acc1"] + m["cr"] - m["cte"])
    assert m["cr_given_wrong"] == pytest.approx(0.75) and m["cte_given_right"] == pytest.approx(1 / 6)


def test_validation_per_difficulty_label():
    data = rows([(True, True), (False, True)], "easy") + rows([(True, False)], "hard") + rows([(False, False)])
    by = validation_by_label(data)
    assert set(by) == {"overall", "easy", "hard", "unlabeled"}
    assert by["easy"]["cr"] == pytest.approx(0.5) and by["hard"]["cte"] == pytest.approx(1.0)
    assert by["unlabeled"]["cr_given_wrong"] == 0.0 and by["unlabeled"]["cte_given_right"] is None


RECORDS = [
    {
        "score": 4.5,
        "answered": 5,
        "base": [{"gain": 1.0, "correct": True}, {"gain": 0.0, "correct": False}, {"gain": 2.0, "correct": True}],
        "rounds": [
            {"round": 1, "status": "ok", "gain": 1.5, "difficulty": "medium"},
            {"round": 2, "status": "generation_failed", "difficulty": "hard"},
            {"round": 3, "status": "ok", "gain": 0.0, "difficulty": "hard"},
        ],
    },
    {
        "score": 2.0,
        "answered": 4,
        "base": [{"gain": 0.0, "correct": False}, {"gain": 1.0, "correct": True}, {"gain": 0.0, "correct": False}],
        "rounds": [
            {"round": 1, "status": "ok", "gain": 1.0, "difficulty": "easy"},
            {"round": 2, "status": "ok", "gain": 0.0, "difficulty": "medium"},
        ],
    },
]


def test_dynamic_scores_pool_running_sums_like_algorithm1():
    ds = dynamic_scores(RECORDS, 3)
    assert ds["base"] == pytest.approx(4 / 6)
    assert ds["@1"] == pytest.approx((4.5 + 2.0) / 8)
    assert ds["@2"] == pytest.approx((4.5 + 2.0) / 9)  # failed round adds nothing
    assert ds["@3"] == pytest.approx((4.5 + 2.0) / 10)
    assert overall_score(RECORDS) == pytest.approx(6.5 / 9)


def test_difficulty_distribution_counts_generated_questions_only():
    d = difficulty_distribution(RECORDS)
    assert d["counts"] == {"easy": 1, "medium": 2, "hard": 1} and d["total"] == 4
    assert d["share"]["medium"] == pytest.approx(0.5)
