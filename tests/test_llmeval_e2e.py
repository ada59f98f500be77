"""End to end, offline: import the shipped sample bank, run a session with the embedded SmolLM2 model as
target and as judge (a smoke test: a 135M judge proves the pipeline runs, not the target's quality), then
print the leaderboard - all through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
#: ``run.main`` limited to llmeval (run.py puts every protocol's flags in one parser).
CLI = [
    sys.executable,
    "-c",
    "import sys, dyneval.protocols as protocols, dyneval.cli as run; "
    "run.available = lambda: {'llmeval': protocols.protocol_class('llmeval')}; sys.exit(run.main(sys.argv[1:]))",
]


@pytest.mark.integration
def test_sample_bank_session_on_the_embedded_model_then_leaderboard(tmp_path, embedded_url):
    env = {**os.environ, "DYNEVAL_EMBEDDED_URL": embedded_url}
    out = tmp_path / "runs"
    config = tmp_path / "models.toml"  # the embedded model with shorter replies keeps the test within minutes
    config.write_text(
        '[models.smol]\nprovider = "embedded"\nmodel = "smollm2-135m-instruct"\n'
        "max_tokens = 96\nconcurrency = 1\ntimeout_s = 300\n"
    )
    run = subprocess.run(
        [
            *CLI,
            "--protocol",
            "llmeval",
            "--out",
            str(out),
            "--config",
            str(config),
            "--bank",
            str(SAMPLE),
            "--questions",
            "2",
            "--paradigm",
            "zero-shot",
            "--target",
            "smol",
            "--evaluator",
            "smol",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode in (0, 4), run.stderr[-2000:] + run.stdout[-2000:]
    assert "36 imported" in run.stdout and "smoke test" in run.stdout
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_"))
    record = json.loads((run_dir / "results.jsonl").read_text().splitlines()[-1])
    # exit 4 = the session ended with answers ungraded (the embedded judge often gives no usable stars), else 0
    assert run.returncode == (0 if record["status"] == "ok" else 4), run.stdout[-2000:]
    assert record["status"] in {"ok", "ungraded"} and record["allocated"] == 2 and record["answered"] == 2
    assert record["N"] + record["unscored"] == 2 and (record["S"] is None) == (record["N"] == 0)
    assert record["S"] is None or 0 <= record["S"] <= 100
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["usage"]["calls"] >= 3  # pre-flight + 2 answers, plus a judge call per non-empty answer
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["role"] for e in events} >= {"target", "evaluator"}
    board = subprocess.run(
        [*CLI, "--protocol", "llmeval", "--out", str(out), "--leaderboard"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert board.returncode == 0, board.stderr[-2000:]
    print(board.stdout)
    assert "llmeval leaderboard" in board.stdout and "local:smollm2-135m-instruct" in board.stdout
