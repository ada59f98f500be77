"""Calibration (issue 4): simulated targets right with probability p get JudgeAgent scores and difficulty
distributions in the order of p (easy-heavy for 0.2, hard-heavy for 0.9)."""

from __future__ import annotations

import pytest

from dyneval.protocols.judgeagent.metrics import difficulty_distribution, overall_score
from dyneval.state.judgeagent import BaseQuestion
from tests.test_judgeagent_support import FakeEvaluator, SimulatedTarget, fake_services, run_batch, write_kb

BATCHES = 12


def _questions(b: int) -> list[BaseQuestion]:
    levels = ["easy", "medium", "hard"]
    return [
        BaseQuestion(
            id=f"b{b}q{i}",
            question=f"Calibration question {b}-{i} about the Voss Canal?",
            options=["Orden", "Harl", "Brenmark", "Spartina"],
            answer="ABCD"[(b + i) % 4],
            difficulty=levels[(b + i) % 3],
        )
        for i in range(3)
    ]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("calib")
    kb = write_kb(tmp / "kb")
    result = {}
    for p in (0.2, 0.5, 0.9):
        batches = [_questions(b) for b in range(BATCHES)]
        target = SimulatedTarget(p, {q.question: q.answer for qs in batches for q in qs}, seed=7)
        svc = fake_services(tmp, FakeEvaluator(), target)  # one cache: the graph is built once
        result[p] = [
            run_batch(svc, qs, kb, thread=f"p{p}-batch-{b}", rounds=3, no_validation=True)
            for b, qs in enumerate(batches)
        ]
    return result


def test_scores_follow_the_simulated_accuracy(outcomes):
    scores = {p: overall_score(r) for p, r in outcomes.items()}
    assert scores[0.2] < scores[0.5] < scores[0.9]


def test_difficulty_distribution_is_easy_heavy_for_weak_and_hard_heavy_for_strong_targets(outcomes):
    share = {p: difficulty_distribution(r)["share"] for p, r in outcomes.items()}
    assert share[0.2]["easy"] == max(share[0.2].values()) and share[0.2]["easy"] > share[0.2]["hard"]
    assert share[0.9]["hard"] == max(share[0.9].values()) and share[0.9]["hard"] > share[0.9]["easy"]
    assert share[0.2]["hard"] < share[0.5]["hard"] < share[0.9]["hard"] or share[0.5]["hard"] == 0
    assert share[0.2]["easy"] > share[0.5]["easy"] > share[0.9]["easy"] or share[0.9]["easy"] == 0
