"""Agreement and IRT statistics against published reference values (facts from outside sources, not code).

* Cohen's kappa: the SAS PROC FREQ 3x3 example as statsmodels' ``test_inter_rater.py`` pins it (kappa 0.4842,
  ASE 0.1380, 95 % limits 0.2137-0.7547).
* Fleiss' kappa: Fleiss (1971), 30 patients x 6 psychiatrists x 5 diagnoses (R ``irr``'s ``diagnoses``;
  ``kappam.fleiss`` gives 0.4302445).
* Krippendorff's alpha: his 3-coder x 15-unit example with missing values (the ``Computing Krippendorff's
  Alpha-Reliability`` example reproduced on Wikipedia): nominal 0.691358, interval 0.810845.
* 2PL item parameters of LSAT7 (Bock & Lieberman 1970, LSAT section 7, 1000 examinees x 5 items, as R
  ``mirt``'s ``LSAT7`` pattern table) against ``mirt(expand.table(LSAT7), 1)``'s published slope ``a1`` and
  intercept ``d`` (mirt's ``PLCI.mirt`` reference page and its ``confmirtOne`` test).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dyneval.nodes.irt import calibrate
from dyneval.results.agreement import cohen, fleiss, krippendorff

SAS_TABLE = [[0, 4, 1], [0, 8, 0], [0, 1, 5]]

# Fleiss (1971), Table 1 as raw ratings: patient (row) x psychiatrist (column), diagnosis 1-5.
DIAGNOSES = [
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5], [2, 2, 2, 4, 4, 4],
    [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4], [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5],
    [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4], [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5],
    [3, 3, 3, 3, 3, 5], [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4], [1, 4, 4, 4, 4, 5],
    [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4], [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
]  # fmt: skip

N = np.nan
KRIPPENDORFF = [
    [N, N, N, N, N, 3, 4, 1, 2, 1, 1, 3, 3, N, 3],
    [1, N, 2, 1, 3, 3, 4, 3, N, N, N, N, N, N, N],
    [N, N, 2, 1, 3, 4, 4, N, 2, 1, 1, 3, 3, N, 4],
]

# LSAT7: frequency of each response pattern, patterns in binary order 00000, 00001, ..., 11111 (item 1 first).
LSAT7_FREQ = [12, 19, 1, 7, 3, 19, 3, 17, 10, 5, 3, 7, 7, 23, 8, 28,
              7, 39, 11, 34, 14, 51, 15, 90, 6, 25, 7, 35, 18, 136, 32, 308]  # fmt: skip
# mirt's estimates: slope a1 and intercept d (P = logistic(a1 * theta + d), so b = -d / a1).
MIRT_A = [0.9879, 1.0809, 1.7058, 0.7652, 0.7358]
MIRT_D = [1.8561, 0.8080, 1.8042, 0.4860, 1.8545]


def test_cohen_kappa_matches_the_sas_example():
    k = cohen(SAS_TABLE)
    assert (round(k.kappa, 4), round(k.ase, 4), round(k.low, 4), round(k.high, 4)) == (0.4842, 0.1380, 0.2137, 0.7547)


def test_fleiss_kappa_matches_fleiss_1971():
    assert fleiss(DIAGNOSES) == pytest.approx(0.4302445, abs=5e-8)


def test_krippendorff_alpha_matches_his_three_coder_example_with_missing_values():
    assert round(krippendorff(KRIPPENDORFF, "nominal"), 6) == 0.691358
    assert round(krippendorff(KRIPPENDORFF, "interval"), 6) == 0.810845


def test_krippendorff_alpha_is_nan_without_a_pairable_unit():
    assert np.isnan(krippendorff([[1, N], [N, 2]]))


def test_2pl_calibration_of_lsat7_matches_mirt_within_0_01():
    patterns = np.array(list(itertools.product([0, 1], repeat=5)))
    data = np.repeat(patterns, LSAT7_FREQ, axis=0)
    assert data.shape == (1000, 5)
    examinee, item = np.nonzero(np.ones_like(data))
    # mirt fits by maximum likelihood: our priors are switched off (b) or made flat (log a)
    fit = calibrate(examinee, item, data[examinee, item], 5, prior_sd_b=None, prior_sd_log_a=1e6, tol=1e-7)
    assert fit.converged
    np.testing.assert_allclose(fit.a, MIRT_A, atol=1e-2)
    np.testing.assert_allclose(-fit.a * fit.b, MIRT_D, atol=1e-2)
