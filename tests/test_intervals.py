"""Every protocol's summary.json holds a 95 % interval (and a smallest separable difference) for each headline
metric, and each equals a hand computation from the run's own records: the exact binomial interval from the Beta
quantiles, the bootstrap over the units (or clusters) the metric is defined over, and the separability formula
(z_0.975 + z_0.8) * sqrt(2) * sd / sqrt(n)."""

from __future__ import annotations

import io
import json
import math
import statistics
from collections import defaultdict

import numpy as np
import pytest
from rich.console import Console
from scipy.stats import beta, bootstrap, norm
from scipy.stats import t as student_t

from dyneval.results import stats
from dyneval.results.console_summary import render_summary
from dyneval.results.view.adapters import adapter, interval_of
from dyneval.results.view.data import headline_metrics
from tests.golden_runs import _clean_environment, respond, run_cli
from tests.standin_endpoint import StandIn
from tests.standin_runs import records, run, summary

Z = norm.ppf(0.975) + norm.ppf(0.8)


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """The exact interval from its Beta-quantile definition (not through binomtest)."""
    low = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    high = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    return low, high


def scipy_interval(data, statistic, vectorized=True):
    res = bootstrap(
        data,
        statistic,
        paired=True,
        vectorized=vectorized,
        n_resamples=9999,
        method="BCa",
        rng=np.random.default_rng(0),
    )
    return res.confidence_interval.low, res.confidence_interval.high


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("intervals")
    return {name: run(name, base) for name in ("judgeagent", "atad_generate", "atad_evaluate", "interview", "llmeval")}


@pytest.mark.parametrize("name", ["judgeagent", "atad_generate", "atad_evaluate", "interview", "llmeval"])
def test_every_headline_metric_of_a_run_has_an_interval_with_n_and_method(runs, name):
    s = summary(runs[name])
    heads = headline_metrics(adapter(s["protocol"]), s["metrics"])
    assert heads
    for h in heads:
        found = interval_of(s["metrics"], h["path"])
        assert found is not None, h["path"]
        assert found["level"] == 0.95 and found["n"] >= 1 and found["method"]
        assert found["estimate"] == pytest.approx(h["value"])
        if found["low"] is not None:
            assert found["low"] <= found["estimate"] <= found["high"]
        assert h["path"] in s["metrics"]["separable"]


def test_judgeagent_base_accuracy_is_exact_at_the_design_effect_size_and_its_score_is_clustered_by_batch(runs):
    s, recs = summary(runs["judgeagent"]), records(runs["judgeagent"])
    hits = np.array([sum(1 for b in r["base"] if b["verdict"] != "ungraded" and b["correct"]) for r in recs], float)
    counts = np.array([sum(1 for b in r["base"] if b["verdict"] != "ungraded") for r in recs], float)
    k, n, p = len(recs), int(counts.sum()), hits.sum() / counts.sum()
    got = s["metrics"]["intervals"]["base_accuracy.value"]
    assert (got["method"], got["n"]) == ("clopper-pearson-clustered", n)
    # Korn and Graubard (1998): the CR1 variance over batches, n_eff = p (1 - p) / variance (at most n), times
    # (t_(n-1) / t_(k-1))^2, then the Clopper-Pearson interval at x = p n_eff
    variance = k / (k - 1) * ((hits - p * counts) ** 2).sum() / n**2
    n_eff = min(n, p * (1 - p) / variance) if variance > 0 and 0 < p < 1 else n
    n_eff *= (student_t.ppf(0.975, n - 1) / student_t.ppf(0.975, k - 1)) ** 2
    x = p * n_eff
    low = 0.0 if x <= 0 else beta.ppf(0.025, x, n_eff - x + 1)
    high = 1.0 if x >= n_eff else beta.ppf(0.975, x + 1, n_eff - x)
    assert (got["low"], got["high"]) == pytest.approx((low, high))
    assert s["metrics"]["separable"]["base_accuracy.value"]["n"] == k  # batches are the independent units

    score = s["metrics"]["intervals"]["score"]
    sums = np.array([float(r["score"]) for r in recs])
    answered = np.array([float(r["answered"]) for r in recs])
    assert len(recs) == 2 and (score["method"], score["units"], score["n"]) == (
        "cluster-robust-t",
        2,
        answered.sum(),
    )
    ratio = sums.sum() / answered.sum()  # CR1 sandwich of the ratio with t at K - 1 = 1 degree of freedom
    se = math.sqrt(2 / 1 * ((sums - ratio * answered) ** 2).sum()) / answered.sum()
    half = student_t.ppf(0.975, 1) * se
    assert (score["estimate"], score["low"], score["high"]) == pytest.approx((ratio, ratio - half, ratio + half))


def test_atad_counts_are_n_times_the_exact_interval_of_their_share_and_the_level_is_a_t_interval(runs):
    s = summary(runs["atad_generate"])
    bench = [
        json.loads(line)
        for line in (runs["atad_generate"] / "benchmark.jsonl").read_text().splitlines()
        if line.strip()
    ]
    n, fin = s["metrics"]["items"], s["metrics"]["finalized"]
    low, high = clopper_pearson(fin, n)
    got = s["metrics"]["intervals"]["finalized"]
    assert (got["estimate"], got["n"], got["method"]) == (fin, n, "clopper-pearson")
    assert (got["low"], got["high"]) == pytest.approx((n * low, n * high))
    share = s["metrics"]["separable"]["finalized"]  # a count's spread grows with n: separability on the share
    p = fin / n
    assert share["scale"] == "share of problems"
    assert share["difference"] == pytest.approx(Z * math.sqrt(2) * math.sqrt(p * (1 - p)) / math.sqrt(n))
    levels = [float(i["level"]) for i in bench if i["item_status"] == "finalized"]
    assert len(levels) == fin
    lv = s["metrics"]["intervals"]["mean_level"]
    half = student_t.ppf(0.975, len(levels) - 1) * statistics.stdev(levels) / math.sqrt(len(levels))
    mean_level = statistics.fmean(levels)
    assert lv["method"] == "t-units"
    assert (lv["low"], lv["high"]) == pytest.approx((max(mean_level - half, 0.0), mean_level + half))  # levels >= 0
    sep = s["metrics"]["separable"]["mean_level"]
    assert sep["difference"] == pytest.approx(Z * math.sqrt(2) * statistics.stdev(levels) / math.sqrt(len(levels)))


def table1_avg(tasks, correct):
    """Table 1's average written plainly: accuracy per task (one benchmark file), mean over the tasks present."""
    by_task = defaultdict(list)
    for t, c in zip(tasks, correct):
        by_task[t].append(c)
    return 100.0 * sum(sum(v) / len(v) for v in by_task.values()) / len(by_task)


def test_atad_evaluation_accuracy_interval_is_exact_over_the_sample_problems_each_weighing_alike(runs):
    s, recs = summary(runs["atad_evaluate"]), records(runs["atad_evaluate"])
    for model in s["metrics"]["models"]:
        answers = [
            r
            for r in recs
            if r["meta"]["kind"] == "answer" and r["meta"]["model"] == model and r["meta"]["version"] == "final"
        ]
        tasks = np.array([int(r["meta"]["task"][1:]) for r in answers], dtype=float)
        correct = np.array([float(bool(r["correct"])) for r in answers])
        assert len(set(tasks)) == len(answers) == 7  # the sample: one problem per task, so every problem weighs 1/7
        got = s["metrics"]["intervals"][f"table1.{model}.avg"]
        assert (
            got["estimate"]
            == pytest.approx(table1_avg(tasks, correct))
            == pytest.approx(s["metrics"]["table1"][model]["avg"])
        )
        low, high = clopper_pearson(int(correct.sum()), len(answers))
        assert got["method"] == "clopper-pearson-effective-n"
        assert (got["n"], got["low"], got["high"]) == (
            len(answers),
            pytest.approx(100 * low),
            pytest.approx(100 * high),
        )


def test_interview_score_at_n_interval_is_exact_for_0_1_scores_and_bootstrapped_otherwise(runs):
    s, recs = summary(runs["interview"]), records(runs["interview"])
    assert len({r["seed_id"] for r in recs}) == len(recs)  # one session per seed question: independent units
    for n in range(1, s["metrics"]["n_max"] + 1):
        values = [r["seed_scores"][min(n, len(r["seed_scores"])) - 1] for r in recs]
        got = s["metrics"]["intervals"][f"score@{n}"]
        if set(values) <= {0, 1}:
            assert got["method"] == "clopper-pearson"
            assert (got["low"], got["high"]) == pytest.approx(clopper_pearson(int(sum(values)), len(values)))
        else:
            assert got["method"] == "bootstrap-units"
            assert (got["low"], got["high"]) == pytest.approx(
                scipy_interval((np.array(values, dtype=float),), lambda a, axis: a.mean(axis))
            )
            sep = s["metrics"]["separable"][f"score@{n}"]
            assert sep["difference"] == pytest.approx(Z * math.sqrt(2) * statistics.stdev(values) / math.sqrt(4))
    assert any(s["metrics"]["intervals"][f"score@{n}"]["method"] == "bootstrap-units" for n in (1, 2, 3))


def test_llmeval_s_interval_rests_on_the_answers_with_t_and_its_separable_difference_the_formula(runs):
    s, recs = summary(runs["llmeval"]), records(runs["llmeval"])
    per_session = [[100 * int(x) / 3 for x, c in r["stars"].items() for _ in range(c)] for r in recs]
    assert len(per_session) == 3 and any(set(v) - {0, 100} for v in per_session)  # some 1 or 2 stars: not binary
    n = sum(len(v) for v in per_session)
    pooled = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in per_session) / (n - 3)
    se = math.sqrt(sum(pooled / len(v) for v in per_session)) / 3
    mean_s = float(np.mean([np.mean(v) for v in per_session]))
    half = student_t.ppf(0.975, n - 3) * se
    got = s["metrics"]["intervals"]["S"]
    assert (got["method"], got["n"]) == ("t-over-answers", n)
    assert (got["estimate"], got["low"], got["high"]) == pytest.approx((mean_s, mean_s - half, mean_s + half))
    sep = s["metrics"]["separable"]["S"]
    assert sep["unit"] == "answers" and sep["n"] == n
    assert sep["difference"] == pytest.approx(Z * math.sqrt(2) * se)
    assert s["metrics"]["intervals"]["R"]["method"] == "t-over-answers"


def test_the_report_shows_each_headline_value_with_its_interval_n_and_method_and_the_separability_formula(runs):
    report = (runs["llmeval"] / "report.md").read_text()
    got = summary(runs["llmeval"])["metrics"]["intervals"]["S"]
    assert f"50 [{got['low']:.3g}, {got['high']:.3g}] (n={got['n']}, t-over-answers)" in report
    assert "(z_0.975 + z_0.8) x sqrt(2) x sd / sqrt(n)" in report


def _reference_says_little(body):
    """The reference model answers every question alike (so its stars differ from the target's); the rest as the
    golden runs answer."""
    if body.get("model") == "reference" and not body.get("tools"):
        return {"role": "assistant", "content": "I cannot say."}
    return respond(body)


def test_a_one_session_llmeval_run_has_an_interval_for_s_and_r_in_summary_report_and_console(tmp_path):
    args = ["--protocol", "llmeval", "--questions", "6", "--reference-model", "reference@{URL}"]
    with StandIn(respond=_reference_says_little) as standin, _clean_environment():
        run_cli("llmeval_one_session", args, standin, tmp_path)
    one = next(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_"))
    s = summary(one)
    assert s["metrics"]["sessions_scored"] == 1
    report = (one / "report.md").read_text()
    console = io.StringIO()
    render_summary(s, Console(file=console, width=200))
    for metric in ("S", "R"):
        got = s["metrics"]["intervals"][metric]
        assert got["low"] is not None and got["high"] is not None, got
        assert got["low"] <= got["estimate"] <= got["high"]
        assert got["n"] == 6 and got["method"] in ("t-over-answers", "clopper-pearson")
        shown = f"[{got['low']:.3g}, {got['high']:.3g}]"
        assert f"{shown} (n=6, {got['method']})" in report
        assert shown in console.getvalue() and got["method"] in console.getvalue()


# -- the statistics themselves, on hand-made numbers ---------------------------------------------------------


def test_exact_interval_of_no_success_has_the_closed_form_upper_bound():
    got = stats.proportion(0, 10, "answers")
    assert (got.low, got.high) == (0.0, pytest.approx(1 - 0.025 ** (1 / 10)))


def test_a_single_cluster_gives_no_interval_and_no_separable_difference():
    got = stats.clustered([5.5], [6], "answers", "batches")
    assert (got.low, got.high, got.units, got.n) == (None, None, 1, 6)
    assert got.separable()["difference"] is None and "two or more batches" in got.separable()["note"]


def test_units_needed_and_smallest_difference_match_the_hand_formula():
    assert stats.z_sum() == pytest.approx(2.801585, abs=1e-6)
    assert stats.units_needed(0.5, 0.1) == math.ceil(2 * (2.801585 * 0.5 / 0.1) ** 2) == 393
    assert stats.smallest_difference(0.5, 393) == pytest.approx(2.801585 * math.sqrt(2) * 0.5 / math.sqrt(393))


def test_units_all_alike_give_no_interval_rather_than_a_zero_width_one():
    # every resample of identical units repeats the estimate: [x, x] would claim a certainty the run lacks
    for got in (stats.mean([70.0, 70.0, 70.0], "sessions"), stats.clustered([1.0, 2.0], [2, 4], "answers", "batches")):
        assert got.low is None and got.high is None and "alike" in got.note
    assert stats.clustered([1.0, 2.0], [2, 4], "answers", "batches").estimate == 0.5


def test_a_large_runs_mean_takes_the_closed_form_jackknife_and_keeps_scipys_bca_interval(monkeypatch):
    """Above JACKKNIFE_UNITS the BCa acceleration comes from the mean's leave-one-out values in closed form, not
    from scipy's n x (n - 1) jackknife: the same resamples, the same interval up to rounding."""
    values = np.random.default_rng(3).gamma(2.0, 1.5, 300)  # skewed: the acceleration matters
    monkeypatch.setattr(stats, "JACKKNIFE_UNITS", 100)
    got = stats.mean(values, "units")
    low, high = scipy_interval((values,), lambda a, axis: a.mean(axis))
    assert (got.method, got.n) == ("bootstrap-units", 300)
    assert got.low == pytest.approx(low, rel=1e-12) and got.high == pytest.approx(high, rel=1e-12)
    assert got.low != pytest.approx(np.percentile(values, 2.5))  # not the percentile fallback


def test_atad_table1_takes_one_exact_method_whatever_the_count_right_and_a_better_result_never_bounds_lower():
    from dyneval.protocols.atad.metrics import table1_estimate

    def seven(right: int):
        return table1_estimate([("b.jsonl", f"T{i}", i <= right, f"p{i}") for i in range(1, 8)])  # `make run`

    none, one = seven(0), seven(1)
    assert none.method == one.method == "clopper-pearson-effective-n"
    assert (none.estimate, none.low) == (0.0, 0.0)
    assert none.high == pytest.approx(100 * (1 - 0.025 ** (1 / 7)))  # 40.96 %: seven wrong answers say little
    assert (one.low, one.high) == pytest.approx(tuple(100 * x for x in clopper_pearson(1, 7)))
    assert one.high > none.high


def test_atad_table1_counts_copies_of_one_problem_once():
    from dyneval.protocols.atad.metrics import table1_estimate

    distinct = [("b.jsonl", "T1", i < 3, f"p{i}") for i in range(7)]
    copied = distinct + [("b.jsonl", "T1", i < 3, f"p{i}") for i in range(7)]  # every problem twice, other ids
    once, twice = table1_estimate(distinct), table1_estimate(copied)
    assert once.estimate == twice.estimate == pytest.approx(300 / 7)
    assert (twice.low, twice.high) == pytest.approx((once.low, once.high))  # 7 problems, not 14 answers
    assert twice.n == 7
