"""How sure a headline metric is: its 95 % interval, and the smallest difference a run of its size separates.

Every protocol's metrics code turns its per-unit outcomes into an :class:`Estimate` with one of these methods and
writes :func:`summary_entries` into ``summary["metrics"]`` (``intervals`` and ``separable``, keyed by the metric's
path; read with :func:`results.view.adapters.interval_of`). ``docs/statistics.md`` says which method each metric
uses and why.

* ``clopper-pearson``: a share of independent units (each 0 or 1): the exact binomial interval
  (``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``).
* ``bootstrap-units``: a mean (or another statistic) of independent units' values: units resampled with
  replacement (``scipy.stats.bootstrap``, BCa; the percentile interval where BCa is undefined), in batches of at
  most :data:`BLOCK` drawn values, so that memory is flat in the number of units.
* ``t-units``: a mean of a handful of independent units' values (ATAD's mean level): Student's t at n - 1
  degrees of freedom, where the bootstrap undercovers.
* ``cluster-robust-t``: a ratio ``sum(numerators) / sum(denominators)`` over units that share a cluster
  (JudgeAgent's answers within one batch, interview sessions of one seed question): the cluster-robust (CR1,
  linearized) standard error with Student's t at K - 1 degrees of freedom for K clusters. A bootstrap over 10
  clusters covers too seldom (it shrinks the spread by sqrt((K - 1) / K) and uses z where t is due); the
  coverage bench (``bench/coverage.py``) measures both.
* ``t-over-answers``: a mean over sessions of a per-session statistic of independent answers (LLMEval's S and
  R): each session's statistic linearized over its answers, the within-session variance pooled, Student's t
  with ``answers - sessions`` degrees of freedom. It holds for one session, where a resampling of sessions has
  no interval.
* ``clopper-pearson-clustered``: a share of 0/1 units that share a cluster (JudgeAgent's questions within one
  batch): the exact interval at the design-effect size with Korn and Graubard's degrees-of-freedom correction.
  The cluster-robust t covered 86-91 % for shares near 0 or 1 (ACC2, CR, CtE) at 5-10 batches.
* ``clopper-pearson-effective-n``: a weighted share of 0/1 units (ATAD's Table 1 average, whose problems weigh
  by task and file): the exact interval at the Kish effective size ``1 / sum(w^2)`` (Korn and Graubard 1998);
  with equal weights it is ``clopper-pearson``. One method whatever the count of right answers.

Resampling is seeded (:data:`SEED`), so a run's intervals are reproducible.

Separability (two targets, equal size, two-sided test at ``alpha`` = 0.05 with power 0.8, normal approximation):
``difference = (z_0.975 + z_0.8) * sqrt(2) * sd / sqrt(n)``, and the units that separate a named difference
``d``: ``n = ceil(2 * ((z_0.975 + z_0.8) * sd / d) ** 2)``. ``sd`` is the per-unit standard deviation: the
sample standard deviation of the units' values (``bootstrap-units``), ``sqrt(p (1 - p))`` for a share (the
binomial analogue), and ``SE * sqrt(units)`` where units are clusters or the interval's own standard error is
used (``n`` counts those units then).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

LEVEL = 0.95
ALPHA = 0.05
POWER = 0.8
RESAMPLES = 9999
SEED = 0
#: resampled values held at once (resamples x units, or jackknife samples x units): memory bounded at any size
BLOCK = 1 << 20


def z_sum(alpha: float = ALPHA, power: float = POWER) -> float:
    """``z_(1 - alpha/2) + z_power`` (2.8016 for 0.05 and 0.8)."""
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def smallest_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest difference between two targets that two runs of ``n`` units each separate."""
    return z_sum(alpha, power) * math.sqrt(2) * sd / math.sqrt(n)


def units_needed(
    sd: float, difference: float, alpha: float = ALPHA, power: float = POWER, *, share: float | None = None
) -> int:
    """Units per target that separate ``difference``, rounded up.

    A mean (``share`` None): both targets assumed to have the pilot's ``sd`` (the inverse of
    :func:`smallest_difference`). A share (``share`` = the pilot's proportion p, ``difference`` D on the same 0-1
    scale): the two-sample test of proportions sized at both proportions (Fleiss, *Statistical Methods for Rates
    and Proportions*, 1981, without continuity correction; statsmodels' ``samplesize_proportions_2indep_onetail``):
    ``n = ((z_(1-alpha/2) sqrt(2 pbar (1 - pbar)) + z_power sqrt(p (1 - p) + p2 (1 - p2))) / D) ** 2`` with
    ``pbar = (p + p2) / 2`` and ``p2`` whichever of p + D and p - D lies nearer 1/2 (the larger variance, so the
    run is large enough whichever target is better); ``ValueError`` when neither lies within 0-1."""
    from scipy.stats import norm

    if share is None:
        return math.ceil(2 * (z_sum(alpha, power) * sd / difference) ** 2)
    inside = [q for q in (share + difference, share - difference) if 0 <= q <= 1]
    if not inside:
        raise ValueError(f"a share of {share:g} cannot differ by {difference:g} within 0-1")
    other = min(inside, key=lambda q: abs(q - 0.5))
    mid = (share + other) / 2
    spread = norm.ppf(1 - alpha / 2) * math.sqrt(2 * mid * (1 - mid)) + norm.ppf(power) * math.sqrt(
        share * (1 - share) + other * (1 - other)
    )
    return math.ceil((spread / difference) ** 2)


@dataclass(frozen=True)
class Estimate:
    """A metric's value with its interval: ``n`` is the metric's denominator; ``units`` the independent units
    (clusters where clustered) the interval and ``sd`` rest on, named by ``unit``. ``low``/``high`` are None
    (with ``note``) when the data cannot give an interval (a single unit or cluster)."""

    estimate: float
    low: float | None
    high: float | None
    n: int
    method: str
    sd: float | None
    units: int
    unit: str
    note: str | None = None
    #: the scale of ``sd`` and the separable difference when it is not the metric's own (a count's: its share)
    scale: str | None = None
    #: the Kish effective size of a weighted share (``clopper-pearson-effective-n``): ``n / effective_n`` is the
    #: design effect of the run's weights, which ``--detect`` sizes a new run with
    effective_n: float | None = None

    def scaled(self, factor: float, *, scale: str | None = None) -> Estimate:
        """The same estimate on another scale (percent: 100). With ``scale`` (a count out of ``n``: factor ``n``)
        only the value and interval move; ``sd`` and the separable difference stay on the scale so named, since
        a count's spread depends on the run's size."""

        def times(x: float | None) -> float | None:
            return None if x is None else x * factor

        return replace(
            self,
            estimate=self.estimate * factor,
            low=times(self.low),
            high=times(self.high),
            sd=self.sd if scale else times(self.sd),
            scale=scale,
        )

    def interval(self) -> dict[str, Any]:
        out = {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "level": LEVEL,
            "method": self.method,
        }
        if self.units != self.n:
            out["units"] = self.units
            out["unit"] = self.unit
        if self.effective_n is not None:
            out["effective_n"] = self.effective_n
        if self.note:
            out["note"] = self.note
        return out

    def separable(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "difference": None,
            "sd": self.sd,
            "n": self.units,
            "unit": self.unit,
            "alpha": ALPHA,
            "power": POWER,
        }
        if self.scale:
            out["scale"] = self.scale
        if self.sd and self.units >= 2:
            out["difference"] = smallest_difference(self.sd, self.units)
        else:
            out["note"] = (
                f"needs two or more {self.unit}"
                if self.units < 2
                else f"no variance among the {self.units} {self.unit} of this run"
            )
        return out


def summary_entries(estimates: dict[str, Estimate | None]) -> dict[str, dict[str, Any]]:
    """``{"intervals": {path: ...}, "separable": {path: ...}}`` for ``summary["metrics"]`` (None: no data)."""
    kept = {path: e for path, e in estimates.items() if e is not None}
    return {
        "intervals": {p: e.interval() for p, e in kept.items()},
        "separable": {p: e.separable() for p, e in kept.items()},
    }


def proportion(successes: int, n: int, unit: str) -> Estimate | None:
    """A share of ``n`` independent units: the exact (Clopper-Pearson) interval."""
    if n <= 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=LEVEL, method="exact")
    p = successes / n
    return Estimate(p, float(ci.low), float(ci.high), n, "clopper-pearson", math.sqrt(p * (1 - p)), n, unit)


def bootstrap(
    data: Sequence[Sequence[float]],
    statistic: Callable[..., Any],
    *,
    n: int,
    unit: str,
    method: str,
    sd: Callable[[float], float] | None = None,
    left_out: Callable[[list[np.ndarray]], np.ndarray] | None = None,
) -> Estimate | None:
    """``statistic(*data, axis=-1)`` with its interval from resampling the units (the positions of ``data``'s
    aligned arrays) together; ``sd`` from the bootstrap standard error unless given a function of it.

    ``left_out``: the statistic of each leave-one-unit-out sample in closed form (the mean's ``(sum - x_i) /
    (n - 1)``), which the BCa acceleration takes above :data:`JACKKNIFE_UNITS` units instead of scipy's jackknife,
    which evaluates the statistic on n samples of n - 1 units (31 s at 20,000 units). The resamples are the same
    (scipy's, same seed), so the interval is the same up to rounding in the last digits."""
    arrays = [np.asarray(d, dtype=float) for d in data]
    units = len(arrays[0])
    if units == 0:
        return None
    estimate = float(statistic(*arrays, axis=-1))
    if units < 2:
        return Estimate(estimate, None, None, n, method, None, units, unit, note=f"needs two or more {unit}")
    if all(np.ptp(a) == 0 for a in arrays):  # every unit alike: every resample gives the estimate, which
        return Estimate(
            estimate,
            None,
            None,
            n,
            method,
            0.0,
            units,
            unit,  # is no evidence of certainty
            note=f"all {units} {unit} alike: resampling gives no interval",
        )
    from scipy.stats import bootstrap as scipy_bootstrap

    def run(how: Literal["BCa", "percentile"]) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return scipy_bootstrap(
                arrays,
                statistic,
                n_resamples=RESAMPLES,
                batch=max(1, BLOCK // units),  # scipy holds batch x units draws (and jackknife samples) at once
                paired=True,
                vectorized=True,
                axis=-1,
                confidence_level=LEVEL,
                method=how,
                rng=np.random.default_rng(SEED),
            )

    if left_out is not None and units > JACKKNIFE_UNITS:
        res = run("percentile")
        found = bca_interval(estimate, res.bootstrap_distribution, left_out(arrays))
        low, high = found or (float(res.confidence_interval.low), float(res.confidence_interval.high))
    else:
        res = run("BCa")
        if not (np.isfinite(res.confidence_interval.low) and np.isfinite(res.confidence_interval.high)):
            res = run("percentile")
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    se = float(res.standard_error)
    return Estimate(estimate, low, high, n, method, sd(se) if sd else se * math.sqrt(units), units, unit)


#: above this many units a statistic with a closed-form leave-one-out (:func:`bootstrap`'s ``left_out``) skips
#: scipy's jackknife; at and below it scipy computes the whole BCa interval, as it always did
JACKKNIFE_UNITS = 2000


def bca_interval(value: float, draws: np.ndarray, left_out: np.ndarray) -> tuple[float, float] | None:
    """The BCa interval (Efron 1987; Efron and Tibshirani 1993, section 14.3, as ``scipy.stats.bootstrap``
    computes it) from the resamples' values ``draws`` and the leave-one-unit-out values ``left_out`` (the
    jackknife's acceleration); None where it is undefined (every resample on one side of the value, or no spread
    among the jackknife values)."""
    from scipy.stats import norm

    below = float(np.mean(draws < value) + 0.5 * np.mean(draws == value))
    spread = left_out.mean() - left_out
    if not 0 < below < 1 or not (spread**2).sum() > 0:
        return None
    bias = norm.ppf(below)
    accel = (spread**3).sum() / (6 * ((spread**2).sum()) ** 1.5)
    z = bias + norm.ppf([(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    levels = norm.cdf(bias + z / (1 - accel * z))
    low, high = np.percentile(draws, 100 * levels)
    return float(low), float(high)


def _mean(values: np.ndarray, axis: int = -1) -> Any:
    return values.mean(axis=axis)


def _mean_left_out(arrays: list[np.ndarray]) -> np.ndarray:
    """The mean of each leave-one-out sample, ``(sum - x_i) / (n - 1)``."""
    [values] = arrays
    return (values.sum() - values) / (len(values) - 1)


def mean(values: Sequence[float], unit: str) -> Estimate | None:
    """The mean of independent units' values, bootstrapped over the units; ``sd`` the sample standard
    deviation."""
    values = [float(v) for v in values]
    return bootstrap(
        [values],
        _mean,
        n=len(values),
        unit=unit,
        method="bootstrap-units",
        sd=lambda se: float(np.std(values, ddof=1)),
        left_out=_mean_left_out,
    )


#: the values a metric can take (low, high): a t interval is clipped to them
Bounds = tuple[float, float]
UNBOUNDED: Bounds = (-math.inf, math.inf)


def _t_interval(
    estimate: float, se: float, df: float, *, n: int, units: int, unit: str, method: str, bounds: Bounds
) -> Estimate:
    """``estimate +/- t_(0.975, df) * se`` (``scipy.stats.t``) clipped to the metric's ``bounds`` (a share never
    below 0 or above 1: the part cut off holds no value the metric can take, so coverage is unchanged); ``sd``
    per unit is ``se * sqrt(units)``."""
    from scipy.stats import t

    half = float(t.ppf(1 - (1 - LEVEL) / 2, df)) * se
    low, high = max(bounds[0], estimate - half), min(bounds[1], estimate + half)
    return Estimate(estimate, low, high, n, method, se * math.sqrt(units), units, unit)


def t_mean(values: Sequence[float], unit: str, bounds: Bounds = UNBOUNDED) -> Estimate | None:
    """The mean of independent units' values with Student's t interval, ``mean +/- t_(0.975, n - 1) s / sqrt(n)``
    within ``bounds`` (``t-units``): at a handful of units (ATAD's finalized problems of a default run) the
    bootstrap covered 87 %, the t interval 95 % (``bench/coverage.py``). No interval under two units or when every
    unit is alike."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return None
    n, estimate, method = len(x), float(x.mean()), "t-units"
    if n < 2:
        return Estimate(estimate, None, None, n, method, None, n, unit, note=f"needs two or more {unit}")
    if np.ptp(x) == 0:
        return Estimate(estimate, None, None, n, method, 0.0, n, unit, note=f"all {n} {unit} alike: no variance")
    se = float(x.std(ddof=1)) / math.sqrt(n)
    return _t_interval(estimate, se, n - 1, n=n, units=n, unit=unit, method=method, bounds=bounds)


def clustered(
    nums: Sequence[float], dens: Sequence[int], unit: str, cluster: str, bounds: Bounds = UNBOUNDED
) -> Estimate | None:
    """``sum(nums) / sum(dens)`` over clusters (a cluster holds ``den`` units whose values sum to ``num``).

    Clusters of one unit each are independent units: a share of 0/1 values gets :func:`proportion`, other values
    :func:`mean`. Otherwise ``cluster-robust-t``: with ``r = sum(nums) / sum(dens)`` and the residuals
    ``e_k = num_k - r * den_k``, ``SE = sqrt(K / (K - 1) * sum(e_k^2)) / sum(dens)`` and the interval
    ``r +/- t_(0.975, K - 1) * SE`` within ``bounds`` (the values a unit can take); ``n`` is the units, the
    separability counts clusters. Clusters without a unit add nothing and are left out.
    """
    pairs = [(float(a), int(b)) for a, b in zip(nums, dens) if b]
    if not pairs:
        return None
    if all(b == 1 for _, b in pairs):
        values = [a for a, _ in pairs]
        if all(v in (0.0, 1.0) for v in values):
            return proportion(int(sum(values)), len(values), unit)
        return mean(values, unit)
    num = np.array([a for a, _ in pairs])
    den = np.array([b for _, b in pairs], dtype=float)
    k, n, ratio = len(pairs), int(den.sum()), float(num.sum() / den.sum())
    method = "cluster-robust-t"
    if k < 2:
        return Estimate(ratio, None, None, n, method, None, k, cluster, note=f"needs two or more {cluster}")
    residuals = num - ratio * den
    if np.allclose(residuals, 0.0):  # every cluster alike: a zero-width interval is no evidence of certainty
        return Estimate(
            ratio, None, None, n, method, 0.0, k, cluster, note=f"all {k} {cluster} alike: no variance to go on"
        )
    se = math.sqrt(k / (k - 1) * float((residuals**2).sum())) / float(den.sum())
    return _t_interval(ratio, se, k - 1, n=n, units=k, unit=cluster, method=method, bounds=bounds)


def over_answers(
    groups: Sequence[tuple[float, Sequence[float]]], unit: str, bounds: Bounds = UNBOUNDED
) -> Estimate | None:
    """The mean of per-group statistics ``estimate_g`` (LLMEval's per-session S or R), each a smooth function of
    its group's independent answers, linearized: ``residuals_g`` are the answers' influence values (mean zero
    within the group), so ``Var(estimate_g) = s^2 / n_g`` with ``s^2`` the residuals' variance pooled over the
    groups (``answers - groups`` degrees of freedom). Interval: ``mean +/- t_(0.975, df) * SE`` with
    ``SE = sqrt(sum_g s^2 / n_g) / G`` (``t-over-answers``), within ``bounds``; ``n`` counts the answers."""
    kept = [(float(e), np.asarray(r, dtype=float)) for e, r in groups if len(r)]
    if not kept:
        return None
    estimate = float(np.mean([e for e, _ in kept]))
    n = sum(len(r) for _, r in kept)
    df = n - len(kept)
    method = "t-over-answers"
    if df < 1:
        return Estimate(estimate, None, None, n, method, None, n, unit, note=f"needs two or more {unit} in a session")
    pooled = float(sum((r**2).sum() for _, r in kept)) / df
    if pooled <= 1e-12:
        return Estimate(
            estimate, None, None, n, method, 0.0, n, unit, note=f"all {n} {unit} alike: no variance to go on"
        )
    se = math.sqrt(sum(pooled / len(r) for _, r in kept)) / len(kept)
    return _t_interval(estimate, se, df, n=n, units=n, unit=unit, method=method, bounds=bounds)


def weighted_proportion(values: Sequence[float], weights: Sequence[float], unit: str) -> Estimate | None:
    """``sum(w * y) / sum(w)`` of units with values ``y`` in [0, 1] (a unit's share of right answers) and weights
    ``w``: the exact (Clopper-Pearson) interval from the Beta quantiles at the Kish effective size
    ``n_eff = sum(w)^2 / sum(w^2)`` and ``k = p * n_eff`` (Korn and Graubard 1998,
    ``clopper-pearson-effective-n``): equal weights and 0/1 values give :func:`proportion`'s interval. ``sd`` is
    ``sqrt(p (1 - p) * n / n_eff)`` per unit, so that ``sd / sqrt(n)`` is the share's standard error."""
    y = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if not len(y) or w.sum() <= 0:
        return None
    w = w / w.sum()
    p = float(min(1.0, max(0.0, (w * y).sum())))
    n_eff = round(1.0 / float((w**2).sum()), 9)  # rounded: equal weights give n, not n +/- 1 ulp
    low, high = _beta_interval(p, n_eff)
    sd = math.sqrt(p * (1 - p) * len(y) / n_eff)
    return Estimate(p, low, high, len(y), "clopper-pearson-effective-n", sd, len(y), unit, effective_n=n_eff)


def _beta_interval(p: float, n_eff: float) -> tuple[float, float]:
    """The Clopper-Pearson interval of a share ``p`` at a (possibly fractional) size ``n_eff``: Beta quantiles at
    ``k = p n_eff`` (``scipy.stats.beta``)."""
    from scipy.stats import beta

    k = round(p * n_eff, 9)
    low = 0.0 if k <= 0 else float(beta.ppf((1 - LEVEL) / 2, k, n_eff - k + 1))
    high = 1.0 if k >= n_eff else float(beta.ppf(1 - (1 - LEVEL) / 2, k + 1, n_eff - k))
    return low, high


def clustered_share(hits: Sequence[int], counts: Sequence[int], unit: str, cluster: str) -> Estimate | None:
    """A share of 0/1 units (``hits[k]`` of ``counts[k]`` in cluster k) whose clusters are the independent units:
    :func:`share_at_design_effect` with the cluster-robust (CR1) variance of :func:`clustered`. One cluster gives
    no interval."""
    pairs = [(int(a), int(b)) for a, b in zip(hits, counts) if b]
    if not pairs:
        return None
    num = np.array([a for a, _ in pairs], dtype=float)
    den = np.array([b for _, b in pairs], dtype=float)
    k, n = len(pairs), int(den.sum())
    p = float(num.sum() / den.sum())
    if k < 2:
        return Estimate(p, None, None, n, SHARE_CLUSTERED, None, k, cluster, note=f"needs two or more {cluster}")
    variance = k / (k - 1) * float(((num - p * den) ** 2).sum()) / n**2
    return share_at_design_effect(p, variance, n, k, cluster)


SHARE_CLUSTERED = "clopper-pearson-clustered"


def clustered_mean_share(
    sums: Sequence[float], counts: Sequence[int], observations: int, cluster: str
) -> Estimate | None:
    """The mean of per-item shares in [0, 1] (pass^k: each item's chance that k of its trials all succeed) over
    items in independent clusters (``sums[k]`` adds the shares of the ``counts[k]`` items of cluster k): the
    Korn-Graubard exact interval of :func:`share_at_design_effect` with the cluster-robust variance, its effective
    size capped at ``observations``, the independent 0/1 outcomes the shares rest on (an item's disjoint runs of k
    trials), not at the items: a share of k of 4 trials carries more than one item's 0/1. ``n`` counts the items;
    one cluster gives no interval."""
    pairs = [(float(a), int(b)) for a, b in zip(sums, counts) if b]
    if not pairs:
        return None
    num = np.array([a for a, _ in pairs])
    den = np.array([b for _, b in pairs], dtype=float)
    k, n = len(pairs), int(den.sum())
    p = float(min(1.0, max(0.0, num.sum() / den.sum())))
    if k < 2:
        return Estimate(p, None, None, n, SHARE_CLUSTERED, None, k, cluster, note=f"needs two or more {cluster}")
    variance = k / (k - 1) * float(((num - p * den) ** 2).sum()) / n**2
    return replace(share_at_design_effect(p, variance, max(n, observations), k, cluster), n=n)


def share_at_design_effect(p: float, variance: float, n: int, clusters: int, cluster: str) -> Estimate:
    """The exact interval of a share ``p`` of ``n`` 0/1 units in ``clusters`` independent clusters whose estimate
    has ``variance`` (``clopper-pearson-clustered``; Korn and Graubard 1998): ``n_eff = p (1 - p) / variance``, at
    most ``n`` (``n`` itself where ``p`` is 0 or 1, which has no variance to go on), times ``(t_(0.975, n - 1) /
    t_(0.975, clusters - 1))^2``; then the Beta (Clopper-Pearson) interval at ``k = p n_eff``. Unlike a t interval
    it is skewed where the share nears 0 or 1 and still bounds a share of 0 or 1. ``sd`` per cluster."""
    from scipy.stats import t

    n_eff = min(float(n), p * (1 - p) / variance) if variance > 0 and 0 < p < 1 else float(n)
    n_eff *= (float(t.ppf(1 - (1 - LEVEL) / 2, n - 1)) / float(t.ppf(1 - (1 - LEVEL) / 2, clusters - 1))) ** 2
    low, high = _beta_interval(p, n_eff)
    sd = math.sqrt(variance * clusters)
    return Estimate(p, low, high, n, SHARE_CLUSTERED, sd, clusters, cluster, effective_n=n_eff)
