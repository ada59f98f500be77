"""End to end on the embedded SmolLM2-135M (a smoke test: the model is far too weak to be a real teacher):
generation through run.py writes one benchmark record per task type (the 135M teacher mostly copies the format
example, which is rejected, so items are often all discarded), and --evaluate scores the model on the shipped
hand-written sample benchmark and prints the per-task table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dyneval.nodes.atad.problems import structure_errors

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.integration
@pytest.mark.timeout(3300)
def test_generate_then_evaluate_on_the_embedded_model(embedded_url, tmp_path):
    gen = subprocess.run(
        [sys.executable, "run.py", "--protocol", "atad", "--per-task", "1", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,  # a hang guard only: on a loaded 2-core machine the embedded runs take minutes
    )
    assert gen.returncode == 0, gen.stderr[-2000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and p.name != "_cache"]
    bench = run_dir / "benchmark.jsonl"
    items = [json.loads(line) for line in bench.read_text().splitlines()]
    unjudged = json.loads((run_dir / "summary.json").read_text())["metrics"].get("ungraded") or {}
    # a unit whose orchestrator gave no usable verdict is neither finalized nor discarded (ungraded, resumable)
    assert sorted([*(i["task"] for i in items), *(u.split("-")[0] for u in unjudged)]) == [
        "T1",
        "T2",
        "T3",
        "T4",
        "T5",
        "T6",
        "T7",
    ]
    for item in items:
        assert item["item_status"] in {"finalized", "discarded"}
        assert item["history"], "every item keeps its history"
        if item["item_status"] == "finalized":
            assert item["acceptance"] and item["problem"] and item["base_problem"]
        else:
            assert item["discard_reason"]
    summary = json.loads((run_dir / "summary.json").read_text())
    counts = summary["status_counts"]
    assert "per_finalized" in summary["metrics"] and counts.get("ok", 0) + counts.get("ungraded", 0) == 7, counts

    for item in items:
        if item["item_status"] == "finalized":
            assert not structure_errors(item["task"], item["problem"]), item["problem"]

    ev = subprocess.run(
        [
            sys.executable,
            "run.py",
            "--protocol",
            "atad",
            "--evaluate",
            "local",
            "--benchmark",
            str(REPO / "samples" / "atad" / "benchmark.jsonl"),
            "--out",
            str(tmp_path / "eval"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,  # a hang guard only: on a loaded 2-core machine the embedded runs take minutes
    )
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "ATAD accuracy per task" in ev.stdout
    assert "T1" in ev.stdout and "Avg." in ev.stdout
    (eval_dir,) = [p for p in (tmp_path / "eval").iterdir() if p.is_dir() and p.name != "_cache"]
    records = [json.loads(line) for line in (eval_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 7 and all(r["status"] in {"ok", "model_error", "ungraded"} for r in records)
