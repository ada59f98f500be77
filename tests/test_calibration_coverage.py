"""The judge-calibrated estimate of every metric ``--calibration`` corrects, on runs simulated with a judge of known
error (``bench/calibration_coverage.py``, which computes them with the functions ``--calibration`` calls on a run's
records): a judge that never errs leaves every metric as the run computed it, and at a reduced repetition count
(fixed seeds: the same figures on every machine) the calibrated intervals keep their coverage where the raw ones
lose it. The full counts are in docs/judges.md ("Calibrating a run's judge")."""

from __future__ import annotations

import numpy as np
import pytest

from bench import calibration_coverage as bench

#: runs per protocol and bootstrap replicates per run: about 10 s of CPU per protocol
RUNS, REPLICATES = 30, 300


@pytest.mark.parametrize("protocol", sorted(bench.PROTOCOLS))
def test_a_judge_that_never_errs_leaves_every_metric_as_the_run_computed_it(protocol):
    """Labels equal to the judge's verdicts (Se = Sp = 1, an identity confusion matrix): every corrected value is
    the raw one the protocol's own metric functions give, so the corrections read the records as the metrics do."""
    spec = bench.PROTOCOLS[protocol]
    run = spec.simulate(np.random.default_rng(1), 90)
    judge = np.array([j for j, _ in run.answers])
    corrections = spec.corrections(run)
    raw = spec.raw(run) | corrections.raw
    corrected = {}
    for estimator in corrections.estimators:
        corrected |= estimator(judge, judge, np.random.default_rng(2), 50)
    assert set(corrected) == set(run.truth)
    for metric, found in corrected.items():
        assert found.value == pytest.approx(raw[metric]["estimate"]), metric


@pytest.mark.parametrize(
    ("protocol", "biased"),
    [("interview", "score@2"), ("judgeagent", "validation.overall.cte"), ("llmeval", "S")],
)
def test_calibrated_intervals_cover_the_truth_where_the_raw_ones_miss_it(protocol, biased):
    """At 300 units with 60 labels: every calibrated interval covers the truth in at least 80 % of 30 runs (93-100 %
    at 500 runs and 2000 replicates, docs/judges.md); the judge's error moves the metric ``biased`` so far that
    its raw interval covers the truth in at most a third of them."""
    found = bench.coverage(protocol, RUNS, replicates=REPLICATES, seed=36)
    assert found.runs == RUNS
    for metric in found.truth:
        assert found.calibrated[metric] / RUNS >= 0.8, (metric, found.calibrated, found.raw)
    assert found.raw[biased] / RUNS <= 1 / 3, found.raw


def test_a_metric_without_judged_answers_says_so_instead_of_failing():
    """An interview without follow-ups or single-turn answers (``--max-questions 1 --no-single-turn-judge``)."""
    run = bench.interview_run(np.random.default_rng(3), 20)
    records = [{**r, "followup_results": [], "single_turn": {}} for r in run.records]
    corrections = bench.metrics.interview(records, bench.N_MAX)
    judge = np.array([j for j, _ in run.answers])
    found = {}
    for estimator in corrections.estimators:
        found |= estimator(judge, judge, np.random.default_rng(4), 20)
    assert found["followup_accuracy.overall"].note == "no judged verdicts"
    assert found["judge"].note == "no judged verdicts"
    assert found["score@1"].value is not None
