"""LLMEval-3 formulas against hand-computed values and the paper's own tables."""

from __future__ import annotations

import json
import math

import pytest

from dyneval.nodes.llmeval.scoring import absolute_score, discipline_scores, relative_score
from dyneval.protocols.llmeval.metrics import (
    cohen_kappa,
    elo,
    mask_tail,
    mean,
    pairwise_outcomes,
    population_variance,
    recalled,
    replay_match,
    sample_variance,
    spearman,
    stability,
)


def test_absolute_score_is_sum_over_n_times_three_times_100():
    # (3 + 2 + 0 + 1) / (4 * 3) * 100 = 50
    assert absolute_score([3, 2, 0, 1]) == pytest.approx(50.0)
    assert absolute_score([3] * 7) == pytest.approx(100.0)
    assert absolute_score([]) is None  # nothing scored: no number


def test_discipline_scores_are_on_a_ten_point_scale():
    # A: (3 + 0) / 6 * 10 = 5.0 ; B: 2 / 3 * 10 = 6.667
    got = discipline_scores([("A", 3), ("A", 0), ("B", 2)])
    assert got == {"A": pytest.approx(5.0), "B": pytest.approx(20 / 3)}


def test_relative_score_reproduces_table_1():
    # Table 1: GPT-4o S = 82.51, reference Doubao-1.5-Thinking-Pro S = 93.67 -> R = 88.09; DeepSeek-R1 -> 97.40
    assert round(relative_score(82.51, 93.67), 2) == 88.09
    assert round(relative_score(91.23, 93.67), 2) == 97.40
    assert relative_score(50.0, 0.0) is None


def test_paradigm_variance_is_the_population_variance_of_table_2():
    assert round(mean([85.27, 85.60, 86.87]), 2) == 85.91
    assert round(population_variance([85.27, 85.60, 86.87]), 2) == 0.48
    assert round(population_variance([91.23, 89.33, 88.43]), 2) == 1.36
    assert round(population_variance([90.37, 86.60, 88.40]), 2) == 2.37  # Table 8, DeepSeek-V3


def test_stability_variance_is_the_sample_variance_of_table_9():
    assert sample_variance([92.21, 92.58, 93.93, 94.15, 93.45]) == pytest.approx(0.71, abs=0.01)
    assert sample_variance([88.08, 90.21, 91.50, 90.69, 90.48]) == pytest.approx(1.63, abs=0.01)
    # the paper rounds its unrounded trials: 0.505 vs printed 0.51
    assert sample_variance([96.48, 96.87, 98.10, 98.02, 97.53]) == pytest.approx(0.51, abs=0.01)


def test_cohen_kappa_matches_hand_computation():
    # p_o = 5/6, p_e = (4*3 + 2*3) / 36 = 0.5 -> kappa = (5/6 - 1/2) / (1/2) = 2/3
    assert cohen_kappa([0, 1, 1, 0, 1, 1], [0, 1, 0, 0, 1, 1]) == pytest.approx(2 / 3)
    assert cohen_kappa([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    # perfect disagreement on a balanced binary set: p_o = 0, p_e = 0.5 -> -1
    assert cohen_kappa([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_quadratic_weighted_kappa_matches_hand_computation():
    # weights (i-j)^2/4; observed disagreement 0.25/3, expected 1.25/3 -> 1 - 0.2 = 0.8
    assert cohen_kappa([0, 1, 2], [0, 2, 2], weights="quadratic") == pytest.approx(0.8)


def test_kappa_of_raters_agreeing_on_one_constant_label_is_one_not_nan():
    # scikit-learn's 0/0 here is NaN, which would poison summary.json; perfect agreement is 1
    assert cohen_kappa([2, 2, 2], [2, 2, 2]) == 1.0
    assert cohen_kappa([True] * 4, [True] * 4) == 1.0
    assert cohen_kappa([3, 3], [3, 3], weights="quadratic") == 1.0
    # one rater constant, the other not: p_o = p_e -> 0, a number
    assert cohen_kappa([1, 1, 1, 1], [1, 0, 1, 0]) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        cohen_kappa([0, 1], [0, 1], weights="linear")


def test_spearman_uses_average_ranks_for_ties():
    # ranks of y: [1, 2, 3.5, 5, 3.5]; rank deviations dx = [-2,-1,0,1,2], dy = [-2,-1,0.5,2,0.5]: 8 / sqrt(10 * 9.5)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


def test_spearman_of_a_constant_ranking_is_a_number_not_nan():
    # two constant rankings agree; a constant one says nothing about a varying one (scipy gives NaN for both)
    assert spearman([50.0, 50.0, 50.0], [7, 7, 7]) == 1.0
    assert spearman([50.0, 50.0, 50.0], [1, 2, 3]) == 0.0


def test_elo_updates_match_hand_computation():
    r = elo([("a", "b", 1.0)])
    assert r == {"a": pytest.approx(1016.0), "b": pytest.approx(984.0)}
    # then b beats a: E_a = 1 / (1 + 10^((984 - 1016) / 400)) = 0.545922 -> a = 1016 - 32 * 0.545922
    r = elo([("a", "b", 1.0), ("a", "b", 0.0)])
    assert r["a"] == pytest.approx(1016 - 32 * 0.5459215, abs=1e-4)
    assert r["a"] + r["b"] == pytest.approx(2000.0)


def test_pairwise_outcomes_compare_stars_on_shared_questions_only():
    matrix = {"m1": {"q1": 3, "q2": 1}, "m2": {"q1": 2, "q2": 1, "q3": 0}}
    assert pairwise_outcomes(matrix, ["q1", "q2", "q3"]) == [("m1", "m2", 1.0), ("m1", "m2", 0.5)]


def test_stability_recovers_a_clear_ranking_and_reports_sample_variance():
    qs = [f"q{i}" for i in range(60)]
    matrix = {
        "strong": {q: 3 for q in qs},
        "mid": {q: (3 if i % 2 else 0) for i, q in enumerate(qs)},
        "weak": {q: (3 if i % 5 == 0 else 0) for i, q in enumerate(qs)},
    }
    out = stability(matrix, reference="strong", sizes=[20, 60], trials=3, seed=1)
    assert out["ranking"] == ["strong", "mid", "weak"]
    assert out["full"]["strong"] == pytest.approx(100.0)
    assert out["full"]["mid"] == pytest.approx(50.0)
    assert out["sizes"]["60"]["spearman_relative"] == pytest.approx(1.0)
    assert out["sizes"]["60"]["spearman_elo"] == pytest.approx(1.0)
    values = [t["mid"] for s in out["sizes"].values() for t in s["trials"]]
    assert out["variance"]["mid"] == pytest.approx(sample_variance(values))
    assert out["variance"]["strong"] == 0.0
    json.dumps(out)  # serialisable for summary.json


def test_replay_needs_two_of_three_matching_completions():
    prefix, tail = mask_tail("the quick brown fox jumps over the lazy dog near the river bank today")
    # 14 words, 30 % masked -> the last 4 words
    assert prefix.endswith("dog near") and tail == "the river bank today"
    assert replay_match("The river bank, today.", tail)
    assert replay_match("the river bank today and more words after it", tail)
    assert not replay_match("in a field far away", tail)
    assert recalled([True, True, False]) and not recalled([True, False, False])
    assert mask_tail("too short") is None


def test_stability_scores_each_model_on_its_own_questions_against_the_reference():
    """The paper's design: models get different samples; the reference replays each one (equation 2)."""
    ref = {f"q{i}": 3 for i in range(60)}
    matrix = {
        "ref": ref,
        "good": {f"q{i}": (3 if i % 10 else 0) for i in range(0, 20)},  # 90 % on q0-q19
        "fair": {f"q{i}": (3 if i % 2 else 0) for i in range(20, 40)},  # 50 % on q20-q39
        "poor": {f"q{i}": (3 if i % 5 == 0 else 0) for i in range(40, 60)},  # 20 % on q40-q59
        "stranger": {"x1": 3},
    }  # shares nothing with ref
    out = stability(matrix, reference="ref", sizes=[10, 20], trials=4, seed=2)
    assert out["skipped"] == ["stranger"] and out["pools"] == {"ref": 60, "good": 20, "fair": 20, "poor": 20}
    assert out["full"] == {
        "ref": 100.0,
        "good": pytest.approx(90.0),
        "fair": pytest.approx(50.0),
        "poor": pytest.approx(20.0),
    }
    assert out["ranking"] == ["ref", "good", "fair", "poor"]
    assert all(t["good"] == pytest.approx(90.0) for t in out["sizes"]["20"]["trials"])  # the whole pool
    assert out["sizes"]["20"]["spearman_relative"] == pytest.approx(1.0)
    assert out["sizes"]["20"]["spearman_elo"] > 0.5
