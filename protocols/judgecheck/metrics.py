"""Agreement of a judge (or a jury) with human labels, with percentile bootstrap intervals over items.

Observations: every verdict of one rater (a judge model, or the jury) on one item, per (repeat, order);
``None`` = ungraded (left out of every measure and counted), ``split`` = a jury without a majority (a verdict
that matches no label: a miss, never a win). Repeats are pooled: each graded (item, repeat) verdict is one
comparison with the item's label; the bootstrap resamples items with all their verdicts.

* accuracy: share of graded verdicts equal to the label (MT-Bench section 4.2 "agreement"; LLMBar Table 3);
* Cohen's kappa (scikit-learn, via :func:`protocols.llmeval.metrics.cohen_kappa`), quadratic-weighted on an
  ordinal scale; Spearman's rho (scipy) of scale verdicts (a jury's mean score) with the labels;
* pairwise (LLMBar section 3 and its statistics file): accuracy in the original order, in the swapped order,
  their mean, both orders correct, position-swap consistency (the same winner in both orders), and kappa
  between the two orders;
* repeat consistency: share of items whose graded verdicts agree across all repeats (per order);
* per class (each label of the scale): precision, recall and F1 (scikit-learn's
  ``precision_recall_fscore_support``), and their macro averages, as PandaLM (Wang et al., 2023) reports its
  judges against its human-annotated test set (accuracy, precision, recall, F1 over the classes tie, 1, 2; its
  repository's ``data/compute_metrics.py``). A class the judge never chose has no precision (``None``, not 0);
  the macro averages count such a value as 0, as scikit-learn's default and that script do;
* a confusion matrix (rows: human label, columns: verdict) and a breakdown per category.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from dyneval.protocols.llmeval.metrics import cohen_kappa, spearman
from dyneval.state.judgecheck import SPLIT

Key = tuple[int, str]  # (repeat, order)


@dataclass
class Obs:
    """One rater's verdicts on one item: ``values`` and (ordinal scale) numeric ``scores`` per (repeat, order)."""

    id: str
    category: str
    label: str
    values: dict[Key, str | None]
    scores: dict[Key, float | None] = field(default_factory=dict)
    reasons: dict[Key, str] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)


Stat = Callable[[list["Obs"]], "float | None"]


def pairs(obs: list[Obs], order: str = "original") -> list[tuple[str, str]]:
    """(label, verdict) of every graded verdict in ``order``."""
    return [(label, v) for _, label, v in item_pairs(obs, order)]


def item_pairs(obs: list[Obs], order: str = "original") -> list[tuple[int, str, str]]:
    """(item index, label, verdict) of every graded verdict in ``order``."""
    return [
        (k, o.label, v)
        for k, o in enumerate(obs)
        for (_, od), v in sorted(o.values.items())
        if od == order and v is not None
    ]


def ungraded(obs: list[Obs], order: str = "original") -> int:
    return sum(1 for o in obs for (_, od), v in o.values.items() if od == order and v is None)


def accuracy(obs: list[Obs], order: str = "original") -> float | None:
    got = pairs(obs, order)
    return sum(label == v for label, v in got) / len(got) if got else None


def kappa(obs: list[Obs], order: str = "original", weights: str | None = None) -> float | None:
    """Cohen's kappa of verdicts and labels; with ``weights`` (ordinal) only numeric verdicts (no split)."""
    got = [(a, b) for a, b in pairs(obs, order) if weights is None or b != SPLIT]
    if not got:
        return None
    if weights:
        return cohen_kappa([int(a) for a, _ in got], [int(b) for _, b in got], weights=weights)
    return cohen_kappa([a for a, _ in got], [b for _, b in got])


def score_spearman(obs: list[Obs], order: str = "original") -> float | None:
    """Spearman's rho of the numeric scores (a jury's mean score) with the labels; None under 2 scores."""
    got = [(float(o.label), s) for o in obs for (_, od), s in o.scores.items() if od == order and s is not None]
    return spearman([a for a, _ in got], [b for _, b in got]) if len(got) >= 2 else None


def both_orders(obs: list[Obs]) -> list[tuple[str, str, str]]:
    """(label, original verdict, swapped verdict) for every (item, repeat) graded in both orders."""
    out = []
    for o in obs:
        for (repeat, od), v in sorted(o.values.items()):
            w = o.values.get((repeat, "swapped"))
            if od == "original" and v is not None and w is not None:
                out.append((o.label, v, w))
    return out


def both_correct(obs: list[Obs]) -> float | None:
    got = both_orders(obs)
    return sum(label == v == w for label, v, w in got) / len(got) if got else None


def swap_consistency(obs: list[Obs]) -> float | None:
    """Same winner (in the original numbering) whichever output was shown first."""
    got = both_orders(obs)
    return sum(v == w for _, v, w in got) / len(got) if got else None


def order_kappa(obs: list[Obs]) -> float | None:
    """Cohen's kappa between the verdicts in the two orders (LLMBar's ``kappa_agreement``)."""
    got = both_orders(obs)
    return cohen_kappa([v for _, v, _ in got], [w for _, _, w in got]) if got else None


def mean_accuracy(obs: list[Obs]) -> float | None:
    a, b = accuracy(obs, "original"), accuracy(obs, "swapped")
    return None if a is None or b is None else (a + b) / 2


def repeat_sets(obs: list[Obs], order: str = "original") -> list[tuple[Obs, list[str]]]:
    """Each item's graded verdicts across repeats in ``order``, for items with at least two of them."""
    out = []
    for o in obs:
        got = [v for (_, od), v in sorted(o.values.items()) if od == order and v is not None]
        if len(got) >= 2:
            out.append((o, got))
    return out


def repeat_consistency(obs: list[Obs], order: str = "original") -> float | None:
    got = repeat_sets(obs, order)
    return sum(len(set(vs)) == 1 for _, vs in got) / len(got) if got else None


def bootstrap(stat: Stat, obs: list[Obs], *, resamples: int, seed: int) -> dict[str, Any]:
    """``stat`` on the items with its 95 % percentile bootstrap interval (items resampled with replacement,
    seeded; resamples where ``stat`` is undefined are left out); ``low``/``high`` None under two items."""
    return bootstrap_many(
        lambda idx: {"": stat(obs if idx is None else [obs[i] for i in idx])}, len(obs), resamples=resamples, seed=seed
    )[""]


def bootstrap_many(
    stats: Callable[[np.ndarray | None], dict[str, float | None]], items: int, *, resamples: int, seed: int
) -> dict[str, dict[str, Any]]:
    """:func:`bootstrap` of several statistics computed together on the same resamples: ``stats(None)`` on the
    ``items`` as they are, ``stats(indexes)`` on a resample (the drawn item indexes, with repeats)."""
    values = stats(None)
    out: dict[str, dict[str, Any]] = {k: {"value": v, "low": None, "high": None} for k, v in values.items()}
    if all(v is None for v in values.values()) or items < 2:
        return out
    rng = np.random.default_rng(seed)
    draws = [stats(rng.integers(0, items, items)) for _ in range(resamples)]
    for key, value in values.items():
        kept = np.array([d[key] for d in draws if d.get(key) is not None], dtype=float)
        if value is not None and kept.size:
            out[key]["low"], out[key]["high"] = (float(x) for x in np.percentile(kept, [2.5, 97.5]))
    return out


def measures(
    obs: list[Obs], *, pairwise: bool, swapped: bool, ordinal: bool, resamples: int, seed: int
) -> dict[str, Any]:
    """Every measure that applies, each ``{value, low, high, n, ungraded}`` (n = graded verdicts used);
    ``swapped``: a pairwise judge saw both orders."""
    stats: dict[str, tuple[Stat, str]] = {}
    if pairwise:
        stats.update(
            {
                "accuracy_original": (lambda x: accuracy(x, "original"), "original"),
                "kappa_original": (lambda x: kappa(x, "original"), "original"),
            }
        )
    if pairwise and swapped:
        stats.update(
            {
                "accuracy_swapped": (lambda x: accuracy(x, "swapped"), "swapped"),
                "accuracy_mean": (mean_accuracy, "both"),
                "both_orders_correct": (both_correct, "both"),
                "swap_consistency": (swap_consistency, "both"),
                "kappa_swapped": (lambda x: kappa(x, "swapped"), "swapped"),
                "kappa_between_orders": (order_kappa, "both"),
            }
        )
    if not pairwise:
        stats.update({"accuracy": (accuracy, "original"), "kappa": (kappa, "original")})
        if ordinal:
            stats["kappa_quadratic"] = (lambda x: kappa(x, "original", "quadratic"), "original")
            stats["spearman"] = (score_spearman, "original")
    for order in ("original", "swapped") if swapped else ("original",):
        if repeat_sets(obs, order):
            stats[f"repeat_consistency_{order}" if pairwise else "repeat_consistency"] = (
                partial(repeat_consistency, order=order),
                order,
            )
    out = {}
    for name, (stat, order) in stats.items():
        if order == "both":
            n, bad = len(both_orders(obs)), ungraded(obs, "original") + ungraded(obs, "swapped")
        elif name.startswith("repeat"):
            n, bad = len(repeat_sets(obs, order)), ungraded(obs, order)
        else:
            n, bad = len(pairs(obs, order)), ungraded(obs, order)
        out[name] = {**bootstrap(stat, obs, resamples=resamples, seed=seed), "n": n, "ungraded": bad}
    return out


def confusion(obs: list[Obs], scale: tuple[str, ...], order: str = "original") -> dict[str, Any]:
    """Counts of (human label, verdict) with scikit-learn; a ``split`` column only when a jury split."""
    # heavy: loaded for the summary only
    from sklearn.metrics import confusion_matrix  # type: ignore[import-untyped]  # scikit-learn ships no type hints

    got = pairs(obs, order)
    columns = [*scale, *([SPLIT] if any(v == SPLIT for _, v in got) else [])]
    matrix = (
        confusion_matrix([a for a, _ in got], [b for _, b in got], labels=columns).tolist()
        if got
        else [[0] * len(columns) for _ in columns]
    )
    return {"labels": list(scale), "columns": columns, "matrix": [row[: len(columns)] for row in matrix[: len(scale)]]}


def class_scores(
    truth: np.ndarray, said: np.ndarray, scale: tuple[str, ...], weights: np.ndarray | None = None
) -> dict[str, float | None]:
    """``"<class>.precision"`` / ``.recall`` / ``.f1`` for each label of ``scale`` and ``"macro.<measure>"`` with
    scikit-learn, from labels and verdicts coded as their index in ``scale`` (a verdict off the scale, a jury's
    ``split``: ``len(scale)``, a miss of its label's class), each pair counted ``weights`` times (a bootstrap
    resample); an undefined value (a class never chosen, or absent from the labels) is None."""
    from sklearn.metrics import precision_recall_fscore_support  # heavy: loaded for the summary only

    if not len(truth) or (weights is not None and not weights.any()):
        return {}
    each = precision_recall_fscore_support(
        truth, said, labels=list(range(len(scale))), sample_weight=weights, zero_division=np.nan
    )
    out: dict[str, float | None] = {}
    for name, values in zip(("precision", "recall", "f1"), each[:3]):
        for label, value in zip(scale, values):
            out[f"{label}.{name}"] = None if np.isnan(value) else float(value)
        out[f"macro.{name}"] = float(np.mean(np.nan_to_num(values)))  # = average="macro", zero_division=0
    return out


def per_class(
    obs: list[Obs], scale: tuple[str, ...], *, order: str = "original", resamples: int, seed: int
) -> dict[str, Any]:
    """Precision, recall and F1 of each class of ``scale`` (and their macro averages) in ``order``, each
    ``{value, low, high, n}`` (n = graded verdicts), with ``support`` (labels of the class) and ``chosen``
    (verdicts of it) per class; one bootstrap over the items for all of them."""
    got = item_pairs(obs, order)
    owner = np.array([k for k, _, _ in got], dtype=int)
    truth, said = (
        np.array([scale.index(x) if x in scale else len(scale) for x in column], dtype=int)
        for column in ([a for _, a, _ in got], [b for _, _, b in got])
    )
    found = bootstrap_many(
        lambda idx: class_scores(
            truth, said, scale, None if idx is None else np.bincount(idx, minlength=len(obs))[owner]
        ),
        len(obs),
        resamples=resamples,
        seed=seed,
    )
    out: dict[str, Any] = {}
    for label in (*scale, "macro"):
        out[label] = {
            name: {
                **found.get(f"{label}.{name}", {"value": None, "low": None, "high": None}),
                "n": len(got),
                "ungraded": ungraded(obs, order),
            }
            for name in ("precision", "recall", "f1")
        }
        if label != "macro":
            out[label]["support"] = sum(a == label for _, a, _ in got)
            out[label]["chosen"] = sum(b == label for _, _, b in got)
    return out


def by_category(obs: list[Obs], *, swapped: bool, resamples: int, seed: int) -> dict[str, Any]:
    """Accuracy (both orders of a pair: their mean) per category, with interval and counts."""
    groups: dict[str, list[Obs]] = defaultdict(list)
    for o in obs:
        groups[o.category or "(none)"].append(o)
    stat: Stat = mean_accuracy if swapped else accuracy
    return {
        cat: {
            "items": len(group),
            **bootstrap(stat, group, resamples=resamples, seed=seed),
            "n": len(pairs(group)),
            "ungraded": ungraded(group),
        }
        for cat, group in sorted(groups.items())
    }


def cost(obs: list[Obs]) -> dict[str, float | None]:
    """Calls, tokens and seconds per judged item (the rater's verdicts on it, all repeats and orders)."""
    if not obs:
        return {"calls_per_item": None, "tokens_per_item": None, "seconds_per_item": None}
    return {
        f"{k}_per_item": round(sum(o.cost.get(k, 0) for o in obs) / len(obs), 3) for k in ("calls", "tokens", "seconds")
    }
