"""The leaderboard's ranking statistics, pooling, row identity and set-up fingerprint (:mod:`results.leaderboard`),
without a browser: run folders holding only what the leaderboard reads (``config.json`` and ``summary.json``)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from scipy.stats import binomtest, norm

from dyneval import cli
from dyneval.results.leaderboard import Z95, Cell, boards, data_fingerprint, rank, statement
from dyneval.results.view.adapters import adapter
from dyneval.stores.rundir import runs_under
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


def test_a_zero_width_interval_at_every_answer_right_does_not_make_a_model_surely_best():
    """All ten answers right gives a zero-width interval (or none): its standard error is the exact binomial's of
    ten units, so the perfect model is likely best, not certainly, and the statement says why."""
    metric = adapter("interview").metrics[0]
    for perfect in (_cell(1.0, 0.0), Cell(1.0, None, None, 10, "cluster-robust-t", "r")):
        ranking = rank({"perfect": perfect, "good": _cell(0.85, 0.1)})
        assert ranking.order == ["perfect", "good"] and ranking.derived == ["perfect"]
        cp = binomtest(10, 10).proportion_ci(confidence_level=0.95, method="exact")
        se = math.hypot((cp.high - cp.low) / (2 * Z95), 0.1 / Z95)
        assert ranking.p_pairs == [pytest.approx(norm.cdf(0.15 / se))]
        assert 0.6 < ranking.p_best["perfect"] < 0.95 and ranking.p_best["good"] > 0.05
        assert "No spread among the units of perfect" in statement(metric, ranking)
    # the clusters an interval rests on, not its answers, are its units
    clustered = rank({"perfect": Cell(1.0, None, None, 12, "cluster-robust-t", "r", units=3), "good": _cell(0.85, 0.1)})
    assert clustered.p_best["perfect"] < ranking.p_best["perfect"]


def test_a_value_that_is_no_share_without_an_interval_stays_out_of_the_probabilities():
    ranking = rank({"a": _cell(50.0, 0.0), "b": _cell(40.0, 5.0), "c": _cell(30.0, 5.0)})
    assert ranking.order == ["a", "b", "c"] and ranking.p_best.keys() == {"b", "c"} and not ranking.derived
    assert ranking.p_pairs[0] is None and ranking.p_pairs[1] == pytest.approx(norm.cdf(10 / math.hypot(5, 5) * Z95))
    assert "Without an interval (not in the probabilities): a" in statement(adapter("interview").metrics[0], ranking)


def _run(out: Path, name: str, target: str, score: float, low: float, high: float, n: int = 10, **params) -> None:
    """A finished interview run named ``name`` (run ids sort by time) whose Score@1 is ``score [low, high]``."""
    run = out / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"protocol": "interview", "params": params}), encoding="utf-8")
    metrics = {
        "score@1": score,
        "denominators": {"score@1": {"n": n, "ungraded": 0}},
        "intervals": {"score@1": {"estimate": score, "low": low, "high": high, "n": n, "method": "clopper-pearson"}},
    }
    summary = {"protocol": "interview", "models": {"target": target, "evaluator": "judge@http://127.0.0.1:9/v1"}}
    (run / "summary.json").write_text(json.dumps({**summary, "metrics": metrics}), encoding="utf-8")


def test_a_models_runs_on_one_set_up_are_pooled_without_narrowing_and_latest_stays_available(tmp_path, monkeypatch):
    """Re-runs on the same questions: the value and the interval's ends averaged by n, so the pooled interval is
    as wide as the runs' (not sqrt(3) narrower, as three independent samples would be); --latest keeps the newest."""
    a = "m@http://127.0.0.1:1/v1"
    _run(tmp_path, "20260101-000001-aa", a, 0.5, 0.2, 0.8)
    _run(tmp_path, "20260101-000002-bb", a, 0.7, 0.4, 0.9, n=30)
    _run(tmp_path, "20260101-000003-cc", a, 0.6, 0.3, 0.85)
    _run(tmp_path, "20260101-000004-dd", "other@http://127.0.0.1:1/v1", 0.4, 0.1, 0.7, data="other.jsonl")
    other, board = boards(runs_under(tmp_path))  # newest run first
    pooled = board.cells()["m"]["score@1"]
    assert pooled.value == pytest.approx((0.5 * 10 + 0.7 * 30 + 0.6 * 10) / 50)
    assert (pooled.low, pooled.high) == (pytest.approx(0.34), pytest.approx(0.87))
    assert pooled.runs == ("20260101-000003-cc", "20260101-000002-bb", "20260101-000001-aa")
    assert pooled.run_id == "20260101-000003-cc"
    latest = board.cells(pooled=False)["m"]["score@1"]
    assert (latest.value, latest.low, latest.high, latest.runs) == (0.6, 0.3, 0.85, ())
    assert list(other.cells()) == ["other"]  # other data: another board, never pooled with these
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: a cell on one line
    with contextlib.redirect_stdout(io.StringIO()) as console:
        assert cli.main(["--leaderboard", "--out", str(tmp_path), "--protocol", "interview"]) == 0
    assert (
        "0.64 [0.34, 0.87] (3 runs)" in console.getvalue() and "pooled, values and interval ends" in console.getvalue()
    )
    with contextlib.redirect_stdout(io.StringIO()) as console:
        assert cli.main(["--leaderboard", "--out", str(tmp_path), "--latest"]) == 0
    assert "0.6 [0.3, 0.85]" in console.getvalue() and "latest finished run" in console.getvalue()


def test_one_model_name_behind_two_urls_is_one_row_unless_their_results_disagree(tmp_path):
    _run(tmp_path, "20260101-000001-aa", "m@http://127.0.0.1:1/v1", 0.5, 0.2, 0.8)
    _run(tmp_path, "20260101-000002-bb", "m@http://10.0.0.2:8000/v1", 0.6, 0.3, 0.85)
    _run(tmp_path, "20260101-000003-cc", "n@http://127.0.0.1:1/v1", 0.9, 0.75, 0.97)
    (board,) = boards(runs_under(tmp_path))
    assert board.rows() == {
        "n": ["n@http://127.0.0.1:1/v1"],
        "m": ["m@http://10.0.0.2:8000/v1", "m@http://127.0.0.1:1/v1"],
    }
    assert board.cells()["m"]["score@1"].runs == ("20260101-000002-bb", "20260101-000001-aa")
    # a server whose results under the same name are out of the other's interval serves another model
    _run(tmp_path, "20260101-000004-dd", "m@http://10.0.0.3:8000/v1", 0.95, 0.85, 0.99)
    (board,) = boards(runs_under(tmp_path))
    assert set(board.rows()) == {
        "n",
        "m@http://10.0.0.3:8000/v1",
        "m@http://10.0.0.2:8000/v1",
        "m@http://127.0.0.1:1/v1",
    }


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
