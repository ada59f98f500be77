"""End to end through ``run.py`` on the embedded SmolLM2-135M model (offline), bounded to a few minutes.

SmolLM2-135M acting as interviewer and grader is a smoke test only: these tests
prove the pipeline runs and copes with weak structured output, not how good any
model is. Replies are capped at 64 tokens and the sessions are few and short, so that an idle 2-core
machine finishes in a few minutes (a heavily loaded one is much slower: hence the longer timeouts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dyneval.nodes.interview import checks

REPO = Path(__file__).resolve().parents[1]

CONFIG = """
[models.smol]
provider = "embedded"
model = "smollm2-135m-instruct"
max_tokens = 64
timeout_s = 600
concurrency = 1

[roles]
target = "smol"
evaluator = "smol"
"""


def _run(tmp_path: Path, *args: str) -> tuple[Path, list[dict], dict]:
    cfg = tmp_path / "smol.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "run.py",
            "--protocol",
            "interview",
            "--config",
            str(cfg),
            "--out",
            str(out),
            "--skip-preflight",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1700,
    )  # hang guard only: a loaded machine makes SmolLM2 very slow
    assert proc.returncode in (0, 4), proc.stderr[-3000:] + proc.stdout[-2000:]
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    # exit 4 = the run ended with units ungraded (the embedded judge often gives no usable verdict), else 0
    assert proc.returncode == (0 if all(r["status"] == "ok" for r in records) else 4), proc.stdout[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    return run_dir, records, summary


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_embedded_model_interviews_the_shipped_sample(embedded_url, tmp_path):
    """A math and a factual session, every duty on (judge, modification, feedback, follow-up, summaries)."""
    run_dir, records, summary = _run(tmp_path, "--limit", "2", "--max-retries", "1", "--max-questions", "2")
    assert {r["status"] for r in records} <= {"ok", "ungraded"}, [r.get("error") for r in records]
    assert {r["task"] for r in records} == {"math", "factual"}
    assert all(r["single_turn"]["verdict"] in {"correct", "wrong", "ungraded"} for r in records)
    units = {
        json.loads(line)["id"]: json.loads(line)["input"]["seed"]
        for line in (run_dir / "units.jsonl").read_text().splitlines()
    }
    for r in records:
        assert 1 <= len(r["seed_scores"]) <= 2 and r["transcript"]
        assert r["session_summary"] or r["stopped"]  # a session stops without summary at an ungraded answer
        ref = units[r["unit_id"]]["answer"] or units[r["unit_id"]]["solution"]
        for f in r["feedbacks"]:
            assert not checks.leaks_answer(f["text"], ref), f["text"]
    m = summary["metrics"]
    assert m["sessions"] == 2 and "score@1" in m and "score@2" in m and m["comprehensive_summary"]
    assert summary["smoke_test_warning"]
    report = (run_dir / "report.md").read_text()
    assert "1. Performance scores" in report and "Interview transcripts" in report
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["role"] for e in events} >= {"target", "evaluator", "grader"}


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_embedded_model_on_real_gsm8k_problems(embedded_url, shared_data, tmp_path):
    """Two real GSM8K problems, modified and graded (no follow-ups, judge or LLM summaries: kept short)."""
    data = shared_data / "gsm8k" / "test.jsonl"
    if not data.exists():
        pytest.skip("gsm8k test split is absent")
    run_dir, records, summary = _run(
        tmp_path,
        "--data",
        str(data),
        "--limit",
        "2",
        "--max-retries",
        "1",
        "--max-questions",
        "1",
        "--no-summarize",
        "--no-single-turn-judge",
    )
    assert {r["status"] for r in records} <= {"ok", "ungraded"}, [r.get("error") for r in records]
    assert all(r["task"] == "math" for r in records)
    units = {
        json.loads(line)["id"]: json.loads(line)["input"]["seed"]
        for line in (run_dir / "units.jsonl").read_text().splitlines()
    }
    for r in records:
        seed = units[r["unit_id"]]
        assert seed["answer"].strip().lstrip("-").isdigit()  # '#### N' was split off the solution
        for f in r["feedbacks"]:
            assert not checks.leaks_answer(f["text"], seed["answer"]), f["text"]
        # every seed answer was graded by the grader (with the code check for math), wrong when empty, or ungraded
        assert all(i["graded_by"] in {"code", "grader", "code+grader", "ungraded"} for i in r["seed_interactions"])
        assert all((i["verdict"] == "ungraded") == (i["correct"] is None) for i in r["seed_interactions"])
    assert summary["metrics"]["sessions"] == 2
