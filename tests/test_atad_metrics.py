"""ATAD metric functions against hand-computed values (Tables 1-3, 5; Figure 4 / Appendix F)."""

from __future__ import annotations

import pytest

from dyneval.protocols.atad.metrics import (
    average_tables,
    consistency_curve,
    curve_sizes,
    generation_stats,
    per_task_accuracy,
    review_summary,
)


def test_per_task_accuracy_averages_task_columns_not_items():
    rows = [("T1", True), ("T1", False), ("T1", True), ("T1", True), ("T2", False)]
    table = per_task_accuracy(rows)
    assert table["T1"] == 75.0 and table["T2"] == 0.0
    assert table["avg"] == 37.5  # (75 + 0) / 2, not 3/5 = 60
    assert table["n"] == 5 and "T3" not in table


def test_average_tables_is_the_mean_over_benchmark_files_per_task():
    a = {"T1": 100.0, "T2": 50.0, "avg": 75.0, "n": 4}
    b = {"T1": 50.0, "avg": 50.0, "n": 2}
    t = average_tables([a, b])
    assert t["T1"] == 75.0 and t["T2"] == 50.0 and t["avg"] == 62.5 and t["n"] == 6


def test_consistency_curve_band_is_std_of_task_deviations_from_the_full_benchmark():
    by_task = {"T1": [True, True, False, False], "T2": [False, True, True, True]}
    points = consistency_curve(by_task, [2, 4])
    # n=2: T1 100, T2 50 -> avg 75; full: T1 50, T2 75 -> deviations +50, -25 -> pstdev 37.5
    assert points[0]["avg"] == 75.0 and points[0]["std"] == pytest.approx(37.5)
    # n=4 is the full benchmark: deviations 0
    assert points[1]["avg"] == 62.5 and points[1]["std"] == 0.0


def test_curve_sizes_end_at_the_full_size():
    assert curve_sizes(10, steps=5) == [2, 4, 6, 8, 10]
    assert curve_sizes(3, steps=10) == [1, 2, 3]
    assert curve_sizes(0) == []


def test_review_summary_means_and_approval_rate():
    s = review_summary(
        [
            {"validity": 5, "coherence": 4, "fairness": 3, "approved": True},
            {"validity": 3, "coherence": 4, "fairness": 1, "approved": False},
            None,
        ]
    )
    assert (s["validity"], s["coherence"], s["fairness"], s["approval"], s["n"]) == (4.0, 4.0, 2.0, 50.0, 2)
    assert s["ungraded"] == 1  # the unusable review is in no mean, and counted


def test_generation_stats_count_acceptance_difficulty_and_rejection_kinds():
    items = [
        {
            "task": "T1",
            "item_status": "finalized",
            "acceptance": "student_failed",
            "difficulty": "hard",
            "level": 1,
            "student_loops": 2,
            "teacher_attempts": 3,
            "history": [
                {"step": "generate", "structure_errors": ["sentence_count: x"]},
                {"step": "validate", "approved": False, "error": None},
                {"step": "validate", "approved": True},
            ],
        },
        {
            "task": "T1",
            "item_status": "discarded",
            "acceptance": None,
            "difficulty": None,
            "level": None,
            "student_loops": 0,
            "teacher_attempts": 1,
            "history": [{"step": "validate", "approved": False, "error": None}],
        },
    ]
    s = generation_stats(items)
    assert s["finalized"] == 1 and s["discarded"] == 1
    assert s["acceptance"] == {"student_failed": 1} and s["difficulty"] == {"hard": 1}
    assert s["rejection_reasons"] == {"sentence_count": 1, "orchestrator_rejected": 2}
    assert s["per_task"] == {"T1": {"finalized": 1, "discarded": 1}}
    assert s["mean_teacher_attempts"] == 2.0
