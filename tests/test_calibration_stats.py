"""Judge-calibrated estimates (:mod:`results.calibration`), checked on simulated runs with a judge of known error.

Coverage, measured here (seeded; 200 runs of 300 units, 60 of them labelled, 2000 bootstrap replicates):

* judge Se 0.85 / Sp 0.80, true accuracy 0.6: the calibrated 95 % interval covers the truth in 97.5 % of runs;
  the raw (Clopper-Pearson on the judge's verdicts) interval in 94.0 %: at these rates the judge's errors
  nearly cancel (its expected share correct is 0.6 x 0.85 + 0.4 x 0.20 = 0.59), so the raw interval is not far
  off, only blind to the judge;
* the same judge, true accuracy 0.8 (expected judged share 0.72): calibrated 97.0 %, raw 12.0 %.

The calibrated interval is conservative (wider than 95 % needs): its width is mostly the error of Se and Sp
estimated from 60 labels (docs/judges.md, "Calibrating a run's judge", for the labels a precision needs).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from dyneval.results.calibration.estimates import MIN_YOUDEN, calibrated_share, calibrated_stars, rogan_gladen

UNITS, LABELLED, RUNS = 300, 60, 200


def simulate(truth_share: float, se: float, sp: float, seed: int) -> tuple[float, float]:
    """Coverage of the calibrated and of the raw 95 % interval over :data:`RUNS` simulated runs."""
    rng = np.random.default_rng(seed)
    truth = rng.random((RUNS, UNITS)) < truth_share
    noise = rng.random((RUNS, UNITS))
    judge = np.where(truth, noise < se, noise >= sp).astype(int)
    covered = 0
    for run in range(RUNS):
        labelled = rng.choice(UNITS, LABELLED, replace=False)
        est = calibrated_share(
            judge[run], np.ones(UNITS), judge[run, labelled], truth[run, labelled].astype(int), rng=rng
        )
        assert est.low is not None and est.high is not None
        covered += est.low <= truth_share <= est.high
    k = judge.sum(axis=1)
    raw_low = np.where(k > 0, beta.ppf(0.025, k, UNITS - k + 1), 0.0)
    raw_high = np.where(k < UNITS, beta.ppf(0.975, k + 1, UNITS - k), 1.0)
    raw = float(((raw_low <= truth_share) & (truth_share <= raw_high)).mean())
    return covered / RUNS, raw


def test_calibrated_interval_keeps_95_percent_coverage_where_the_judge_errs():
    calibrated, raw = simulate(0.6, 0.85, 0.80, seed=36)
    assert calibrated >= 0.93
    assert raw == pytest.approx(0.94, abs=0.005)  # the figure stated in the module docstring


def test_raw_interval_misses_a_biased_judge_that_the_calibrated_one_covers():
    calibrated, raw = simulate(0.8, 0.85, 0.80, seed=37)
    assert calibrated >= 0.93
    assert raw == pytest.approx(0.12, abs=0.005)  # the figure stated in the module docstring


def test_rogan_gladen_matches_hand_computation_and_clips():
    # q = 0.59, Se 0.85, Sp 0.8: (0.59 + 0.8 - 1) / 0.65 = 0.6
    assert float(rogan_gladen(0.59, 0.85, 0.80)) == pytest.approx(0.6)
    assert float(rogan_gladen(0.1, 0.85, 0.80)) == 0.0  # (0.1 - 0.2) / 0.65 < 0
    assert float(rogan_gladen(0.95, 0.85, 0.80)) == 1.0
    assert np.isnan(rogan_gladen(0.5, 0.5, 0.5))


def test_calibrated_share_point_estimate_uses_se_and_sp_of_the_labels():
    # labels: 4 correct items judged 1,1,1,0 (Se 0.75); 4 wrong items judged 0,0,0,1 (Sp 0.75)
    judge, human = [1, 1, 1, 0, 0, 0, 0, 1], [1, 1, 1, 1, 0, 0, 0, 0]
    # run: 3 units with 2, 1, 3 of 4, 2, 4 judged correct: q = 6 / 10
    est = calibrated_share([2, 1, 3], [4, 2, 4], judge, human, rng=np.random.default_rng(0), replicates=200)
    assert est.value == pytest.approx((0.6 + 0.75 - 1) / 0.5)
    assert est.labels == 8
    assert est.low is not None and est.high is not None and est.low <= est.value <= est.high


def test_a_judge_too_weak_to_correct_is_said_not_divided_by():
    # Se 0.5, Sp 0.55: Youden 0.05 < MIN_YOUDEN
    judge = [1] * 10 + [0] * 10 + [0] * 11 + [1] * 9
    human = [1] * 20 + [0] * 20
    est = calibrated_share([10], [20], judge, human, rng=np.random.default_rng(0))
    assert MIN_YOUDEN > 0.05
    assert est.value is None and est.low is None
    assert est.note is not None and "too weak" in est.note


def test_labels_of_one_class_only_cannot_measure_the_judge():
    est = calibrated_share([5], [10], [1, 0, 1], [1, 1, 1], rng=np.random.default_rng(0))
    assert est.value is None and est.note is not None and "wrong" in est.note


def test_star_scale_confusion_correction_recovers_the_true_mean_and_covers_it():
    """0-3 stars; the judge is off by one star a fifth of the time (towards the middle): the raw mean is biased
    towards 1.5, the corrected one is not; 60 runs of 300 answers with 80 labelled."""
    rng = np.random.default_rng(5)
    shares = np.array([0.1, 0.2, 0.3, 0.4])
    truth_mean = float(shares @ np.arange(4))
    confusion = np.array([[0.8, 0.2, 0.0, 0.0], [0.1, 0.8, 0.1, 0.0], [0.0, 0.1, 0.8, 0.1], [0.0, 0.0, 0.2, 0.8]])
    covered, raw_error, cal_error = 0, [], []
    for _ in range(60):
        truth = rng.choice(4, size=UNITS, p=shares)
        judge = np.array([rng.choice(4, p=confusion[t]) for t in truth])
        labelled = rng.choice(UNITS, 80, replace=False)
        counts = np.bincount(judge, minlength=4)[None, :]
        est = calibrated_stars(counts, [0, 1, 2, 3], judge[labelled], truth[labelled], rng=rng, replicates=400)
        assert est.value is not None and est.low is not None and est.high is not None
        covered += est.low <= truth_mean <= est.high
        raw_error.append(judge.mean() - truth_mean)
        cal_error.append(est.value - truth_mean)
    assert covered / 60 >= 0.9
    assert abs(np.mean(cal_error)) < abs(np.mean(raw_error)) / 2


def test_a_class_no_person_gave_leaves_the_scale_uncorrected():
    est = calibrated_stars(np.array([[1, 1, 1]]), [0, 1, 2], [0, 1], [0, 1], rng=np.random.default_rng(0))
    assert est.value is None and est.note is not None and "2" in est.note
