"""Agreement of a judge (or a jury) with human labels, with 95 % intervals over items (:func:`intervals`).

Observations: every verdict of one rater (a judge model, or the jury) on one item, per (repeat, order);
``None`` = ungraded (left out of every measure and counted), ``split`` = a jury without a majority (a verdict
that matches no label: a miss, never a win). Repeats are pooled: each graded (item, repeat) verdict is one
comparison with the item's label; an interval's unit is the item, with all its verdicts.

* accuracy: share of graded verdicts equal to the label (MT-Bench section 4.2 "agreement"; LLMBar Table 3);
* Cohen's kappa (as scikit-learn's ``cohen_kappa_score`` and :func:`protocols.llmeval.metrics.cohen_kappa`),
  quadratic-weighted on an ordinal scale; Spearman's rho (as scipy's) of scale verdicts (a jury's mean score)
  with the labels;
* pairwise (LLMBar section 3 and its statistics file): accuracy in the original order, in the swapped order,
  their mean, both orders correct, position-swap consistency (the same winner in both orders), and kappa
  between the two orders;
* repeat consistency: share of items whose graded verdicts agree across all repeats (per order);
* per class (each label of the scale): precision, recall and F1 (as scikit-learn's
  ``precision_recall_fscore_support``), and their macro averages, as PandaLM (Wang et al., 2023) reports its
  judges against its human-annotated test set (accuracy, precision, recall, F1 over the classes tie, 1, 2; its
  repository's ``data/compute_metrics.py``). A class the judge never chose has no precision (``None``, not 0);
  the macro averages count such a value as 0, as scikit-learn's default and that script do;
* a confusion matrix (rows: human label, columns: verdict) and a breakdown per category.

Every measure is computed from per-item contingency counts (:class:`Measure`), so its bootstrap is a matrix
product per block of resamples and its jackknife one reduction; ``tests/test_judgecheck_metrics.py`` checks each
against scikit-learn and scipy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from dyneval.results.stats import BLOCK, bca_interval, clustered, share_at_design_effect
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


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1), np.nan)


@dataclass(frozen=True)
class Measure:
    """A measure as sums over items, so that every bootstrap resample is one matrix product: ``counts`` holds one
    row per item (a contingency table of what the item contributes, flattened), ``reduce`` turns summed rows
    (resamples x columns) into the measure's values, NaN where it is undefined (no graded verdict)."""

    counts: np.ndarray
    reduce: Callable[[np.ndarray], dict[str, np.ndarray]]
    #: a share of the items' verdicts: ``counts`` holds each item's hits and misses
    share: bool = False
    #: a mean of shares (both orders' accuracies): the exact interval at the design effect of its jackknife variance
    mean_of_shares: bool = False

    def value(self) -> dict[str, float | None]:
        return {k: _number(v[0]) for k, v in self.reduce(self.counts.sum(axis=0, keepdims=True)).items()}


def _number(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def tally(obs: list[Obs], cells: Callable[[Obs], list[int]], size: int) -> np.ndarray:
    """Items x ``size`` counts: each item's ``cells(o)`` (cell indexes, repeats counted) added up."""
    out = np.zeros((len(obs), size))
    for k, o in enumerate(obs):
        np.add.at(out[k], np.asarray(cells(o), dtype=int), 1)
    return out


def _share(obs: list[Obs], hits: Callable[[Obs], list[bool]]) -> Measure:
    """The share of True among every item's ``hits`` (pooled over items)."""
    counts = tally(obs, lambda o: [0 if h else 1 for h in hits(o)], 2)  # columns: hits, misses
    return Measure(counts, lambda s: {"": _ratio(s[:, 0], s[:, 0] + s[:, 1])}, share=True)


def _verdicts(o: Obs, order: str) -> list[str]:
    return [v for (_, od), v in sorted(o.values.items()) if od == order and v is not None]


def accuracy(obs: list[Obs], order: str = "original") -> Measure:
    """Share of graded verdicts in ``order`` equal to the label."""
    return _share(obs, lambda o: [v == o.label for v in _verdicts(o, order)])


def kappa_of_tables(tables: np.ndarray, weights: str | None = None) -> np.ndarray:
    """Cohen's kappa of each square contingency table (tables x labels x labels), as scikit-learn's
    ``cohen_kappa_score`` computes it over the labels present (quadratic weights ``(i - j)^2`` on their index
    among them); 1.0 where one label is all there is (:func:`protocols.llmeval.metrics.cohen_kappa`), NaN for an
    empty table."""
    rows, cols = tables.sum(axis=2), tables.sum(axis=1)
    total = rows.sum(axis=1)
    present = (rows + cols) > 0
    if weights == "quadratic":
        index = np.cumsum(present, axis=1) - 1
        w = (index[:, :, None] - index[:, None, :]) ** 2.0
    else:
        w = np.broadcast_to(1.0 - np.eye(tables.shape[1]), tables.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = rows[:, :, None] * cols[:, None, :] / np.where(total > 0, total, 1)[:, None, None]
        k = 1 - (w * tables).sum(axis=(1, 2)) / (w * expected).sum(axis=(1, 2))
    return np.where(total == 0, np.nan, np.where(present.sum(axis=1) == 1, 1.0, k))


def _undefined(obs: list[Obs]) -> Measure:
    """A measure with nothing to compute it from (no graded verdict): NaN everywhere."""
    return Measure(np.zeros((len(obs), 1)), lambda s: {"": np.full(len(s), np.nan)})


def _kappa(
    obs: list[Obs], labels: list[str], pairs_of: Callable[[Obs], list[tuple[str, str]]], weights: str | None
) -> Measure:
    size = len(labels)
    if not size:
        return _undefined(obs)
    counts = tally(obs, lambda o: [labels.index(a) * size + labels.index(b) for a, b in pairs_of(o)], size * size)
    return Measure(counts, lambda s: {"": kappa_of_tables(s.reshape(-1, size, size), weights)})


def kappa(obs: list[Obs], order: str = "original", weights: str | None = None) -> Measure:
    """Cohen's kappa of verdicts and labels; with ``weights`` (ordinal) only numeric verdicts (no split)."""

    def got(o: Obs) -> list[tuple[str, str]]:
        return [(o.label, v) for v in _verdicts(o, order) if weights is None or v != SPLIT]

    return _kappa(obs, sorted({x for o in obs for pair in got(o) for x in pair}), got, weights)


def spearman_of_tables(tables: np.ndarray) -> np.ndarray:
    """Spearman's rho of each contingency table of (x value, y value) counts, rows and columns in increasing
    value: the Pearson correlation of the tie-averaged ranks (scipy's ``spearmanr`` on the expanded pairs), with
    :func:`protocols.llmeval.metrics.spearman`'s rule for a constant side (both: 1.0, one: 0.0); NaN under two
    pairs."""
    nx, ny = tables.sum(axis=2), tables.sum(axis=1)
    total = nx.sum(axis=1)
    rx = np.cumsum(nx, axis=1) - nx + (nx + 1) / 2 - (total[:, None] + 1) / 2
    ry = np.cumsum(ny, axis=1) - ny + (ny + 1) / 2 - (total[:, None] + 1) / 2
    cov = np.einsum("rij,ri,rj->r", tables, rx, ry)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = cov / np.sqrt((nx * rx**2).sum(axis=1) * (ny * ry**2).sum(axis=1))
    flat_x, flat_y = (nx > 0).sum(axis=1) == 1, (ny > 0).sum(axis=1) == 1
    rho = np.where(flat_x | flat_y, np.where(flat_x & flat_y, 1.0, 0.0), rho)
    return np.where(total < 2, np.nan, rho)


def score_spearman(obs: list[Obs], order: str = "original") -> Measure:
    """Spearman's rho of the numeric scores (a jury's mean score) with the labels; None under 2 scores."""

    def got(o: Obs) -> list[tuple[float, float]]:
        return [(float(o.label), s) for (_, od), s in sorted(o.scores.items()) if od == order and s is not None]

    xs = sorted({a for o in obs for a, _ in got(o)})
    ys = sorted({b for o in obs for _, b in got(o)})
    if not xs:
        return _undefined(obs)
    counts = tally(obs, lambda o: [xs.index(a) * len(ys) + ys.index(b) for a, b in got(o)], len(xs) * len(ys))
    return Measure(counts, lambda s: {"": spearman_of_tables(s.reshape(-1, len(xs), len(ys)))})


def both_orders(obs: list[Obs]) -> list[tuple[str, str, str]]:
    """(label, original verdict, swapped verdict) for every (item, repeat) graded in both orders."""
    return [x for o in obs for x in _both(o)]


def _both(o: Obs) -> list[tuple[str, str, str]]:
    out = []
    for (repeat, od), v in sorted(o.values.items()):
        w = o.values.get((repeat, "swapped"))
        if od == "original" and v is not None and w is not None:
            out.append((o.label, v, w))
    return out


def both_correct(obs: list[Obs]) -> Measure:
    return _share(obs, lambda o: [label == v == w for label, v, w in _both(o)])


def swap_consistency(obs: list[Obs]) -> Measure:
    """Same winner (in the original numbering) whichever output was shown first."""
    return _share(obs, lambda o: [v == w for _, v, w in _both(o)])


def order_kappa(obs: list[Obs]) -> Measure:
    """Cohen's kappa between the verdicts in the two orders (LLMBar's ``kappa_agreement``)."""

    def got(o: Obs) -> list[tuple[str, str]]:
        return [(v, w) for _, v, w in _both(o)]

    return _kappa(obs, sorted({x for o in obs for pair in got(o) for x in pair}), got, None)


def mean_accuracy(obs: list[Obs]) -> Measure:
    """The mean of the accuracies in the two orders."""
    a, b = accuracy(obs, "original"), accuracy(obs, "swapped")
    return Measure(
        np.hstack([a.counts, b.counts]),
        lambda s: {"": (a.reduce(s[:, :2])[""] + b.reduce(s[:, 2:])[""]) / 2},
        mean_of_shares=True,
    )


def repeat_sets(obs: list[Obs], order: str = "original") -> list[tuple[Obs, list[str]]]:
    """Each item's graded verdicts across repeats in ``order``, for items with at least two of them."""
    return [(o, got) for o in obs if len(got := _verdicts(o, order)) >= 2]


def repeat_consistency(obs: list[Obs], order: str = "original") -> Measure:
    """Share of items (with two or more graded repeats) whose verdicts all agree."""
    return _share(obs, lambda o: [len(set(got)) == 1] if len(got := _verdicts(o, order)) >= 2 else [])


def resampled(measure: Measure, items: int, *, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Each value of ``measure`` in ``resamples`` bootstrap resamples of the ``items`` (drawn with replacement,
    seeded): draw counts times the per-item counts, in blocks of at most :data:`results.stats.BLOCK` draws, so
    that memory stays bounded whatever the items (no resamples x items matrix held at once); NaN where a resample
    leaves a value undefined."""
    rng = np.random.default_rng(seed)
    block = max(1, BLOCK // items)
    found: dict[str, list[np.ndarray]] = defaultdict(list)
    for start in range(0, resamples, block):
        size = min(block, resamples - start)
        draws = rng.integers(0, items, (size, items))
        weights = np.bincount((draws + items * np.arange(size)[:, None]).ravel(), minlength=size * items)
        for key, values in measure.reduce(weights.reshape(size, items) @ measure.counts).items():
            found[key].append(values)
    return {key: np.concatenate(parts) for key, parts in found.items()}


def intervals(measure: Measure, items: int, *, resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """Each value of ``measure`` with its 95 % interval over the items, the method chosen by the coverage it
    measured (``bench/coverage.py``, docs/statistics.md): a share (:func:`_share`) the exact binomial interval
    when every item gives one verdict, the cluster-robust t over items when repeats give several
    (:func:`results.stats.clustered`); the mean of two orders' accuracies the exact interval at the design effect
    of its jackknife variance over the items (:func:`results.stats.share_at_design_effect`: BCa covered 92.8 % at
    20 items); any other measure (kappa, Spearman's rho, F1) the BCa bootstrap over the items (:func:`resampled`,
    :func:`results.stats.bca_interval`; the percentile interval where BCa is undefined), resamples where the value
    is undefined left out. ``low``/``high`` None under two items (or with a ``note`` where the data give no
    interval)."""
    values = measure.value()
    out: dict[str, dict[str, Any]] = {k: {"value": v, "low": None, "high": None} for k, v in values.items()}
    if all(v is None for v in values.values()) or items < 2:
        return out
    if measure.share:
        hits, verdicts = measure.counts[:, 0].tolist(), measure.counts.sum(axis=1).astype(int).tolist()
        found = clustered(hits, verdicts, "verdicts", "items", (0, 1))
        if found is not None:
            out[""] |= {"low": found.low, "high": found.high, "method": found.method}
            out[""] |= {"note": found.note} if found.note else {}
        return out
    total = measure.counts.sum(axis=0)
    left_out = measure.reduce(total - measure.counts)
    if measure.mean_of_shares and (value := values[""]) is not None:
        jack = left_out[""][~np.isnan(left_out[""])]
        variance = (len(jack) - 1) / len(jack) * float(((jack - jack.mean()) ** 2).sum())
        found = share_at_design_effect(value, variance, int(total.sum()), items, "items")
        out[""] |= {"low": found.low, "high": found.high, "method": found.method}
        return out
    draws = resampled(measure, items, resamples=resamples, seed=seed)
    for key, value in values.items():
        kept = draws[key][~np.isnan(draws[key])]
        if value is None or not kept.size:
            continue
        jack = left_out[key][~np.isnan(left_out[key])]
        bca = bca_interval(value, kept, jack)
        low, high = bca or tuple(float(x) for x in np.percentile(kept, [2.5, 97.5]))
        out[key] |= {"low": low, "high": high, "method": "bca-bootstrap" if bca else "percentile-bootstrap"}
    return out


def measures(
    obs: list[Obs], *, pairwise: bool, swapped: bool, ordinal: bool, resamples: int, seed: int
) -> dict[str, Any]:
    """Every measure that applies, each ``{value, low, high, n, ungraded}`` (n = graded verdicts used);
    ``swapped``: a pairwise judge saw both orders."""
    stats: dict[str, tuple[Callable[[], Measure], str]] = {}
    if pairwise:
        stats.update(
            {
                "accuracy_original": (partial(accuracy, obs, "original"), "original"),
                "kappa_original": (partial(kappa, obs, "original"), "original"),
            }
        )
    if pairwise and swapped:
        stats.update(
            {
                "accuracy_swapped": (partial(accuracy, obs, "swapped"), "swapped"),
                "accuracy_mean": (partial(mean_accuracy, obs), "both"),
                "both_orders_correct": (partial(both_correct, obs), "both"),
                "swap_consistency": (partial(swap_consistency, obs), "both"),
                "kappa_swapped": (partial(kappa, obs, "swapped"), "swapped"),
                "kappa_between_orders": (partial(order_kappa, obs), "both"),
            }
        )
    if not pairwise:
        stats.update({"accuracy": (partial(accuracy, obs), "original"), "kappa": (partial(kappa, obs), "original")})
        if ordinal:
            stats["kappa_quadratic"] = (partial(kappa, obs, "original", "quadratic"), "original")
            stats["spearman"] = (partial(score_spearman, obs), "original")
    for order in ("original", "swapped") if swapped else ("original",):
        if repeat_sets(obs, order):
            stats[f"repeat_consistency_{order}" if pairwise else "repeat_consistency"] = (
                partial(repeat_consistency, obs, order),
                order,
            )
    out = {}
    for name, (measure, order) in stats.items():
        if order == "both":
            n, bad = len(both_orders(obs)), ungraded(obs, "original") + ungraded(obs, "swapped")
        elif name.startswith("repeat"):
            n, bad = len(repeat_sets(obs, order)), ungraded(obs, order)
        else:
            n, bad = len(pairs(obs, order)), ungraded(obs, order)
        out[name] = {**intervals(measure(), len(obs), resamples=resamples, seed=seed)[""], "n": n, "ungraded": bad}
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


def class_scores(tables: np.ndarray, scale: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``"<class>.precision"`` / ``.recall`` / ``.f1`` for each label of ``scale`` and ``"macro.<measure>"`` from
    contingency tables (tables x labels x verdicts; the last verdict column: off the scale, a jury's ``split``, a
    miss of its label's class), as scikit-learn's ``precision_recall_fscore_support(zero_division=nan)`` computes
    them: an undefined value (a class never chosen, or absent from the labels) is NaN, and the macro averages
    count it as 0 (``average="macro"``, ``zero_division=0``)."""
    size = len(scale)
    hit = tables[:, np.arange(size), np.arange(size)]
    chosen, support = tables.sum(axis=1)[:, :size], tables.sum(axis=2)
    each = {
        "precision": _ratio(hit, chosen),
        "recall": _ratio(hit, support),
        "f1": _ratio(2 * hit, chosen + support),
    }
    out = {}
    for name, values in each.items():
        out.update({f"{label}.{name}": values[:, i] for i, label in enumerate(scale)})
        out[f"macro.{name}"] = np.where(tables.sum(axis=(1, 2)) > 0, np.nan_to_num(values).mean(axis=1), np.nan)
    return out


#: the labels every class of the scale needs before a macro average gets an interval: with fewer, the bootstrap
#: interval of macro F1 covered 10 % (no label of a class), 58-66 % (one) and 85-95 % (two) of simulated runs,
#: with three or more 92-100 % (``bench/coverage.py``, docs/statistics.md)
MACRO_MIN_SUPPORT = 3


def per_class(
    obs: list[Obs], scale: tuple[str, ...], *, order: str = "original", resamples: int, seed: int
) -> dict[str, Any]:
    """Precision, recall and F1 of each class of ``scale`` (and their macro averages) in ``order``, each
    ``{value, low, high, n}`` (n = graded verdicts), with ``support`` (labels of the class) and ``chosen``
    (verdicts of it) per class; one bootstrap over the items for all of them."""
    got = item_pairs(obs, order)
    size = len(scale)

    def column(verdict: str) -> int:
        return scale.index(verdict) if verdict in scale else size

    counts = tally(
        obs, lambda o: [scale.index(o.label) * (size + 1) + column(v) for v in _verdicts(o, order)], size * (size + 1)
    )
    found = intervals(
        Measure(counts, lambda s: class_scores(s.reshape(-1, size, size + 1), scale)),
        len(obs),
        resamples=resamples,
        seed=seed,
    )
    out: dict[str, Any] = {}
    for label in (*scale, "macro"):
        out[label] = {
            name: {**found[f"{label}.{name}"], "n": len(got), "ungraded": ungraded(obs, order)}
            for name in ("precision", "recall", "f1")
        }
        if label != "macro":
            out[label]["support"] = sum(a == label for _, a, _ in got)
            out[label]["chosen"] = sum(b == label for _, _, b in got)
    rare = [f"{label} ({out[label]['support']})" for label in scale if out[label]["support"] < MACRO_MIN_SUPPORT]
    if rare:
        note = f"fewer than {MACRO_MIN_SUPPORT} labels of {', '.join(rare)}: a macro average has no interval"
        for entry in out["macro"].values():
            entry |= {"low": None, "high": None, "note": note}
            entry.pop("method", None)
    return out


def by_category(obs: list[Obs], *, swapped: bool, resamples: int, seed: int) -> dict[str, Any]:
    """Accuracy (both orders of a pair: their mean) per category, with interval and counts."""
    groups: dict[str, list[Obs]] = defaultdict(list)
    for o in obs:
        groups[o.category or "(none)"].append(o)
    return {
        cat: {
            "items": len(group),
            **intervals(
                mean_accuracy(group) if swapped else accuracy(group), len(group), resamples=resamples, seed=seed
            )[""],
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
