"""Judge-calibrated estimates: a run's judge-based metric corrected by the judge's error measured on human labels.

A judge that errs moves an accuracy, and an interval that treats its verdicts as the truth says nothing of it.
Given the run's judged answers and a sample of them labelled by people (``judgecheck --labels`` format), the
judge's error rates are estimated from the labels and the run's metric corrected at the level of the verdicts,
then carried through the metric:

* correct / wrong verdicts: the misclassification (Rogan-Gladen, 1978) correction
  ``p = (q + Sp - 1) / (Se + Sp - 1)``, clipped to [0, 1], with ``q`` the share judged correct and
  ``Se = P(judged correct | correct)``, ``Sp = P(judged wrong | wrong)`` from the labels (:func:`rogan_gladen`).
  A metric that counts some answers *because* of their own verdict (Score@n carries a session's answer judged
  correct to the later interactions) counts each such answer at its expected truth given that verdict,
  ``P(correct | judged correct) = Se p / q`` and ``P(correct | judged wrong) = (1 - Se) p / (1 - q)`` (Bayes),
  with ``p`` and ``q`` those of the answers it was selected among (:class:`VerdictCounts`);
* two verdicts on one question (JudgeAgent's before / after the suggestions): the four joint shares corrected by
  the Kronecker product of the two verdicts' 2 x 2 error matrices (an identity for a verdict compared in code),
  so ACC1, ACC2, CR and CtE come from one set of corrected shares (:func:`calibrated_pairs`);
* a scale of k classes (0-3 stars): the confusion-matrix correction: the judged shares ``q = M^T p`` with
  ``M[h, j] = P(judge says j | people say h)``, solved for the true shares ``p`` by non-negative least squares
  on the simplex (Buonaccorsi, *Measurement Error*, 2010, section 3.6; :func:`calibrated_stars`).

Every interval is a percentile bootstrap (bias-corrected for Rogan-Gladen: :func:`_percentile`) that resamples the
run's independent units (clusters: sessions, seed questions, batches; LLMEval's answers within their sessions) and
the labelled items together in each replicate, so it carries the run's sampling error and the error of the estimated
``Se``/``Sp`` (or ``M``). The corrections assume the judge errs at the same rates on every answer the metric counts
as on the labelled ones (labels drawn at random from the run's judged answers give exactly that for the whole run).
Coverage, measured by simulation with a known truth for every metric: ``bench/calibration_coverage.py``
(docs/judges.md). A judge too weak to correct (Youden's ``Se + Sp - 1`` below :data:`MIN_YOUDEN`, or an ``M`` near
singular) is reported as such, not divided by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls
from scipy.stats import norm

#: Below this ``Se + Sp - 1`` the judge's verdicts carry too little about the truth to correct (the division
#: would multiply the run's sampling error by more than 1 / MIN_YOUDEN = 10).
MIN_YOUDEN = 0.1
#: Above this condition number the confusion matrix is treated as singular (a class the judge cannot tell apart).
MAX_CONDITION = 50.0
REPLICATES = 2000
LEVEL = 0.95
#: Class indices of labelled items (1 = correct for correct / wrong verdicts; the stars on a star scale).
Classes = Sequence[int] | np.ndarray


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


def _percentile(values: np.ndarray, estimate: float, *, bias_corrected: bool) -> tuple[float, float]:
    """The percentile interval of the bootstrap ``values``, replicates without a value (a judge too weak on the drawn
    labels) left out. ``bias_corrected``: the bias-corrected percentile interval (Efron, 1981; Efron and Tibshirani,
    *An Introduction to the Bootstrap*, 1993, section 14.3) around ``estimate``: the percentiles move by twice
    ``z0``, the normal quantile of the share of replicates below the estimate. Chosen by measured coverage
    (``bench/calibration_coverage.py``, 500 runs): for the Rogan-Gladen corrections, whose replicates lean to one
    side of the estimate where a ratio of estimated rates carries answers forward (Score@3: 94.2 % corrected,
    92.2 % plain); not for the non-negative least squares shares, whose replicates pile up at a boundary of the
    simplex (JudgeAgent's CtE near 0: 95.6 % plain, 89.4 % corrected; LLMEval-3's S: 96.8 % plain, 94.4 %)."""
    drawn = values[~np.isnan(values)]
    if not len(drawn):
        return float("nan"), float("nan")
    tail = norm.ppf((1 - LEVEL) / 2)
    z0 = 0.0
    if bias_corrected:
        below = (np.sum(drawn < estimate) + 0.5 * np.sum(drawn == estimate)) / len(drawn)
        z0 = float(norm.ppf(np.clip(below, 0.5 / len(drawn), 1 - 0.5 / len(drawn))))
    low, high = np.percentile(drawn, 100 * norm.cdf([2 * z0 + tail, 2 * z0 - tail]))
    return float(low), float(high)


def _counts(index: np.ndarray, k: int) -> np.ndarray:
    """How often each of ``0..k-1`` occurs in each row of ``index`` (rows, k)."""
    rows = np.atleast_2d(index)
    flat = np.arange(len(rows))[:, None] * k + rows
    return np.bincount(flat.ravel(), minlength=len(rows) * k).reshape(len(rows), k)


def _binary_error(judge: np.ndarray, human: np.ndarray) -> str | None:
    """Why the labels cannot correct correct / wrong verdicts (None when they can)."""
    if not len(judge):
        return "no labelled items"
    se, sp = _rates(judge, human)
    if np.isnan(se) or np.isnan(sp):
        missing = "correct" if np.isnan(se) else "wrong"
        return f"no labelled item is {missing}: the judge's error cannot be measured"
    youden = float(se + sp - 1)
    if youden < MIN_YOUDEN:
        return f"judge too weak to correct: Se {se:.2f} + Sp {sp:.2f} - 1 = {youden:.2f} (needs >= {MIN_YOUDEN})"
    return None


def _joint_bootstrap(
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    units: int,
    labels: int,
    rng: np.random.Generator,
    replicates: int,
) -> tuple[float, float, float]:
    """The value of ``statistic(rows, items)`` on the run and its percentile interval over ``replicates`` that
    resample the units (``rows``: their indices) and the labelled items (``items``: their indices) together, one
    row of each per replicate."""
    value = float(statistic(np.arange(units)[None, :], np.arange(labels)[None, :])[0])
    rows = rng.integers(0, units, size=(replicates, units))
    items = rng.integers(0, labels, size=(replicates, labels))
    low, high = _percentile(statistic(rows, items), value, bias_corrected=True)
    return value, low, high


@dataclass(frozen=True)
class VerdictCounts:
    """A metric of correct / wrong verdicts, per independent unit ``u`` (rows) and stratum ``k`` (columns): the
    answers of a stratum were judged without regard to each other's verdicts (one interaction of a session, all
    of a run's base answers), so Rogan-Gladen holds within it.

    ``judged[u, k]`` / ``said_correct[u, k]``: the stratum's judged answers and those judged correct (weights:
    a JudgeAgent answer's gain); ``counted_correct`` / ``counted_wrong``: the weight the metric gives to the
    stratum's answers judged correct / wrong (all of them for a plain share; only those carried forward for a
    Score@n); ``fixed[u]``: the metric's numerator from answers decided without a judge; ``denominator[u]``."""

    judged: np.ndarray
    said_correct: np.ndarray
    counted_correct: np.ndarray
    counted_wrong: np.ndarray
    fixed: np.ndarray
    denominator: np.ndarray

    @classmethod
    def share(cls, correct: Sequence[float], graded: Sequence[float]) -> VerdictCounts:
        """A plain share: every judged answer counts once, ``correct[u]`` of ``graded[u]`` judged correct."""
        c, g = np.asarray(correct, float)[:, None], np.asarray(graded, float)[:, None]
        return cls(g, c, c, g - c, np.zeros(len(c)), g[:, 0])

    def raw(self) -> float:
        """The metric as the run computed it (every verdict taken as the truth)."""
        return float((self.fixed.sum() + self.counted_correct.sum()) / self.denominator.sum())

    def corrected(self, rows: np.ndarray, se: np.ndarray, sp: np.ndarray) -> np.ndarray:
        """The metric over each row of unit indices ``rows`` (replicates, units) with the judge's ``se``/``sp``
        (replicates)."""
        judged, said = self.judged[rows].sum(axis=1), self.said_correct[rows].sum(axis=1)
        right, wrong = self.counted_correct[rows].sum(axis=1), self.counted_wrong[rows].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = said / judged
            p = rogan_gladen(q, se[:, None], sp[:, None])
            if_correct = se[:, None] * p / q
            if_wrong = (1 - se[:, None]) * p / (1 - q)
            expected = np.where(right > 0, right * if_correct, 0.0) + np.where(wrong > 0, wrong * if_wrong, 0.0)
        # each answer's expected truth is in [0, 1] up to the sampling error of p and q: the total is kept there
        counted = np.clip(expected.sum(axis=1), 0.0, (right + wrong).sum(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.fixed[rows].sum(axis=1) + counted) / self.denominator[rows].sum(axis=1)


def calibrated_verdicts(
    counts: VerdictCounts,
    label_judge: Classes,
    label_human: Classes,
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> Calibrated:
    """The metric of ``counts`` corrected by the judge's Se/Sp on the labelled items (``label_judge[i]`` the
    judge's verdict, 1 = correct, ``label_human[i]`` the person's), with the joint bootstrap interval."""
    j, h = np.asarray(label_judge, float), np.asarray(label_human, float)
    m = len(j)
    if counts.denominator.sum() == 0:
        return Calibrated(None, None, None, m, "no judged verdicts")
    if note := _binary_error(j, h):
        return Calibrated(None, None, None, m, note)

    def statistic(rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        se, sp = _rates(j[items], h[items])
        return counts.corrected(rows, se, sp)

    value, low, high = _joint_bootstrap(statistic, len(counts.denominator), m, rng, replicates)
    return Calibrated(value, low, high, m)


def calibrated_share(
    correct: Sequence[float],
    graded: Sequence[float],
    label_judge: Classes,
    label_human: Classes,
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> Calibrated:
    """The share correct of a run whose unit ``u`` has ``correct[u]`` of ``graded[u]`` judged verdicts correct,
    corrected by Rogan-Gladen (:func:`calibrated_verdicts` of :meth:`VerdictCounts.share`)."""
    return calibrated_verdicts(
        VerdictCounts.share(correct, graded), label_judge, label_human, rng=rng, replicates=replicates
    )


#: The four joint outcomes of a question answered twice (before, after), index ``2 * before + after``
#: (1 = correct), and the metrics of Algorithm 2 over them (JudgeAgent, seed 000).
PAIR_METRICS: dict[str, tuple[int, ...]] = {"acc1": (2, 3), "acc2": (1, 3), "cr": (1,), "cte": (2,)}


def _error_matrix(se: float, sp: float) -> np.ndarray:
    """``M[truth, judged]`` of correct / wrong verdicts (0 = wrong, 1 = correct)."""
    return np.array([[sp, 1 - sp], [1 - se, se]])


def _pair_shares(totals: np.ndarray, se: float, sp: float) -> np.ndarray:
    """The true joint shares of the pairs whose judged counts are ``totals[g, cell]``; group ``g = 2 * a + b``
    says whether the first (``a``) and second (``b``) verdict came from the judge (else compared in code)."""
    matrix, same = _error_matrix(se, sp), np.eye(2)
    truth = np.zeros(4)
    for g, row in enumerate(totals):
        if not row.sum():
            continue
        first, second = (matrix if g >= 2 else same), (matrix if g % 2 else same)
        truth += row.sum() * (corrected_shares(row / row.sum(), np.kron(first, second)) if g else row / row.sum())
    return truth / totals.sum()


def calibrated_pairs(
    cells: np.ndarray,
    label_judge: Classes,
    label_human: Classes,
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> dict[str, Calibrated]:
    """ACC1, ACC2, CR and CtE (:data:`PAIR_METRICS`) of questions answered twice, ``cells[u, g, c]`` counting
    unit ``u``'s questions of judge group ``g`` (:func:`_pair_shares`) with judged outcome ``c``, corrected by
    the Kronecker product of the verdicts' error matrices (the two verdicts err independently given the truth),
    with the joint bootstrap interval."""
    j, h = np.asarray(label_judge, float), np.asarray(label_human, float)
    m = len(j)
    note = "no validated questions" if not cells.sum() else _binary_error(j, h)
    if note:
        return {name: Calibrated(None, None, None, m, note) for name in PAIR_METRICS}
    flat = cells.reshape(len(cells), 16).astype(float)

    def statistic(rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        totals = flat[rows].sum(axis=1).reshape(-1, 4, 4)
        se, sp = _rates(j[items], h[items])
        return np.array(
            [
                _pair_shares(t, s, p) if s + p - 1 > 0 else np.full(4, np.nan)
                for t, s, p in zip(totals, np.atleast_1d(se), np.atleast_1d(sp), strict=True)
            ]
        )

    shares = statistic(np.arange(len(cells))[None, :], np.arange(m)[None, :])[0]
    rows = rng.integers(0, len(cells), size=(replicates, len(cells)))
    boot = statistic(rows, rng.integers(0, m, size=(replicates, m)))
    out = {}
    for name, outcome in PAIR_METRICS.items():
        value = float(shares[list(outcome)].sum())
        low, high = _percentile(boot[:, list(outcome)].sum(axis=1), value, bias_corrected=False)
        out[name] = Calibrated(value, low, high, m)
    return out


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


def calibrated_stars(
    counts: np.ndarray,
    values: Sequence[float],
    label_judge: Classes,
    label_human: Classes,
    *,
    rng: np.random.Generator,
    replicates: int = REPLICATES,
) -> Calibrated:
    """The mean over sessions of each session's mean class value (stars; LLMEval-3's S before its scaling), with
    ``counts[s, c]`` the answers of session ``s`` the judge put in class ``c`` (an index into ``values``),
    corrected by the judge's confusion matrix on the labelled items. The interval resamples each session's
    answers (independent draws from the bank, seed 002 section 3) and the labelled items together."""
    k = len(values)
    v = np.asarray(values, float)
    given = np.atleast_2d(np.asarray(counts, float))
    given = given[given.sum(axis=1) > 0]
    j, h = np.asarray(label_judge, int), np.asarray(label_human, int)
    m = len(j)
    if not m or not len(given):
        return Calibrated(None, None, None, m, "no labelled items" if not m else "no judged verdicts")
    matrix = confusion(j, h, k)[0]
    rated = ~np.isnan(matrix).any(axis=1)
    if not rated.all():
        absent = ", ".join(str(values[int(i)]) for i in np.flatnonzero(~rated))
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
    sizes = given.sum(axis=1)
    value = float(corrected_shares((given / sizes[:, None]).mean(axis=0), matrix) @ v)
    drawn = np.stack([rng.multinomial(int(n), row / n, size=replicates) for row, n in zip(given, sizes)], axis=1)
    shares = (drawn / sizes[None, :, None]).mean(axis=1)
    items = rng.integers(0, m, size=(replicates, m))
    matrices = confusion(j[items], h[items], k)
    estimates = np.array(
        [
            corrected_shares(q, mm) @ v if not np.isnan(mm).any() else np.nan
            for q, mm in zip(shares, matrices, strict=True)
        ]
    )
    low, high = _percentile(estimates, value, bias_corrected=False)
    return Calibrated(value, low, high, m)
