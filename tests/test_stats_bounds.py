"""A t interval is clipped to the values its metric can take (results/stats.py): a share never leaves 0-1, and
clipping moves no interval's coverage, since the part cut off holds no value the metric can take."""

from __future__ import annotations

import numpy as np

from dyneval.results.stats import clustered, over_answers


def _near_one(rng: np.random.Generator) -> tuple[list[float], list[int]]:
    """Ten clusters of five 0/1 answers, each right with probability 0.97: a share near its bound."""
    sizes = [5] * 10
    return [float((rng.random(k) < 0.97).sum()) for k in sizes], sizes


def test_a_cluster_robust_t_interval_of_a_share_near_one_ends_at_one():
    got = clustered([5, 5, 5, 5, 5, 5, 5, 5, 5, 3], [5] * 10, "answers", "batches", (0, 1))
    free = clustered([5, 5, 5, 5, 5, 5, 5, 5, 5, 3], [5] * 10, "answers", "batches")
    assert free.high > 1 and got.high == 1.0 and got.low == free.low and got.estimate == free.estimate == 0.96


def test_a_t_over_answers_interval_of_a_score_near_its_floor_starts_at_zero():
    stars = [0.0] * 9 + [100.0]  # S on 0-100: one full-mark answer among ten
    groups = [(10.0, [x - 10.0 for x in stars])]
    free, got = over_answers(groups, "answers"), over_answers(groups, "answers", (0.0, 100.0))
    assert free.low < 0 and got.low == 0.0 and got.high == free.high


def test_clipping_leaves_coverage_unchanged_and_every_interval_within_the_bounds():
    rng = np.random.default_rng(5)
    truth, covered, clipped = 0.97, {"free": 0, "clipped": 0}, 0
    for _ in range(500):
        nums, dens = _near_one(rng)
        free = clustered(nums, dens, "answers", "batches")
        got = clustered(nums, dens, "answers", "batches", (0, 1))
        if free.low is None:
            continue
        assert 0 <= got.low <= got.high <= 1
        clipped += got.high < free.high
        covered["free"] += free.low <= truth <= free.high
        covered["clipped"] += got.low <= truth <= got.high
    assert clipped > 100 and covered["free"] == covered["clipped"]
