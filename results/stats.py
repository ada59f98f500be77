"""How sure a headline metric is: its 95 % interval, and the smallest difference a run of its size separates.

Every protocol's metrics code turns its per-unit outcomes into an :class:`Estimate` with one of these methods and
writes :func:`summary_entries` into ``summary["metrics"]`` (``intervals`` and ``separable``, keyed by the metric's
path; read with :func:`results.view.adapters.interval_of`). ``docs/statistics.md`` says which method each metric
uses and why.

* ``clopper-pearson``: a share of independent units (each 0 or 1): the exact binomial interval
  (``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``).
* ``bootstrap-units``: a mean (or another statistic) of independent units' values: units resampled with
  replacement (``scipy.stats.bootstrap``, BCa; the percentile interval where BCa is undefined).
* ``bootstrap-clustered``: a ratio over units that share a cluster (JudgeAgent's answers within one batch,
  interview sessions of one seed question): whole clusters resampled, the statistic ``sum(numerators) /
  sum(denominators)`` recomputed (``paired=True``).

Resampling is seeded (:data:`SEED`), so a run's intervals are reproducible.

Separability (two targets, equal size, two-sided test at ``alpha`` = 0.05 with power 0.8, normal approximation):
``difference = (z_0.975 + z_0.8) * sqrt(2) * sd / sqrt(n)``, and the units that separate a named difference
``d``: ``n = ceil(2 * ((z_0.975 + z_0.8) * sd / d) ** 2)``. ``sd`` is the per-unit standard deviation: the
sample standard deviation of the units' values (``bootstrap-units``), ``sqrt(p (1 - p))`` for a share (the
binomial analogue), and ``SE_bootstrap * sqrt(clusters)`` where units are clusters (``n`` counts clusters then).
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
) -> Estimate | None:
    """``statistic(*data, axis=-1)`` with its interval from resampling the units (the positions of ``data``'s
    aligned arrays) together; ``sd`` from the bootstrap standard error unless given a function of it."""
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
                paired=True,
                vectorized=True,
                axis=-1,
                confidence_level=LEVEL,
                method=how,
                rng=np.random.default_rng(SEED),
            )

    res = run("BCa")
    if not (np.isfinite(res.confidence_interval.low) and np.isfinite(res.confidence_interval.high)):
        res = run("percentile")
    se = float(res.standard_error)
    return Estimate(
        estimate,
        float(res.confidence_interval.low),
        float(res.confidence_interval.high),
        n,
        method,
        sd(se) if sd else se * math.sqrt(units),
        units,
        unit,
    )


def _mean(values: np.ndarray, axis: int = -1) -> Any:
    return values.mean(axis=axis)


def mean(values: Sequence[float], unit: str) -> Estimate | None:
    """The mean of independent units' values, bootstrapped over the units; ``sd`` the sample standard
    deviation."""
    values = [float(v) for v in values]
    return bootstrap(
        [values], _mean, n=len(values), unit=unit, method="bootstrap-units", sd=lambda se: float(np.std(values, ddof=1))
    )


def _ratio(nums: np.ndarray, dens: np.ndarray, axis: int = -1) -> Any:
    with np.errstate(invalid="ignore", divide="ignore"):
        return nums.sum(axis=axis) / dens.sum(axis=axis)


def clustered(nums: Sequence[float], dens: Sequence[int], unit: str, cluster: str) -> Estimate | None:
    """``sum(nums) / sum(dens)`` over clusters (a cluster holds ``den`` units whose values sum to ``num``).

    Clusters of one unit each are independent units: a share of 0/1 values gets :func:`proportion`, other values
    :func:`mean`. Otherwise whole clusters are resampled (``bootstrap-clustered``); ``n`` is the units, the
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
    n = sum(b for _, b in pairs)
    ratios = {a / b for a, b in pairs}
    if len(ratios) == 1 and len(pairs) >= 2:  # every cluster alike: every resample gives the estimate, which is
        return Estimate(
            ratios.pop(),
            None,
            None,
            n,
            "bootstrap-clustered",
            0.0,
            len(pairs),
            cluster,  # no
            note=f"all {len(pairs)} {cluster} alike: resampling gives no interval",
        )  # certainty
    return bootstrap(
        [[a for a, _ in pairs], [b for _, b in pairs]], _ratio, n=n, unit=cluster, method="bootstrap-clustered"
    )
