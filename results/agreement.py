"""Agreement between raters: Cohen's kappa (two), Fleiss' kappa (several, every item rated by as many),
Krippendorff's alpha (several, missing ratings allowed; nominal or interval distances).

Cohen's and Fleiss' kappa are statsmodels' (``statsmodels.stats.inter_rater``, BSD-3). Krippendorff's alpha is
written here: the ``krippendorff`` package on PyPI is GPL-3, which this Apache-2.0 package cannot depend on.
It follows Krippendorff, "Computing Krippendorff's Alpha-Reliability" (2011), sections B (nominal data, any
number of observers, missing values) and E (interval metric): the coincidence matrix of pairable values, each
unit's pairs weighted ``1 / (m_u - 1)``, and ``alpha = 1 - D_o / D_e``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from statsmodels.stats.inter_rater import (  # type: ignore[import-untyped]  # statsmodels ships no type hints
    aggregate_raters,
    cohens_kappa,
    fleiss_kappa,
)


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa with its asymptotic standard error and 95 % interval (SAS PROC FREQ's formulas)."""

    kappa: float
    ase: float
    low: float
    high: float


def cohen(table: np.ndarray | list[list[int]]) -> Kappa:
    """Cohen's kappa of two raters from their square contingency table (rows rater 1, columns rater 2)."""
    res = cohens_kappa(np.asarray(table, float))
    return Kappa(float(res.kappa), float(res.std_kappa), float(res.kappa_low), float(res.kappa_upp))


def fleiss(ratings: np.ndarray | list[list[int]]) -> float:
    """Fleiss' kappa of items (rows) each rated by the same number of raters (columns, category codes)."""
    table, _ = aggregate_raters(np.asarray(ratings))
    return float(fleiss_kappa(table))


def krippendorff(
    reliability_data: np.ndarray | list[list[float]], level: Literal["nominal", "interval"] = "nominal"
) -> float:
    """Krippendorff's alpha of coders (rows) over units (columns), NaN for a value not given.

    Units with fewer than two values are not pairable and count for nothing; NaN when no unit is pairable or
    every pairable value is the same (no expected disagreement)."""
    data = np.asarray(reliability_data, float)
    values = np.unique(data[~np.isnan(data)])
    k = len(values)
    # counts[u, c]: how many coders gave unit u the value values[c]
    counts = np.stack([(data == v).sum(axis=0) for v in values], axis=1).astype(float)
    pairable = counts.sum(axis=1)
    counts = counts[pairable >= 2]
    m = pairable[pairable >= 2]
    if not len(m):
        return float("nan")
    per_unit = counts[:, :, None] * counts[:, None, :] - counts[:, :, None] * np.eye(k)[None]
    coincidence = (per_unit / (m - 1)[:, None, None]).sum(axis=0)
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    else:
        delta = (values[:, None] - values[None, :]) ** 2
    observed = (coincidence * delta).sum() / n
    expected = (np.outer(n_c, n_c) * delta).sum() / (n * (n - 1))
    return float(1 - observed / expected) if expected > 0 else float("nan")
