"""The interview protocol in the batch runner: inputs, units, results, summary, report, resume, CLI errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dyneval.protocols.interview import InterviewProtocol
from dyneval.protocols.interview.data import load_seeds
from dyneval.runtime.runner import execute, open_run, plan_units
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat
from tests.test_interview_world import grader, interviewer, math_seed, simulated_interviewee

REPO = Path(__file__).resolve().parents[1]


def test_shipped_sample_covers_every_task_type():
    seeds = load_seeds()
    assert {s.task for s in seeds} == {"math", "factual", "instruction", "generic"}
    assert all(s.answer for s in seeds if s.task == "math")


def test_gsm8k_csv_and_mt_bench_shapes_are_read(tmp_path):
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(
        json.dumps({"question": "Ann has 2 pens and gets 3. How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"}) + "\n"
    )
    s = load_seeds(gsm)[0]
    assert (s.task, s.answer, s.solution, s.id) == ("math", "5", "2 + 3 = <<2+3=5>>5", "q0001")
    mt = tmp_path / "mt.jsonl"
    mt.write_text(json.dumps({"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Again"]}) + "\n")
    s = load_seeds(mt)[0]
    assert (s.task, s.question, s.id) == ("instruction", "Write a haiku.", "81")
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("id,question,solution,answer,task,level\nc1,What is 2+2?,2+2=4,4,math,1\n")
    s = load_seeds(csv_path)[0]
    assert (s.id, s.task, s.level) == ("c1", "math", "1")


@pytest.mark.parametrize(
    "line, field",
    [
        ({"question": ""}, "question"),
        ({"question": "Q?", "task": "poetry"}, "task"),
        ({"question": "Q?", "task": "math"}, "answer"),
        ({"question": "Q?", "task": "factual"}, "solution"),
    ],
)
def test_bad_seed_records_name_file_record_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "fine?", "answer": "1"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(InputError) as exc:
        load_seeds(path)
    assert "bad.jsonl" in str(exc.value) and "record 2" in str(exc.value) and repr(field) in str(exc.value)


def test_cli_bad_data_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    proc = subprocess.run(
        [sys.executable, "run.py", "--protocol", "interview", "--data", str(path), "--out", str(tmp_path), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "record 1" in proc.stderr and "Traceback" not in proc.stderr


def _execute(tmp_path, params, p=0.5, run_id=None):
    data = tmp_path / "seeds.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps(math_seed(i, "easy" if i < 3 else "hard")) + "\n" for i in range(6)))
    config = RunConfig(
        protocol="interview", out=str(tmp_path / "runs"), params={"data": str(data), **params}, concurrency=2
    )
    chats = {
        "target": simulated_interviewee(p, salt="proto"),
        "evaluator": ScriptedChat(interviewer),
        "grader": ScriptedChat(grader),
    }
    run = open_run(
        InterviewProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    return run, execute(InterviewProtocol(), run, skip_preflight=True)


def test_batch_run_writes_the_interview_report(tmp_path):
    run, summary = _execute(tmp_path, {"repeats": 2, "max_retries": 2, "bootstrap_resamples": 300})
    m = summary["metrics"]
    assert m["sessions"] == 12 and summary["status_counts"] == {"ok": 12}
    assert m["score@1"] <= m["score@2"] <= m["score@3"]
    assert m["delta"] == pytest.approx(m["score@3"] - m["score@1"])
    assert m["run_to_run"]["repeats"] == 2 and len(m["run_to_run"]["std"]) == 3
    assert m["judge"] is not None and m["comprehensive_summary"]
    records = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["unit_id"] for r in records} == {f"m{i:03d}~r{k}" for i in range(6) for k in range(2)}
    assert all(r["transcript"] and r["session_summary"] for r in records)
    report = (run.run_dir / "report.md").read_text()
    for heading in (
        "1. Performance scores",
        "2. Error analysis and examples",
        "3. Summary",
        "Verbosity bias",
        "Run-to-run standard deviation",
        "Bootstrap sample-size check",
        "Interview transcripts",
        "Follow-up accuracy within solved and failed",
    ):
        assert heading in report, heading
    assert (run.run_dir / "figures" / "interview_score_at_n.png").exists()
    assert "Score@n by difficulty level" in report
    levels = m["by_level"]
    assert sum(v["sessions"] for v in levels.values()) == 12 and set(levels) == {"easy", "hard"}
    assert levels["easy"]["run_to_run"]["repeats"] == 2


def test_resume_skips_finished_sessions(tmp_path):
    run, _ = _execute(tmp_path, {"max_retries": 1})
    before = len((run.run_dir / "events.jsonl").read_text().splitlines())
    _, summary = _execute(tmp_path, {"max_retries": 1}, run_id=run.run_dir.name)
    after = (run.run_dir / "events.jsonl").read_text().splitlines()
    new_units = {json.loads(line)["unit"] for line in after[before:]}
    assert new_units <= {"-"}  # only the report summary call; no session ran again
    assert summary["metrics"]["sessions"] == 6


def test_duties_switch_off_from_params(tmp_path):
    run, summary = _execute(
        tmp_path,
        {"modify": False, "followups": False, "summarize": False, "single_turn_judge": False, "max_retries": 1},
    )
    records = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert all(r["modification"]["status"] == "off" and r["question"] == r["original_question"] for r in records)
    assert all(r["followups"] == [] and r["summary_source"] == "code" for r in records)
    assert summary["metrics"]["judge"] is None and summary["metrics"]["summary_source"] == "code"


def test_limit_with_repeats_keeps_whole_seed_questions_with_every_repeat(tmp_path):
    """``--limit 2 --repeats 3`` over six seed questions plans the first two seeds, three repeats each: the
    run-to-run spread is taken across one question's repeats, so none may be cut off."""
    data = tmp_path / "seeds.jsonl"
    data.write_text("".join(json.dumps(math_seed(i, "easy")) + "\n" for i in range(6)))
    config = RunConfig(
        protocol="interview", out=str(tmp_path / "runs"), params={"data": str(data), "repeats": 3}, limit=2
    )
    run = open_run(InterviewProtocol(), config, run_id=None, console=Console(quiet=True))
    run.run_dir.mkdir(parents=True)
    units = plan_units(InterviewProtocol(), run, [])
    assert sorted(u.id for u in units) == sorted(f"m{i:03d}~r{k}" for i in range(2) for k in range(3))
