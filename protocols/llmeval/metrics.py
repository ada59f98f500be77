"""Pure metric functions of LLMEval-3 (seed 002), unit-tested against hand-computed values.

Equations 1-2 (absolute, per-discipline and relative scores) live in :mod:`nodes.llmeval.scoring`,
which the scoring node uses too.

* :func:`population_variance` (Table 2 / Table 8 "Variance" over ZS, FS, CoT) and
  :func:`sample_variance` (Table 9 "Variance" over the 1000/1000/1000/2000/4000 runs):
  the paper's two tables use the two conventions; both reproduce its printed numbers (``numpy.var``,
  ``ddof`` 0 and 1).
* :func:`cohen_kappa` - human-machine agreement (section 3.4, appendix D.2), scikit-learn.
* :func:`spearman` - rank agreement (Table 3, Figure 5), scipy.
* :func:`elo` / :func:`pairwise_outcomes` - the Elo baseline of Finding 8.
* :func:`stability` - resampling at several sizes (appendix D.1, Table 9, Figure 5).
* :func:`replay_match` / :func:`recalled` - the contamination replay test (Finding 6).
* :func:`intervals` - the 95 % intervals and separable differences of S and R.
"""

from __future__ import annotations

import difflib
import itertools
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dyneval.results.stats import Estimate, over_answers, proportion, summary_entries
from dyneval.state.llmeval import S_MAX


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def population_variance(xs: Sequence[float]) -> float:
    """Variance dividing by n (Table 2 / Table 8); 0.0 for no values."""
    return float(np.var(xs)) if len(xs) else 0.0


def sample_variance(xs: Sequence[float]) -> float:
    """Variance dividing by n - 1 (Table 9); 0.0 for fewer than two values."""
    return float(np.var(xs, ddof=1)) if len(xs) >= 2 else 0.0


def cohen_kappa(a: Sequence[Any], b: Sequence[Any], *, weights: str | None = None) -> float:
    """Cohen's kappa of two raters over the same items (scikit-learn); ``weights="quadratic"`` for ordinal
    labels (stars).

    kappa = (p_o - p_e) / (1 - p_e) with p_e from the raters' marginals. Two raters who agree on one
    constant label get 1.0 (perfect agreement), where scikit-learn's 0/0 gives NaN.
    """
    if len(a) != len(b):
        raise ValueError("the two raters must label the same items")
    if not a:
        raise ValueError("no items to compare")
    if weights not in (None, "quadratic"):
        raise ValueError("weights must be None or 'quadratic'")
    if len(set(a) | set(b)) == 1:
        return 1.0
    from sklearn.metrics import cohen_kappa_score  # type: ignore[import-untyped]  # scikit-learn ships no type hints

    return float(cohen_kappa_score(list(a), list(b), weights=weights))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (scipy: Pearson correlation of the tie-averaged ranks).

    A constant sequence has no ranking, where scipy gives NaN: two constant sequences count as agreeing
    (1.0), one constant against a varying one as uncorrelated (0.0), so every stability table has a number.
    """
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("need two equally long sequences of at least 2 values")
    flat_x, flat_y = len(set(x)) == 1, len(set(y)) == 1
    if flat_x or flat_y:
        return 1.0 if flat_x and flat_y else 0.0
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def elo(
    matches: Iterable[tuple[str, str, float]],
    *,
    k: float = 32,
    initial: float = 1000,
    scale: float = 400,
    players: Iterable[str] = (),
) -> dict[str, float]:
    """Sequential Elo ratings from pairwise outcomes ``(a, b, score_of_a)`` with score 1 / 0.5 / 0.

    E_a = 1 / (1 + 10^((R_b - R_a) / scale)); R_a += k (score - E_a); R_b -= k (score - E_a).
    """
    rating: dict[str, float] = {p: initial for p in players}
    for a, b, score in matches:
        ra, rb = rating.setdefault(a, initial), rating.setdefault(b, initial)
        expected = 1 / (1 + 10 ** ((rb - ra) / scale))
        rating[a] = ra + k * (score - expected)
        rating[b] = rb - k * (score - expected)
    return rating


def pairwise_outcomes(matrix: dict[str, dict[str, float]], questions: Sequence[str]) -> list[tuple[str, str, float]]:
    """For every question and pair of models that both answered it: 1 / 0.5 / 0 by comparing their stars."""
    out = []
    models = sorted(matrix)
    for q in questions:
        for a, b in itertools.combinations(models, 2):
            if q in matrix[a] and q in matrix[b]:
                sa, sb = matrix[a][q], matrix[b][q]
                out.append((a, b, 1.0 if sa > sb else 0.0 if sa < sb else 0.5))
    return out


def stability(
    matrix: dict[str, dict[str, float]], *, reference: str, sizes: Sequence[int], trials: int, seed: int = 0
) -> dict[str, Any]:
    """Ranking stability under resampling (appendix D.1, Table 9; Figure 5).

    ``matrix`` maps model -> question id -> stars. As in the paper, each model is
    scored on its own sample, relative to the ``reference`` model on the same
    questions (equation 2): a model's pool is the questions it shares with the
    reference (the reference replays every session). For each size n and trial,
    every model draws n questions (at most its pool) without replacement; its R on
    the draw and an Elo rating from pairwise outcomes (each model against the
    reference on its draw, and any two models on the questions their draws share,
    in a shuffled order) are computed. Reported: R per trial, mean and sample
    variance of R per model over all draws, and per size the mean Spearman rho of
    the relative-score ranking and of the Elo ranking against the full-pool ranking.
    """
    if reference not in matrix:
        raise ValueError(f"reference model {reference!r} has no judged answers")
    ref = matrix[reference]
    pools = {m: sorted(set(v) & set(ref)) for m, v in matrix.items()}
    skipped = sorted(m for m, pool in pools.items() if not pool)
    models = sorted(m for m, pool in pools.items() if pool)
    if len(models) < 2:
        raise ValueError("no model shares a judged question with the reference")
    rng = random.Random(seed)
    from dyneval.nodes.llmeval.scoring import absolute_score, relative_score  # the node's module loads LangGraph

    def rel(m: str, qs: Sequence[str]) -> float:
        return relative_score(absolute_score([matrix[m][q] for q in qs]), absolute_score([ref[q] for q in qs])) or 0.0

    full = {m: rel(m, pools[m]) for m in models}
    full_list = [full[m] for m in models]
    per_size: dict[str, Any] = {}
    all_r: dict[str, list[float]] = {m: [] for m in models}
    for size in sizes:
        rows, rho_rel, rho_elo = [], [], []
        for _ in range(trials):
            draws = {m: rng.sample(pools[m], min(size, len(pools[m]))) for m in models}
            r = {m: rel(m, draws[m]) for m in models}
            matches = []
            for a, b in itertools.combinations(models, 2):
                shared = (
                    draws[a]
                    if b == reference
                    else draws[b]
                    if a == reference
                    else sorted(set(draws[a]) & set(draws[b]))
                )
                matches += pairwise_outcomes({a: matrix[a], b: matrix[b]}, shared)
            rng.shuffle(matches)
            ratings = elo(matches, players=models)
            rows.append(r)
            for m in models:
                all_r[m].append(r[m])
            rho_rel.append(spearman([r[m] for m in models], full_list))
            rho_elo.append(spearman([ratings[m] for m in models], full_list))
        per_size[str(size)] = {
            "n": min(size, max(len(p) for p in pools.values())),
            "trials": rows,
            "spearman_relative": mean(rho_rel),
            "spearman_elo": mean(rho_elo),
        }
    return {
        "pool": min(len(pools[m]) for m in models),
        "pools": {m: len(pools[m]) for m in models},
        "skipped": skipped,
        "reference": reference,
        "full": full,
        "ranking": sorted(models, key=lambda m: -full[m]),
        "sizes": per_size,
        "mean": {m: mean(v) for m, v in all_r.items()},
        "variance": {m: sample_variance(v) for m, v in all_r.items()},
    }


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def mask_tail(text: str, fraction: float = 0.3, min_words: int = 3) -> tuple[str, str] | None:
    """Split a question into a shown prefix and a masked tail of at least ``min_words`` words (Finding 6)."""
    tokens = text.split()
    tail_len = max(min_words, round(len(tokens) * fraction))
    if len(tokens) < tail_len + 3:
        return None
    return " ".join(tokens[:-tail_len]), " ".join(tokens[-tail_len:])


def replay_match(completion: str, tail: str, threshold: float = 0.8) -> bool:
    """Does a completion reproduce the masked tail? Word-sequence similarity of the tail and the completion's
    first len(tail) words must reach ``threshold``."""
    want = words(tail)
    got = words(completion)[: len(want)]
    if not want or not got:
        return False
    return difflib.SequenceMatcher(a=want, b=got, autojunk=False).ratio() >= threshold


def recalled(matches: Sequence[bool], needed: int = 2) -> bool:
    """A question counts as recalled when at least ``needed`` of its attempts (three in the paper) match."""
    return sum(bool(m) for m in matches) >= needed


def _s_estimate(sessions: Sequence[dict[str, Any]]) -> Estimate | None:
    """S (equation 1): the mean of the sessions' S, each the mean of its answers' ``100 * stars / 3``. Every
    rating 0 or 3 stars: S is a share of full-mark answers, with its exact interval; else ``t-over-answers``."""
    scored = [s for s in sessions if s.get("S") is not None and s["stars"]]
    stars = [float(x) for s in scored for x in s["stars"]]
    if stars and all(x in (0.0, S_MAX) for x in stars):
        share = proportion(sum(x == S_MAX for x in stars), len(stars), "answers")
        return share and replace(share.scaled(100.0), estimate=mean([s["S"] for s in scored]))
    return over_answers(
        [(s["S"], [100 * x / S_MAX - s["S"] for x in s["stars"]]) for s in scored],
        "answers",
        (0.0, 100.0),
    )


def _r_estimate(sessions: Sequence[dict[str, Any]]) -> Estimate | None:
    """R (equation 2): the mean of the sessions' R = 100 * S / S_ref on the same questions. A session's R is a
    ratio of its answers' stars to the reference's on the same questions, linearized over the question pairs
    both scored: ``100 * (m_i - R / 100 * r_i) / mean(r)``; ``t-over-answers``."""
    groups = []
    for s in sessions:
        pairs = np.asarray(s.get("pairs") or [], dtype=float).reshape(-1, 2)
        if s.get("R") is None or not len(pairs) or not pairs[:, 1].sum():
            continue
        ratio = pairs[:, 0].sum() / pairs[:, 1].sum()
        groups.append((s["R"], 100 * (pairs[:, 0] - ratio * pairs[:, 1]) / pairs[:, 1].mean()))
    return over_answers(groups, "answers", (0.0, math.inf))


def intervals(sessions: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """95 % intervals and separable differences of S (equation 1) and R (equation 2), each a mean over the
    scored sessions. A session draws its questions from the bank at random and never repeats one the model met
    (section 3), so its answers are independent draws: the interval rests on the answers, and a one-session run
    (the paper's single exam) has one. ``sessions`` hold ``S``, ``R``, ``stars`` (the model's scored answers'
    stars) and ``pairs`` (``(stars, reference stars)`` of the questions both scored)."""
    return summary_entries({"S": _s_estimate(sessions), "R": _r_estimate(sessions)})
