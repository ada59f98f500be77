"""Judge-calibrated estimates: a run's judge-based metric corrected by the judge's error measured on human labels.

A judge that errs moves an accuracy, and an interval that treats its verdicts as the truth says nothing of it.
Given the run's judged units and a sample of them labelled by people (``judgecheck --labels`` format), the
judge's error rates are estimated from the labels and the run's verdict shares corrected:

* correct / wrong verdicts: the misclassification (Rogan-Gladen, 1978) correction
  ``p = (q + Sp - 1) / (Se + Sp - 1)``, clipped to [0, 1], with ``q`` the run's share judged correct and
  ``Se = P(judged correct | correct)``, ``Sp = P(judged wrong | wrong)`` from the labels;
* a scale of k classes (0-3 stars, A / B / tie): the confusion-matrix correction: the run's verdict shares
  ``q = M^T p`` with ``M[h, j] = P(judge says j | people say h)``, solved for the true shares ``p`` by
  non-negative least squares on the simplex (Buonaccorsi, *Measurement Error*, 2010, section 3.6).

The interval is a percentile bootstrap that resamples the run's units and the labelled items together in each
replicate, so it carries the run's sampling error and the error of the estimated ``Se``/``Sp`` (or ``M``). Its
coverage was measured by simulation (``tests/test_calibration_stats.py``: judge Se 0.85 / Sp 0.80, true
accuracy 0.6, 300 units of which 60 labelled). A judge too weak to correct (Youden's ``Se + Sp - 1`` below
:data:`MIN_YOUDEN`, or a singular ``M``) is reported as such, not divided by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

#: Below this ``Se + Sp - 1`` the judge's verdicts carry too little about the truth to correct (the division
#: would multiply the run's sampling error by more than 1 / MIN_YOUDEN = 10).
MIN_YOUDEN = 0.1
#: Above this condition number the confusion matrix is treated as singular (a class the judge cannot tell apart).
MAX_CONDITION = 50.0
REPLICATES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Calibrated:
    """A judge-calibrated estimate: ``value`` with its bootstrap interval, or ``note`` saying why there is none."""

    value: float | None
    low: float | None
    high: float | None
    labels: int
    note: str | None = None


def rogan_gladen(q: np.ndarray | float, se: np.ndarray | float, sp: np.ndarray | float) -> np.ndarray:
    """``(q + Sp - 1) / (Se + Sp - 1)`` clipped to [0, 1] (broadcasts; NaN where ``Se + Sp - 1 <= 0``)."""
    youden = np.asarray(se, float) + np.asarray(sp, float) - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (np.asarray(q, float) + np.asarray(sp, float) - 1) / youden
    return np.where(youden > 0, np.clip(p, 0.0, 1.0), np.nan)


def _rates(judge: np.ndarray, human: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Sensitivity and specificity of ``judge`` against ``human`` (0/1 arrays; NaN where a class is absent)."""
    pos = human.sum(axis=axis)
    neg = (1 - human).sum(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = (judge * human).sum(axis=axis) / pos
        sp = ((1 - judge) * (1 - human)).sum(axis=axis) / neg
    return se, sp


def _percentile(values: np.ndarray) -> tuple[float, float]:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    return float(low), float(high)


def calibrated_share(
    correct: Sequence[float],
    graded: Sequence[float],
    label_judge: Sequence[int],
    label_human: Sequence[int],
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> Calibrated:
    """The share correct of a run whose unit ``u`` has ``correct[u]`` of ``graded[u]`` judged verdicts correct,
    corrected by the judge's Se/Sp on the labelled items (``label_judge[i]`` the judge's verdict, 1 = correct,
    ``label_human[i]`` the person's), with the joint bootstrap interval (module docstring)."""
    c, g = np.asarray(correct, float), np.asarray(graded, float)
    j, h = np.asarray(label_judge, float), np.asarray(label_human, float)
    m = len(j)
    if not m or g.sum() == 0:
        return Calibrated(None, None, None, m, "no labelled items" if not m else "no judged verdicts")
    se, sp = _rates(j, h)
    if np.isnan(se) or np.isnan(sp):
        missing = "correct" if np.isnan(se) else "wrong"
        return Calibrated(None, None, None, m, f"no labelled item is {missing}: the judge's error cannot be measured")
    youden = float(se + sp - 1)
    if youden < MIN_YOUDEN:
        return Calibrated(
            None,
            None,
            None,
            m,
            f"judge too weak to correct: Se {se:.2f} + Sp {sp:.2f} - 1 = {youden:.2f} (needs >= {MIN_YOUDEN})",
        )
    value = float(rogan_gladen(c.sum() / g.sum(), se, sp))
    units = rng.integers(0, len(c), size=(replicates, len(c)))
    items = rng.integers(0, m, size=(replicates, m))
    q_star = c[units].sum(axis=1) / np.maximum(g[units].sum(axis=1), 1)
    se_star, sp_star = _rates(j[items], h[items])
    low, high = _percentile(rogan_gladen(q_star, se_star, sp_star))
    return Calibrated(value, low, high, m)


def _counts(index: np.ndarray, k: int) -> np.ndarray:
    """How often each of ``0..k-1`` occurs in each row of ``index`` (rows, k)."""
    rows = np.atleast_2d(index)
    flat = np.arange(len(rows))[:, None] * k + rows
    return np.bincount(flat.ravel(), minlength=len(rows) * k).reshape(len(rows), k)


def confusion(judge: np.ndarray, human: np.ndarray, k: int) -> np.ndarray:
    """Row-normalised confusion matrices ``M[r, h, j] = P(judge j | human h)``, one per row ``r`` of the class
    indices ``judge``/``human`` (NaN rows for a class no person gave)."""
    counts = _counts(np.atleast_2d(human) * k + np.atleast_2d(judge), k * k).reshape(-1, k, k).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return counts / counts.sum(axis=-1, keepdims=True)


def corrected_shares(q: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """The true class shares ``p`` (on the simplex) whose judged shares ``M^T p`` are closest to ``q``."""
    p, _ = nnls(matrix.T, q)
    total = p.sum()
    return p / total if total > 0 else np.full(len(q), np.nan)


def calibrated_mean(
    verdicts: Sequence[int],
    values: Sequence[float],
    label_judge: Sequence[int],
    label_human: Sequence[int],
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> Calibrated:
    """The mean class value (e.g. stars, or a win = 1 / tie = 0.5 / loss = 0) of a run's verdicts (class indices
    into ``values``), corrected by the judge's confusion matrix on the labelled items, with the joint bootstrap
    interval (module docstring)."""
    k = len(values)
    v = np.asarray(values, float)
    run = np.asarray(verdicts, int)
    j, h = np.asarray(label_judge, int), np.asarray(label_human, int)
    m = len(j)
    if not m or not len(run):
        return Calibrated(None, None, None, m, "no labelled items" if not m else "no judged verdicts")
    matrix = confusion(j, h, k)[0]
    given = ~np.isnan(matrix).any(axis=1)
    if not given.all():
        absent = ", ".join(str(values[int(i)]) for i in np.flatnonzero(~given))
        return Calibrated(None, None, None, m, f"no labelled item has the class {absent}: its error is unmeasured")
    condition = float(np.linalg.cond(matrix))
    if condition > MAX_CONDITION:
        return Calibrated(
            None,
            None,
            None,
            m,
            f"judge too weak to correct: its confusion matrix is near singular (cond {condition:.0f})",
        )
    value = float(corrected_shares(np.bincount(run, minlength=k) / len(run), matrix) @ v)
    units = rng.integers(0, len(run), size=(replicates, len(run)))
    items = rng.integers(0, m, size=(replicates, m))
    shares = _counts(run[units], k) / len(run)
    matrices = confusion(j[items], h[items], k)
    estimates = np.array(
        [
            corrected_shares(q, mm) @ v if not np.isnan(mm).any() else np.nan
            for q, mm in zip(shares, matrices, strict=True)
        ]
    )
    low, high = _percentile(estimates)
    return Calibrated(value, low, high, m)
