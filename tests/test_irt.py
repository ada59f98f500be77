"""IRT core (nodes/irt.py): likelihood, information, EAP ability, item choice and calibration,
checked by hand on small cases and against girth's own estimators."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from dyneval.nodes import irt


def test_probability_information_and_log_likelihood_match_hand_computation():
    a, b = np.array([1.0, 2.0]), np.array([0.0, math.log(3) / 2])
    # item 1: P(0) = 1/2; item 2: z = 2 (0 - ln3/2) = -ln 3 -> P = 1 / (1 + 3) = 1/4
    assert irt.probability(0.0, a, b) == pytest.approx([0.5, 0.25])
    # information a^2 P (1 - P): 1 * 1/4 and 4 * 3/16
    assert irt.information(0.0, a, b) == pytest.approx([0.25, 0.75])
    # correct on item 1, wrong on item 2: log(1/2 * 3/4)
    assert irt.log_likelihood(0.0, a, b, np.array([1, 0])) == pytest.approx(math.log(0.375))


def test_eap_is_the_prior_without_responses_and_moves_towards_the_answers():
    prior = irt.eap([], [], [])
    assert prior.theta == pytest.approx(0.0, abs=1e-9) and prior.se == pytest.approx(1.0, abs=1e-3)

    # one correct answer on a = 1, b = 0: posterior ~ phi(t) * sigmoid(t); mean and SD by quadrature
    def dens(t: float) -> float:
        return stats.norm.pdf(t) * (1 / (1 + math.exp(-t)))

    z = integrate.quad(dens, -10, 10)[0]
    mean = integrate.quad(lambda t: t * dens(t), -10, 10)[0] / z
    sd = math.sqrt(integrate.quad(lambda t: (t - mean) ** 2 * dens(t), -10, 10)[0] / z)
    up = irt.eap([1.0], [0.0], [1])
    assert up.theta == pytest.approx(mean, abs=1e-4) and up.se == pytest.approx(sd, abs=1e-4)
    assert up.theta > 0 and up.se < 1
    down = irt.eap([1.0], [0.0], [0])
    assert down.theta == pytest.approx(-mean, abs=1e-4)  # symmetric
    # one right and one wrong on identical items: back at 0, but more certain than the prior
    both = irt.eap([1.0, 1.0], [0.0, 0.0], [1, 0])
    assert both.theta == pytest.approx(0.0, abs=1e-9) and both.se < up.se


def test_eap_agrees_with_girth_ability_eap():
    girth = pytest.importorskip("girth")
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0, 0.3, 30), rng.normal(0, 1, 30)
    y = (rng.random((30, 5)) < irt.probability(rng.normal(0, 1, 5)[:, None], a, b).T).astype(int)
    theirs = girth.ability_eap(y, b, a, options={"quadrature_bounds": (-5, 5), "quadrature_n": 121})
    ours = [irt.eap(a, b, y[:, j]).theta for j in range(5)]
    assert ours == pytest.approx(list(theirs), abs=2e-3)


def test_select_item_takes_the_most_informative_eligible_item_and_randomesque_spreads_exposure():
    a = np.array([1.0, 1.0, 2.0, 1.0])
    b = np.array([2.0, 0.1, 0.0, 0.0])
    rng = np.random.default_rng(0)
    eligible = np.array([True, True, True, True])
    assert irt.select_item(0.0, a, b, eligible, rng) == 2  # a = 2 at theta = b
    eligible[2] = False  # already asked: never repeated
    assert irt.select_item(0.0, a, b, eligible, rng) == 3  # b = 0 beats b = 0.1
    picks = {irt.select_item(0.0, a, b, eligible, rng, k=2) for _ in range(50)}
    assert picks == {1, 3}  # the two most informative, both used
    assert irt.select_item(0.0, a, b, np.zeros(4, bool), rng) is None


def simulate(n_items: int, n_exam: int, seed: int, two_pl: bool = True):
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0, 0.3, n_items) if two_pl else np.ones(n_items)
    b = rng.normal(0, 1, n_items)
    theta = rng.normal(0, 1, n_exam)
    y = (rng.random((n_exam, n_items)) < irt.probability(theta[:, None], a, b)).astype(int)
    return a, b, theta, y


def test_calibration_recovers_known_item_parameters_from_sparse_responses():
    a, b, _, y = simulate(40, 1500, seed=1)
    rng = np.random.default_rng(2)
    keep = rng.random(y.shape) < 0.6  # 40 % missing, like sessions on a bank
    ex, it = np.nonzero(keep)
    fit = irt.calibrate(ex, it, y[ex, it], 40, model="2pl")
    assert fit.converged
    assert np.corrcoef(fit.b, b)[0, 1] > 0.98 and np.abs(fit.b - b).mean() < 0.15
    assert np.corrcoef(fit.a, a)[0, 1] > 0.8 and np.abs(fit.a - a).mean() < 0.15
    rasch = irt.calibrate(ex, it, y[ex, it], 40, model="1pl")
    assert np.all(rasch.a == 1) and np.corrcoef(rasch.b, b)[0, 1] > 0.95


def test_calibration_warm_start_converges_to_the_same_parameters_in_fewer_iterations():
    _, _, _, y = simulate(30, 800, seed=4)
    ex, it = np.nonzero(np.ones_like(y, bool))
    cold = irt.calibrate(ex, it, y[ex, it], 30)
    warm = irt.calibrate(ex, it, y[ex, it], 30, a0=cold.a, b0=cold.b)
    assert warm.iterations < cold.iterations
    assert warm.b == pytest.approx(cold.b, abs=1e-3) and warm.a == pytest.approx(cold.a, abs=1e-3)


def test_rasch_calibration_agrees_with_girth_rasch_mml_on_a_large_complete_sample():
    girth = pytest.importorskip("girth")
    _, b, _, y = simulate(20, 3000, seed=5, two_pl=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = girth.rasch_mml(y.T)["Difficulty"]
    ex, it = np.nonzero(np.ones_like(y, bool))
    ours = irt.calibrate(ex, it, y[ex, it], 20, model="1pl", prior_sd_b=None, tol=1e-6).b
    assert ours == pytest.approx(list(theirs), abs=0.05)


def test_expected_score_runs_from_the_wrong_to_the_correct_star_means():
    a, b = np.ones(3), np.zeros(3)
    assert irt.expected_score(0.0, a, b, 3.0, 0.0) == pytest.approx(50.0)
    assert irt.expected_score(-20, a, b, 2.7, 0.3) == pytest.approx(10.0, abs=1e-6)
    assert irt.expected_score(20, a, b, 2.7, 0.3) == pytest.approx(90.0, abs=1e-6)
