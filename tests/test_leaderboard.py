"""The leaderboard's ranking statistics and set-up fingerprint (:mod:`results.leaderboard`), without a browser."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from dyneval.results.leaderboard import Z95, Cell, data_fingerprint, rank
from dyneval.results.view.adapters import adapter
from dyneval.stores.runfiles import ConfigFile


def _cell(value: float, half: float | None) -> Cell:
    """A cell whose 95 % interval is ``value +- half`` (no interval with None)."""
    return Cell(value, None if half is None else value - half, None if half is None else value + half, 10, "t", "r")


def test_models_are_ordered_best_first_and_the_probabilities_of_being_best_add_up_to_one():
    ranking = rank({"a": _cell(0.5, 0.1), "b": _cell(0.8, 0.1), "c": _cell(0.6, 0.1)})
    assert ranking.order == ["b", "c", "a"]
    assert sum(ranking.p_best.values()) == pytest.approx(1.0)
    assert ranking.p_best["b"] > ranking.p_best["c"] > ranking.p_best["a"]


def test_a_lower_is_better_metric_ranks_the_smallest_value_first():
    ranking = rank({"a": _cell(0.1, 0.05), "b": _cell(0.4, 0.05)}, better="lower")
    assert ranking.order == ["a", "b"] and ranking.p_best["a"] > 0.99


def test_the_probability_of_an_adjacent_order_is_the_normal_difference_of_the_two_intervals():
    a, b = _cell(0.7, 0.2), _cell(0.6, 0.1)
    (p,) = rank({"a": a, "b": b}).p_pairs
    se = math.hypot(0.2 / Z95, 0.1 / Z95)
    assert p == pytest.approx(norm.cdf(0.1 / se))


def test_equal_models_without_spread_share_the_win_and_a_model_without_interval_is_left_out():
    ranking = rank({"a": _cell(0.5, 0.0), "b": _cell(0.5, 0.0), "c": _cell(0.9, None)})
    assert ranking.order == ["c", "a", "b"]  # ranked by value, whatever its interval
    assert ranking.p_best == pytest.approx({"a": 0.5, "b": 0.5})
    assert ranking.p_pairs[0] is None and ranking.p_pairs[1] == 0.5


def test_the_data_fingerprint_follows_the_input_files_content_not_the_models_under_test(tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"id": 1}\n', encoding="utf-8")
    spec = adapter("atad")

    def of(**params: object) -> str:
        return data_fingerprint(ConfigFile(protocol="atad", params=params), spec)[0]

    first = of(benchmark=[str(bench)], evaluate=["m1@u"])
    assert of(benchmark=[str(bench)], evaluate=["m2@u", "m3@u"]) == first  # the examinees are the rows
    bench.write_text('{"id": 2, "n": 0}\n', encoding="utf-8")
    assert of(benchmark=[str(bench)], evaluate=["m1@u"]) != first  # other content (read again: another size)
    assert data_fingerprint(ConfigFile(protocol="interview"), adapter("interview"))[1] == "the shipped sample"
    limited = ConfigFile.model_validate({"protocol": "interview", "limit": 3})
    assert (
        data_fingerprint(limited, adapter("interview"))[0]
        != data_fingerprint(ConfigFile(protocol="interview"), adapter("interview"))[0]
    )
