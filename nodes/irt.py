"""Item response theory shared by LLMEval's adaptive sessions and JudgeAgent's adaptive base questions:
calibration, ability, information, item choice.

LLMEval-3 (seed 002) judges every answer 0-3 stars (Figure 11); its rubric puts
the line between a wrong and a correct answer between 1 and 2 stars ("core
correctness serving as the primary indicator", section 2.3), so an IRT response
is ``correct = stars >= 2``. Ungraded answers have no stars and are no response.

Model (dichotomous logistic, no guessing): ``P_i(theta) = 1 / (1 + exp(-a_i (theta - b_i)))``;
1PL fixes ``a_i = 1`` (Rasch with a standard-normal ability scale), 2PL estimates
``a_i``. Abilities have a standard-normal prior.

* :func:`calibrate` - marginal maximum a posteriori item parameters by Bock-Aitkin EM on a
  quadrature grid (E-step: each examinee's posterior over the grid; M-step: every item at once
  with scipy's L-BFGS-B and the analytic gradient), on sparse (examinee, item, correct)
  triples, warm-started from earlier parameters for an incremental refit.
* :func:`eap` - expected a posteriori ability and its posterior standard deviation (the SE).
* :func:`information` - Fisher information ``a^2 P (1 - P)``.
* :func:`select_item` - maximum information at the current ability with randomesque
  exposure control (a random pick among the ``k`` most informative, Kingsbury & Zara 1989).
* :func:`seeded_rng` - the generator of one choice, fixed by a text key, so a resumed test repeats it.

JudgeAgent (seed 000) grades correct / wrong in code or by its judge: a response is that verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse
from scipy.special import expit, log_expit

#: A judged answer is a correct IRT response from this many stars (Figure 11: 2 and 3 = correct answer).
CORRECT_FROM_STARS = 2
MODELS = ("1pl", "2pl")
#: Half-width of a 95 % normal interval, in standard errors.
Z95 = 1.96


def probability(theta: np.ndarray | float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``P(correct)`` of each item at ``theta`` (broadcasts: theta (..., 1) x items)."""
    return expit(np.asarray(a) * (np.asarray(theta) - np.asarray(b)))


def information(theta: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fisher information of each item at ``theta``: ``a^2 P (1 - P)``."""
    p = probability(theta, a, b)
    return np.asarray(a) ** 2 * p * (1 - p)


def log_likelihood(theta: np.ndarray | float, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log-likelihood of the responses ``y`` (0/1 per item) at each ``theta``."""
    z = np.asarray(a) * (np.asarray(theta)[..., None] - np.asarray(b))
    y = np.asarray(y, dtype=float)
    return (y * log_expit(z) + (1 - y) * log_expit(-z)).sum(axis=-1)


GRID = np.linspace(-5.0, 5.0, 121)


@dataclass(frozen=True)
class Ability:
    theta: float
    se: float
    n: int


def eap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    y: Sequence[int] | np.ndarray,
    grid: np.ndarray = GRID,
) -> Ability:
    """EAP ability under a N(0, 1) prior and its posterior SD; with no response the prior (0 +/- 1)."""
    log_post = -0.5 * grid**2
    if len(y):
        log_post = log_post + log_likelihood(grid, np.asarray(a, float), np.asarray(b, float), np.asarray(y))
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    theta = float(w @ grid)
    return Ability(theta, float(np.sqrt(w @ (grid - theta) ** 2)), len(y))


def select_item(
    theta: float, a: np.ndarray, b: np.ndarray, eligible: np.ndarray, rng: np.random.Generator, k: int = 1
) -> int | None:
    """Index of the next item: a random one among the ``k`` most informative eligible items at ``theta``
    (``k = 1``: plain maximum information); ``None`` when nothing is eligible."""
    idx = np.flatnonzero(eligible)
    if idx.size == 0:
        return None
    info = information(theta, a[idx], b[idx])
    k = min(k, idx.size)
    top = idx[np.argpartition(-info, k - 1)[:k]] if k < idx.size else idx
    return int(rng.choice(top))


def seeded_rng(key: str) -> np.random.Generator:
    """A generator fixed by ``key`` (e.g. seed, unit and position), so a resumed session makes the same choice."""
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


@dataclass
class Calibration:
    a: np.ndarray
    b: np.ndarray
    iterations: int
    converged: bool
    log_marginal: float


def _quadrature(n: int = 41) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.linspace(-4.0, 4.0, n)
    w = np.exp(-0.5 * nodes**2)
    return nodes, w / w.sum()


def calibrate(
    examinee: np.ndarray,
    item: np.ndarray,
    y: np.ndarray,
    n_items: int,
    *,
    model: str = "2pl",
    a0: np.ndarray | None = None,
    b0: np.ndarray | None = None,
    prior_sd_b: float | None = 3.0,
    prior_sd_log_a: float = 0.5,
    max_iter: int = 500,
    tol: float = 1e-4,
) -> Calibration:
    """Item parameters from sparse responses (``examinee[r]`` answered ``item[r]`` with ``y[r]`` in {0, 1}).

    Bock-Aitkin EM with N(0, 1) abilities on 41 quadrature nodes; priors b ~ N(0, prior_sd_b^2)
    (``None``: none) and, for 2PL, log a ~ N(0, prior_sd_log_a^2) keep items that every examinee
    got right (or wrong) finite. ``a0``/``b0`` warm-start the fit (incremental refit).
    """
    if model not in MODELS:
        raise ValueError(f"unknown IRT model {model!r}; use one of {', '.join(MODELS)}")
    examinee, item, y = np.asarray(examinee), np.asarray(item), np.asarray(y, dtype=float)
    n_exam = int(examinee.max()) + 1 if examinee.size else 0
    nodes, weights = _quadrature()
    by_exam = sparse.csr_matrix((np.ones_like(y), (examinee, np.arange(y.size))), shape=(n_exam, y.size))
    by_item = sparse.csr_matrix((np.ones_like(y), (item, np.arange(y.size))), shape=(n_items, y.size))
    by_item_y = sparse.csr_matrix((y, (item, np.arange(y.size))), shape=(n_items, y.size))
    two = model == "2pl"
    a = np.ones(n_items) if a0 is None or not two else np.asarray(a0, float).copy()
    b = np.zeros(n_items) if b0 is None else np.asarray(b0, float).copy()

    def m_step(n_k: np.ndarray, r_k: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        def nll(x: np.ndarray) -> tuple[float, np.ndarray]:
            bb = x[:n_items]
            la = x[n_items:] if two else np.zeros(n_items)
            aa = np.exp(la)
            z = aa[:, None] * (nodes[None, :] - bb[:, None])
            value = -(r_k * log_expit(z) + (n_k - r_k) * log_expit(-z)).sum()
            resid = r_k - n_k * expit(z)  # d loglik / dz
            g_b = (resid * aa[:, None]).sum(axis=1)
            grads = [g_b]
            if prior_sd_b:
                value += 0.5 * (bb**2).sum() / prior_sd_b**2
                grads[0] = g_b + bb / prior_sd_b**2
            if two:
                value += 0.5 * (la**2).sum() / prior_sd_log_a**2
                grads.append(-(resid * z).sum(axis=1) + la / prior_sd_log_a**2)
            return float(value), np.concatenate(grads)

        x0 = np.concatenate([b, np.log(a)] if two else [b])
        bounds = [(-10, 10)] * n_items + ([(np.log(0.05), np.log(20))] * n_items if two else [])
        res = optimize.minimize(nll, x0, jac=True, method="L-BFGS-B", bounds=bounds)
        return (np.exp(res.x[n_items:]) if two else np.ones(n_items)), res.x[:n_items]

    converged, log_marginal, it = False, float("nan"), 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the iterations taken are reported after the loop)
        z = a[item][:, None] * (nodes[None, :] - b[item][:, None])  # responses x nodes
        contrib = y[:, None] * log_expit(z) + (1 - y[:, None]) * log_expit(-z)
        log_post = by_exam @ contrib + np.log(weights)[None, :]  # examinees x nodes
        top = log_post.max(axis=1, keepdims=True)
        post = np.exp(log_post - top)
        marginal = post.sum(axis=1, keepdims=True)
        log_marginal = float((np.log(marginal) + top).sum())
        post /= marginal
        per_resp = post[examinee]  # responses x nodes
        n_k = np.asarray(by_item @ per_resp)
        r_k = np.asarray(by_item_y @ per_resp)
        a_new, b_new = m_step(n_k, r_k, a, b)
        change = max(np.abs(a_new - a).max(initial=0), np.abs(b_new - b).max(initial=0))
        a, b = a_new, b_new
        if change < tol:
            converged = True
            break
    return Calibration(a=a, b=b, iterations=it, converged=converged, log_marginal=log_marginal)


def expected_score(
    theta: float, a: np.ndarray, b: np.ndarray, stars_correct: float, stars_wrong: float, s_max: int = 3
) -> float:
    """Expected absolute score (equation 1, 0-100) on the calibrated items at ``theta``: each item's
    ``P`` times the mean stars of correct answers plus ``1 - P`` times the mean stars of wrong ones."""
    p = probability(theta, a, b)
    return float(np.mean(p * stars_correct + (1 - p) * stars_wrong) / s_max * 100)
