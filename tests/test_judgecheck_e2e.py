"""End to end on the embedded model as judge over the shipped hand-written pairs (a smoke test: SmolLM2-135M is
no judge, and the report says so)."""

from __future__ import annotations

import json

import pytest

from dyneval.cli import main


@pytest.mark.integration
def test_embedded_judge_checks_the_shipped_pairs_and_writes_the_report(embedded_url, tmp_path):
    rc = main(
        [
            "--protocol",
            "judgecheck",
            "--judge",
            "pairwise",
            "--evaluator",
            "local",
            "--limit",
            "3",
            "--out",
            str(tmp_path),
            "--bootstrap-resamples",
            "100",
        ]
    )
    assert rc == 0
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["units"] == 3 and summary["smoke_test_warning"]
    m = summary["metrics"]["raters"]["m0"]["measures"]
    # every verdict is graded or counted as ungraded: nothing is lost
    assert m["accuracy_original"]["n"] + m["accuracy_original"]["ungraded"] == 3
    assert m["accuracy_swapped"]["n"] + m["accuracy_swapped"]["ungraded"] == 3
    report = (run_dir / "report.md").read_text()
    assert "WARNING: The embedded SmolLM2-135M model is acting as evaluator" in report
    assert "Verdict table, ordered by agreement" in report and (run_dir / "figures" / "confusion_m0.png").exists()
