"""End to end through ``run.py`` on the embedded SmolLM2-135M model (smoke test: the pipeline runs and
writes the report), on the shipped sample and on real public data (``../shared/data``) when present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "run.py", "--protocol", "judgeagent", "--out", str(tmp_path), "--skip-preflight", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert (run_dir / "report.md").exists() and (run_dir / "report.html").exists()
    return json.loads((run_dir / "summary.json").read_text()) | {"_dir": str(run_dir)}


@pytest.mark.integration
def test_offline_default_on_the_shipped_sample_writes_the_report(tmp_path, embedded_url):
    summary = _run(tmp_path, "--limit", "1", "--batch-size", "2", "--rounds", "1", "--extract-batch", "8")
    assert sum(summary["status_counts"].get(s, 0) for s in ("ok", "ungraded")) == 1, summary["status_counts"]
    m = summary["metrics"]
    assert m["base_questions"] == 2 and m["generation"]["rounds"] == 1
    assert set(m["dynamic_scores"]) == {"base", "@1"}
    stats = json.loads((Path(summary["_dir"]) / "kb_stats.json").read_text())
    assert stats["chunks"] == 16 and stats["entities"] > 0  # LLM or keyword-fallback entities
    report = (Path(summary["_dir"]) / "report.md").read_text()
    assert "JudgeAgent score" in report and "smoke test" in report.lower()


@pytest.mark.integration
def test_real_hotpotqa_questions_with_their_reference_paragraphs(tmp_path, embedded_url, shared_data):
    data = shared_data / "hotpotqa_sample" / "hotpotqa_dev_sample100_nd8.json"
    if not data.exists():
        pytest.skip("hotpotqa sample missing")
    summary = _run(
        tmp_path,
        "--data",
        str(data),
        "--fields",
        "id=_id,question=question,answer=answer,references=para_a+para_b",
        "--limit",
        "1",
        "--batch-size",
        "1",
        "--rounds",
        "1",
        "--hops",
        "2",
    )
    assert sum(summary["status_counts"].get(s, 0) for s in ("ok", "ungraded")) == 1, summary["status_counts"]
    assert summary["metrics"]["base_questions"] == 1
    stats = json.loads((Path(summary["_dir"]) / "kb_stats.json").read_text())
    assert stats["documents"] == 1 and stats["kb"].endswith("kb_references.jsonl")
