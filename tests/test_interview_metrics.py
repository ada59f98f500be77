"""Interview Report metrics on constructed logs, against hand-computed values."""

from __future__ import annotations

import pytest
from scipy.stats import pearsonr

from dyneval.protocols.interview import metrics


def rec(uid, scores, *, solved=None, judge=None, fups=(), errors=(), words=None, repeat=0, task="math", status="ok"):
    inter = []
    for k, s in enumerate(scores, 1):
        inter.append(
            {
                "attempt": k,
                "score": s,
                "correct": s == 1.0,
                "answer": f"answer {uid} {k}",
                "error_type": errors[k - 1] if k - 1 < len(errors) else "N/A",
                "words": (words or [10] * len(scores))[k - 1],
                "reason": "r",
                "graded_by": "grader",
            }
        )
    r = {
        "unit_id": uid,
        "status": status,
        "task": task,
        "repeat": repeat,
        "question": f"q {uid}",
        "seed_scores": list(scores),
        "seed_correct": [s == 1.0 for s in scores],
        "seed_solved": solved if solved is not None else scores[-1] == 1.0,
        "seed_interactions": inter,
        "followup_results": [{"type": t, "correct": c, "graded_by": "grader"} for t, c in fups],
        "single_turn": {"score": judge, "words": 10} if judge is not None else {},
    }
    return r


LOG = [
    rec("a", [1.0], judge=1.0, fups=[("rationale", True)]),
    rec("b", [0.0, 1.0], judge=0.0, fups=[("rationale", False)], errors=["Calculation"]),
    rec("c", [0.0, 0.0, 1.0], judge=1.0, fups=[("rationale", True)], errors=["Concept", "Calculation"]),
    rec(
        "d",
        [0.0, 0.0, 0.0],
        judge=0.0,
        fups=[("clarification", False), ("clarification", True)],
        errors=["Misinterpret", "Misinterpret", "Calculation"],
    ),
    rec("e", [1.0], status="infra_error"),  # never counted
]


def test_score_at_n_on_a_constructed_log():
    # @1: a only -> 1/4; @2: a, b -> 2/4; @3: a, b, c -> 3/4 (solved sessions carry forward)
    assert metrics.score_at_n(LOG, 3) == [0.25, 0.5, 0.75]
    assert metrics.score_at_n(LOG, 4)[3] == 0.75
    assert metrics.judge_score(LOG) == 0.5


def test_score_at_n_with_factual_precision_carries_the_last_score():
    log = [rec("f1", [0.5, 0.75, 1.0]), rec("f2", [0.8], solved=False)]
    assert metrics.score_at_n(log, 3) == pytest.approx([0.65, 0.775, 0.9])


def test_followup_accuracy_within_solved_failed_and_overall():
    fa = metrics.followup_accuracy(LOG)
    # solved sessions a, b, c: 2 of 3 follow-ups right; failed d: 1 of 2
    assert fa["solved"] == pytest.approx(2 / 3) and fa["failed"] == 0.5 and fa["overall"] == 0.6
    assert (fa["n_solved"], fa["n_failed"], fa["n"]) == (3, 2, 5)
    assert fa["by_type"]["clarification"] == {"accuracy": 0.5, "n": 2, "ungraded": 0}


def test_error_distribution_counts_every_incorrect_interaction():
    ed = metrics.error_distribution(LOG)
    assert ed["total"] == 6
    assert {t: v["count"] for t, v in ed["types"].items()} == {
        "Concept": 1,
        "Misinterpret": 2,
        "Calculation": 3,
        "N/A": 0,
    }
    assert ed["types"]["Calculation"]["rate"] == 0.5
    units = [e["unit"] for e in ed["types"]["Calculation"]["examples"]]
    assert len(units) == 2 and len(set(units)) == 2  # examples come from different sessions


def test_verbosity_bias_matches_scipy_pearson():
    log = [
        rec(str(i), [s], words=[w]) for i, (s, w) in enumerate([(1.0, 50), (0.0, 10), (1.0, 40), (0.0, 30), (1.0, 60)])
    ]
    rows = {r["interaction"]: r for r in metrics.verbosity_bias(log, 2)}
    ref = pearsonr([50, 10, 40, 30, 60], [1, 0, 1, 0, 1])
    assert rows["@1"]["r"] == pytest.approx(ref.statistic) and rows["@1"]["p"] == pytest.approx(ref.pvalue)
    assert rows["@1"]["n"] == 5 and rows["@2"]["r"] is None  # no second interactions


def test_run_to_run_std_over_repeats():
    log = [
        rec("a0", [1.0], judge=1.0, repeat=0),
        rec("b0", [0.0, 0.0, 0.0], judge=0.0, repeat=0),
        rec("a1", [0.0, 1.0], judge=1.0, repeat=1),
        rec("b1", [0.0, 0.0, 0.0], judge=1.0, repeat=1),
    ]
    rr = metrics.run_to_run_std(log, 3)
    # repeat 0: [0.5, 0.5, 0.5]; repeat 1: [0, 0.5, 0.5] -> sample std [0.3536, 0, 0]
    assert rr["repeats"] == 2
    assert rr["std"] == pytest.approx([0.5**0.5 / 2, 0.0, 0.0])
    assert rr["judge_std"] == pytest.approx(0.5**0.5 / 2)
    assert metrics.run_to_run_std(log[:2], 3) is None


def test_bootstrap_p_is_large_for_the_full_set_and_small_for_a_skewed_subset():
    values = [1.0] * 50 + [0.0] * 50
    assert metrics.bootstrap_p(values, 100, resamples=2000) > 0.8
    assert metrics.bootstrap_p([1.0] * 10 + [0.0] * 90, 100, resamples=2000) > 0.8
    # a subset of identical values cannot reproduce the full-set mean
    assert metrics.bootstrap_p([1.0] * 5 + [0.0] * 5, 1, resamples=500) == 0.0
    table = metrics.bootstrap_table(LOG, resamples=500)
    assert [row["size"] for row in table] == [1, 3, 4]
    assert table[-1]["interviewer_p"] == pytest.approx(1.0, abs=0.2)


def _ungraded_answer(k):
    return {
        "attempt": k,
        "score": None,
        "correct": None,
        "verdict": "ungraded",
        "answer": "x",
        "error_type": "N/A",
        "words": 3,
        "reason": "ungraded: grader failed",
        "graded_by": "ungraded",
    }


def test_bootstrap_p_draws_its_resamples_in_blocks_with_the_p_of_drawing_them_at_once(monkeypatch):
    """Appendix C.2's check holds at most BLOCK drawn values at once; the draws, and so the p, are those of one
    resamples x size matrix."""
    import random

    import numpy as np

    values = list(np.random.default_rng(2).normal(size=400))
    monkeypatch.setattr(metrics, "BLOCK", 1000)  # 2 resamples of 400 per block
    for size in (80, 400):
        subset = np.asarray(random.Random(0).sample(values, size))
        means = subset[np.random.default_rng(0).integers(0, size, size=(999, size))].mean(axis=1)
        full = sum(values) / len(values)
        whole = min(1.0, 2 * min(float((means <= full + 1e-12).mean()), float((means >= full - 1e-12).mean())))
        assert metrics.bootstrap_p(values, size, resamples=999) == whole


def test_ungraded_answers_count_neither_for_nor_against_and_show_in_the_denominators():
    stopped = rec("u", [0.0], judge=None)
    stopped["seed_interactions"].append(_ungraded_answer(2))
    stopped.update(
        seed_scores=[0.0, None],
        seed_correct=[False, None],
        seed_solved=None,
        status="ungraded",
        single_turn={"verdict": "ungraded", "score": None, "correct": None, "words": 4},
    )
    stopped["followup_results"] = [
        {"type": "rationale", "verdict": "ungraded", "correct": None, "graded_by": "ungraded"}
    ]
    log = [rec("a", [1.0], judge=1.0, fups=[("rationale", True)]), rec("b", [0.0, 0.0, 0.0], judge=0.0), stopped]
    rates = metrics.score_at_n_rates(log, 3)
    # u's retry is ungraded: u leaves every Score@n (one set of sessions for the whole series), over a and b only
    assert [r["value"] for r in rates] == [0.5, 0.5, 0.5]
    assert [(r["n"], r["ungraded"]) for r in rates] == [(2, 1), (2, 1), (2, 1)]
    assert metrics.judge_rate(log) == {"value": 0.5, "n": 2, "ungraded": 1}
    fa = metrics.followup_accuracy(log)
    assert (fa["overall"], fa["n"], fa["ungraded"]) == (1.0, 1, 1)
    assert metrics.error_distribution(log)["total"] == 4  # b's three wrong answers and u's first; never u's second
    assert metrics.graded_by(log)["ungraded"] == 2


def test_an_ungraded_retry_cannot_raise_score_at_n_above_score_at_1():
    """Sessions [1], [1], [0, ungraded], [0, ungraded]: counting each n over the sessions graded at that n gave
    Score@1 = 0.5 and Score@2 = 1.0 (the failing sessions left only the later denominator)."""
    log = [rec("a", [1.0]), rec("b", [1.0])]
    for name in ("c", "d"):
        failed = rec(name, [0.0])
        failed["seed_interactions"].append(_ungraded_answer(2))
        failed.update(seed_scores=[0.0, None], seed_correct=[False, None], seed_solved=None, status="ungraded")
        log.append(failed)
    rates = metrics.score_at_n_rates(log, 2)
    assert [(r["value"], r["n"], r["ungraded"]) for r in rates] == [(1.0, 2, 2), (1.0, 2, 2)]
    assert rates[1]["value"] <= rates[0]["value"]


def test_nothing_graded_gives_no_number_and_says_how_many_were_ungraded():
    only = rec("u", [0.0])
    only["seed_interactions"] = [_ungraded_answer(1)]
    only.update(seed_scores=[None], seed_correct=[None], seed_solved=None, status="ungraded")
    assert metrics.score_at_n_rates([only], 2) == [{"value": None, "n": 0, "ungraded": 1}] * 2
    assert metrics.error_distribution([only])["total"] == 0
