"""Judge-check measures on small cases computed by hand: a tie, an ungraded verdict, a split jury, repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dyneval.protocols.judgecheck import metrics
from dyneval.protocols.judgecheck.metrics import Obs
from dyneval.state.judgecheck import SPLIT, majority


def pair(id_: str, label: str, original: str | None, swapped: str | None) -> Obs:
    return Obs(id_, "", label, {(0, "original"): original, (0, "swapped"): swapped})


#: A: right in both orders; B: position flip, right only swapped; C: a tie label, right only in the original
#: order; D: the original verdict is ungraded.
PAIRS = [pair("A", "1", "1", "1"), pair("B", "2", "1", "2"), pair("C", "tie", "tie", "1"), pair("D", "1", None, "1")]


def test_pairwise_measures_with_a_tie_and_an_ungraded_verdict():
    m = metrics.measures(PAIRS, pairwise=True, swapped=True, ordinal=False, resamples=200, seed=1)
    assert m["accuracy_original"] | {"low": 0, "high": 0} == {
        "value": 2 / 3,
        "low": 0,
        "high": 0,
        "method": "clopper-pearson",
        "n": 3,
        "ungraded": 1,
    }
    assert m["accuracy_swapped"]["value"] == 3 / 4 and m["accuracy_swapped"]["n"] == 4
    assert m["accuracy_mean"]["value"] == pytest.approx((2 / 3 + 3 / 4) / 2)
    # both orders graded: A, B, C (D's original verdict is ungraded, so D is out, not a disagreement)
    assert m["both_orders_correct"]["value"] == 1 / 3 and m["both_orders_correct"]["n"] == 3
    assert m["swap_consistency"]["value"] == 1 / 3
    # labels 1, 2, tie vs verdicts 1, 1, tie: p_o = 2/3, p_e = 1/3 * 2/3 + 1/3 * 1/3 = 1/3 -> kappa = 0.5
    assert m["kappa_original"]["value"] == pytest.approx(0.5)
    assert "repeat_consistency_original" not in m  # one repeat: nothing to compare


def test_pairwise_without_swap_reports_the_original_order_only():
    m = metrics.measures(PAIRS, pairwise=True, swapped=False, ordinal=False, resamples=100, seed=1)
    assert set(m) == {"accuracy_original", "kappa_original"}


def test_ordinal_stars_quadratic_kappa_and_spearman():
    obs = [
        Obs(str(i), "", str(label), {(0, "original"): str(v)}, {(0, "original"): float(v)})
        for i, (label, v) in enumerate([(0, 0), (1, 1), (2, 3), (3, 3)])
    ]
    m = metrics.measures(obs, pairwise=False, swapped=False, ordinal=True, resamples=100, seed=0)
    assert m["accuracy"]["value"] == 3 / 4
    # p_o = 3/4; marginals 1/4 each vs 1/4, 1/4, 0, 1/2 -> p_e = 1/4 -> kappa = 2/3
    assert m["kappa"]["value"] == pytest.approx(2 / 3)
    # quadratic weights (i-j)^2/9: observed 1/4 * 1/9 = 1/36, expected 1/3 -> 1 - 1/12
    assert m["kappa_quadratic"]["value"] == pytest.approx(11 / 12)
    # ranks 1,2,3,4 vs 1,2,3.5,3.5: rho = 4.5 / sqrt(5 * 4.5)
    assert m["spearman"]["value"] == pytest.approx(math.sqrt(0.9))


def test_a_three_member_jury_with_a_split_vote_never_wins():
    assert majority(["1", "2", "tie"]) == SPLIT
    assert majority(["1", "1", "2"]) == "1"
    assert majority([None, "1", "2"]) == SPLIT  # the graded members disagree 1-1
    assert majority([None, "2", "2"]) == "2"  # an ungraded member does not vote
    assert majority([None, None, None]) is None  # nobody graded: the jury is ungraded
    jury = [Obs("A", "", "1", {(0, "original"): SPLIT}), Obs("B", "", "2", {(0, "original"): "2"})]
    m = metrics.measures(jury, pairwise=False, swapped=False, ordinal=True, resamples=100, seed=0)
    assert m["accuracy"]["value"] == 1 / 2 and m["accuracy"]["n"] == 2  # the split is a miss, not left out
    assert m["kappa_quadratic"]["n"] == 2 and m["kappa_quadratic"]["value"] is not None
    conf = metrics.confusion(jury, ("0", "1", "2", "3"))
    assert conf["columns"] == ["0", "1", "2", "3", SPLIT]
    assert conf["matrix"][1] == [0, 0, 0, 0, 1] and conf["matrix"][2] == [0, 0, 1, 0, 0]


def test_repeat_consistency_counts_items_with_two_graded_repeats():
    obs = [
        Obs("A", "", "correct", {(0, "original"): "correct", (1, "original"): "correct"}),
        Obs("B", "", "correct", {(0, "original"): "correct", (1, "original"): "wrong"}),
        Obs("C", "", "wrong", {(0, "original"): "wrong", (1, "original"): None}),
    ]
    m = metrics.measures(obs, pairwise=False, swapped=False, ordinal=False, resamples=100, seed=0)
    assert m["repeat_consistency"]["value"] == 1 / 2 and m["repeat_consistency"]["n"] == 2
    # repeats pooled: 4 of 5 graded verdicts match the label
    assert m["accuracy"]["value"] == 4 / 5 and m["accuracy"]["ungraded"] == 1


def test_interval_is_seeded_and_brackets_the_estimate():
    obs = [Obs(str(i), "", "12"[i % 2], {(0, "original"): "1" if i % 4 else "2"}) for i in range(40)]
    a = metrics.intervals(metrics.kappa(obs), 40, resamples=500, seed=7)[""]
    assert a == metrics.intervals(metrics.kappa(obs), 40, resamples=500, seed=7)[""]
    assert a["low"] < a["value"] < a["high"] and a["method"] == "bca-bootstrap"
    assert metrics.intervals(metrics.accuracy(obs[:1]), 1, resamples=50, seed=7)[""]["low"] is None
    nothing = [Obs("x", "", "1", {(0, "original"): None})]
    assert metrics.intervals(metrics.accuracy(nothing), 1, resamples=50, seed=7)[""]["value"] is None


def test_a_share_of_one_verdict_per_item_gets_the_exact_binomial_interval_and_repeats_the_clustered_t():
    from scipy.stats import binomtest

    obs = [Obs(str(i), "", "1", {(0, "original"): "1" if i % 4 else "2"}) for i in range(20)]
    exact = binomtest(15, 20).proportion_ci(method="exact")
    got = metrics.intervals(metrics.accuracy(obs), 20, resamples=50, seed=7)[""]
    assert (got["low"], got["high"], got["method"]) == (
        pytest.approx(exact.low),
        pytest.approx(exact.high),
        "clopper-pearson",
    )
    # two repeats per item: the item (with both its verdicts) is the unit, t at items - 1 df, never above 1
    twice = [Obs(o.id, "", "1", {(0, "original"): o.values[(0, "original")], (1, "original"): "1"}) for o in obs]
    got = metrics.intervals(metrics.accuracy(twice), 20, resamples=50, seed=7)[""]
    assert got["method"] == "cluster-robust-t" and got["value"] == 35 / 40 and got["high"] <= 1


def test_resampling_holds_one_block_of_draws_at_a_time(monkeypatch):
    obs = _random_obs(3, 12, ("0", "1", "2", "3"))
    whole = metrics.resampled(metrics.kappa(obs), len(obs), resamples=300, seed=4)[""]
    monkeypatch.setattr(metrics, "BLOCK", 12 * 7)  # 7 resamples of 12 items a block
    kappa, rows = metrics.kappa(obs), []

    def reduce(summed):
        rows.append(len(summed))
        return kappa.reduce(summed)

    blocks = metrics.resampled(metrics.Measure(kappa.counts, reduce), len(obs), resamples=300, seed=4)[""]
    assert max(rows) == 7 and sum(rows) == 300
    np.testing.assert_array_equal(blocks, whole)  # the same draws, in blocks


def test_per_category_and_cost_per_item():
    obs = [
        Obs("a", "math", "1", {(0, "original"): "1"}, cost={"calls": 2, "tokens": 30, "seconds": 1.0}),
        Obs("b", "math", "1", {(0, "original"): "2"}, cost={"calls": 2, "tokens": 30, "seconds": 3.0}),
        Obs("c", "", "2", {(0, "original"): "2"}, cost={"calls": 1, "tokens": 15, "seconds": 0.5}),
    ]
    cats = metrics.by_category(obs, swapped=False, resamples=100, seed=0)
    assert cats["math"]["value"] == 0.5 and cats["math"]["items"] == 2 and cats["(none)"]["value"] == 1.0
    assert metrics.cost(obs) == {"calls_per_item": round(5 / 3, 3), "tokens_per_item": 25.0, "seconds_per_item": 1.5}


def _random_obs(seed: int, items: int, scale: tuple[str, ...], repeats: int = 2) -> list[Obs]:
    """Items with a label and ``repeats`` verdicts in both orders, some ungraded, some a jury's split."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(items):
        label = scale[rng.integers(len(scale))]
        values: dict = {}
        scores: dict = {}
        for r in range(repeats):
            for order in ("original", "swapped"):
                draw = rng.random()
                v = (
                    None
                    if draw < 0.1
                    else SPLIT
                    if draw < 0.15
                    else label
                    if draw < 0.6
                    else scale[rng.integers(len(scale))]
                )
                values[r, order] = v
                if v not in (None, SPLIT):
                    scores[r, order] = float(v) + rng.choice([0.0, 0.5]) if scale[0] == "0" else None
        out.append(Obs(str(i), f"c{i % 3}", label, values, scores))
    return out


def _loop_bootstrap(stat, obs, resamples, seed):
    """The reference: every resample drawn and computed in turn with scikit-learn / scipy, as the summary did."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(obs), (resamples, len(obs)))
    kept = [v for v in (stat([obs[i] for i in idx]) for idx in draws) if v is not None and not math.isnan(v)]
    return np.percentile(kept, [2.5, 97.5])


def _sk_kappa(obs, order="original", weights=None):
    from dyneval.protocols.llmeval.metrics import cohen_kappa

    got = [(a, b) for a, b in metrics.pairs(obs, order) if weights is None or b != SPLIT]
    return cohen_kappa([a for a, _ in got], [b for _, b in got], weights=weights) if got else None


def _sk_order_kappa(obs):
    from dyneval.protocols.llmeval.metrics import cohen_kappa

    got = metrics.both_orders(obs)
    return cohen_kappa([v for _, v, _ in got], [w for _, _, w in got]) if got else None


def _sk_spearman(obs):
    from dyneval.protocols.llmeval.metrics import spearman

    got = [
        (float(o.label), s)
        for o in obs
        for (_, od), s in sorted(o.scores.items())
        if od == "original" and s is not None
    ]
    return spearman([a for a, _ in got], [b for _, b in got]) if len(got) >= 2 else None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorized_measures_and_their_intervals_equal_scikit_learn_and_scipy_resample_by_resample(seed):
    stars = _random_obs(seed, 12, ("0", "1", "2", "3"))
    for measure, reference, obs in (
        (lambda x: metrics.kappa(x), _sk_kappa, stars),
        (lambda x: metrics.kappa(x, "original", "quadratic"), lambda x: _sk_kappa(x, weights="quadratic"), stars),
        (metrics.score_spearman, _sk_spearman, stars),
        (metrics.order_kappa, _sk_order_kappa, stars),
    ):
        got = metrics.intervals(measure(obs), len(obs), resamples=300, seed=seed)[""]
        assert got["value"] == pytest.approx(reference(obs))
        draws = metrics.resampled(measure(obs), len(obs), resamples=300, seed=seed)[""]
        percentile = np.percentile(draws[~np.isnan(draws)], [2.5, 97.5])
        assert percentile == pytest.approx(list(_loop_bootstrap(reference, obs, 300, seed)))


def test_per_class_scores_equal_scikit_learns_precision_recall_f1_with_undefined_classes_as_none():
    from sklearn.metrics import precision_recall_fscore_support

    scale = ("1", "2", "tie")
    obs = _random_obs(5, 30, scale) + [Obs("never", "", "1", {(0, "original"): "1"})]
    for o in obs:  # the judge never says tie: its precision is undefined
        o.values = {k: ("1" if v == "tie" else v) for k, v in o.values.items()}
    got = metrics.per_class(obs, scale, resamples=100, seed=0)
    pairs = metrics.pairs(obs)
    code = {x: i for i, x in enumerate(scale)}
    truth, said = [code[a] for a, _ in pairs], [code.get(b, 3) for _, b in pairs]
    p, r, f, _ = precision_recall_fscore_support(truth, said, labels=[0, 1, 2], zero_division=np.nan)
    for i, label in enumerate(scale):
        for name, values in (("precision", p), ("recall", r), ("f1", f)):
            want = None if np.isnan(values[i]) else pytest.approx(float(values[i]))
            assert got[label][name]["value"] == want
    assert got["tie"]["precision"]["value"] is None
    assert got["macro"]["f1"]["value"] == pytest.approx(float(np.mean(np.nan_to_num(f))))
