"""The batch runner: results, summary, report, error kinds and resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from rich.console import Console

from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat, all_text, last_text
from tests.toy_protocol import ToyProtocol

REPO = Path(__file__).resolve().parents[1]


class Killed(BaseException):
    """Stands in for the process being killed mid-run (not caught by the runner)."""


def _open(tmp_path: Path, chats: dict, run_id: str | None = None, **params):
    config = RunConfig(protocol="toy", out=str(tmp_path), params=params, concurrency=2)
    return open_run(
        ToyProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_run_writes_results_summary_report_and_counts_tokens_per_unit(tmp_path):
    target = ScriptedChat(lambda m, t: "answer to " + last_text(m))
    judge = ScriptedChat(lambda m, t: {"correct": "question 1" in last_text(m)})
    run = _open(tmp_path, {"target": target, "evaluator": judge})
    summary = execute(ToyProtocol(), run, skip_preflight=True)

    records = _records(run.run_dir)
    assert sorted(r["unit_id"] for r in records) == ["q0", "q1", "q2"]
    assert all(r["status"] == "ok" for r in records)
    assert all(r["usage"]["calls"] == 2 and r["usage"]["prompt_tokens"] == 20 for r in records)
    assert summary["metrics"]["accuracy"] == pytest.approx(1 / 3)
    assert summary["usage"]["calls"] == 6
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["unit"] for e in events} == {"q0", "q1", "q2"}
    assert {e["role"] for e in events} == {"target", "evaluator"}
    assert all(
        set(e) >= {"messages", "output", "prompt_tokens", "completion_tokens", "latency_s", "error"} for e in events
    )
    for name in ("config.json", "units.jsonl", "summary.json", "report.md", "report.html"):
        assert (run.run_dir / name).exists(), name
    assert "q1" in (run.run_dir / "report.md").read_text()


def test_endpoint_fault_is_infra_error_and_model_garbage_is_model_error(tmp_path):
    def target(m, t):
        if "question 0" in last_text(m):
            return openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1"))
        return "fine"

    def judge(m, t):
        return {"wrong_field": 1} if "question 1" in all_text(m) else {"correct": True}

    run = _open(tmp_path, {"target": ScriptedChat(target), "evaluator": ScriptedChat(judge)})
    summary = execute(ToyProtocol(), run, skip_preflight=True)
    by_id = {r["unit_id"]: r for r in _records(run.run_dir)}
    assert by_id["q0"]["status"] == "infra_error"
    assert by_id["q1"]["status"] == "model_error"
    assert by_id["q2"]["status"] == "ok"
    # accuracy counts only the unit that finished: the infra error is not a wrong answer
    assert summary["metrics"]["accuracy"] == 1.0
    assert summary["status_counts"] == {"infra_error": 1, "model_error": 1, "ok": 1}


def test_resume_redoes_infra_errors_only_and_never_duplicates_finished_units(tmp_path):
    healthy = {"up": False}

    def target(m, t):
        if "question 2" in last_text(m) and not healthy["up"]:
            return openai.InternalServerError(
                "boom", response=httpx.Response(503, request=httpx.Request("POST", "http://x")), body=None
            )
        return "ok"

    target_chat = ScriptedChat(target)
    chats = {"target": target_chat, "evaluator": ScriptedChat(lambda m, t: {"correct": True})}
    run = _open(tmp_path, chats, units=4)
    execute(ToyProtocol(), run, skip_preflight=True)
    assert {r["unit_id"]: r["status"] for r in _records(run.run_dir)}["q2"] == "infra_error"
    calls_before = len(target_chat.calls)

    healthy["up"] = True
    resumed = _open(tmp_path, chats, run_id=run.run_dir.name, units=4)
    summary = execute(ToyProtocol(), resumed, skip_preflight=True)
    assert len(target_chat.calls) == calls_before + 1  # only q2 asked again
    latest = {r["unit_id"]: r["status"] for r in _records(run.run_dir)}
    assert latest == {"q0": "ok", "q1": "ok", "q2": "ok", "q3": "ok"}
    assert summary["units"] == 4 and summary["status_counts"] == {"ok": 4}


@pytest.mark.parametrize("checkpoints", ["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def test_killed_run_continues_from_checkpoint_without_repeating_nodes(tmp_path, request, checkpoints):
    state = {"kill": True}

    def judge(m, t):
        if "question 1" in last_text(m) and state["kill"]:
            raise Killed()
        return {"correct": True}

    target_chat = ScriptedChat(lambda m, t: "a")
    chats = {"target": target_chat, "evaluator": ScriptedChat(judge)}
    stores = {"postgres_dsn": request.getfixturevalue("postgres_dsn")} if checkpoints == "postgres" else {}

    def open_(run_id=None):
        config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 3}, concurrency=1, stores=stores)
        return open_run(ToyProtocol(), config, run_id=run_id, console=Console(quiet=True), chat_overrides=chats)

    run = open_()
    with pytest.raises(Killed):
        execute(ToyProtocol(), run, skip_preflight=True)
    assert "question 1" in [last_text(m) for m, _ in target_chat.calls]
    assert (run.run_dir / "checkpoints.sqlite").exists() == (checkpoints == "sqlite")

    state["kill"] = False
    summary = execute(ToyProtocol(), open_(run.run_dir.name), skip_preflight=True)
    # every question was put to the target exactly once across both processes' work
    assert sorted(last_text(m) for m, _ in target_chat.calls) == ["question 0", "question 1", "question 2"]
    assert summary["status_counts"] == {"ok": 3}
    assert sorted(r["unit_id"] for r in _records(run.run_dir)) == ["q0", "q1", "q2"]


def test_rejected_input_leaves_no_run_directory_and_no_out_folder(tmp_path):
    out = tmp_path / "new" / "runs"
    config = RunConfig(protocol="toy", out=str(out), params={"units": 0})
    run = open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True))
    with pytest.raises(InputError, match="--units"):
        execute(ToyProtocol(), run, skip_preflight=True)
    assert not (tmp_path / "new").exists()


def test_rejected_input_keeps_an_existing_out_folder_and_its_runs(tmp_path):
    (tmp_path / "earlier-run").mkdir()
    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 0})
    with pytest.raises(InputError):
        execute(
            ToyProtocol(),
            open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True)),
            skip_preflight=True,
        )
    assert [p.name for p in tmp_path.iterdir()] == ["earlier-run"]


def test_unwritable_out_is_one_line_naming_out_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = subprocess.run(
        [sys.executable, "run.py", "--protocol", "toy", "--out", str(blocker / "runs"), "--skip-preflight"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DYNEVAL_PROTOCOLS": "toy=tests.toy_protocol:ToyProtocol"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--out" in lines[0] and "cannot create the run directory" in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_every_run_prints_its_id_and_resume_command_first(tmp_path):
    console = Console(record=True, width=300)
    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 1})
    run = open_run(
        ToyProtocol(),
        config,
        run_id=None,
        console=console,
        chat_overrides={
            "target": ScriptedChat(lambda m, t: "a"),
            "evaluator": ScriptedChat(lambda m, t: {"correct": True}),
        },
    )
    execute(ToyProtocol(), run, skip_preflight=True)
    first = console.export_text().splitlines()[0]
    assert run.run_dir.name in first
    assert f"dyneval --protocol toy --resume {run.run_dir.name} --out {tmp_path}" in first  # in-process: the API


def _console_run(tmp_path: Path, units: int) -> tuple[list[str], dict]:
    """A run on a console that is not a terminal (as under CI or a pipe): its printed lines and its summary."""
    console = Console(record=True, width=200, force_terminal=False)
    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": units}, concurrency=2)
    run = open_run(
        ToyProtocol(),
        config,
        run_id=None,
        console=console,
        chat_overrides={
            "target": ScriptedChat(lambda m, t: "a"),
            "evaluator": ScriptedChat(lambda m, t: {"correct": True}),
        },
    )
    summary = execute(ToyProtocol(), run, skip_preflight=True)
    return console.export_text().splitlines(), summary


def test_last_progress_line_shows_the_final_count_of_units_calls_and_requests_in_flight(tmp_path):
    # a run shorter than the status line's half-second refresh: before, its last line kept the counts of its start
    lines, summary = _console_run(tmp_path, units=5)
    progress = [line for line in lines if line.startswith("toy ") and not line.startswith("toy run")]
    assert progress, lines
    last = progress[-1]
    assert "5/5" in last
    calls = summary["usage"]["calls"]
    assert calls == 10
    assert f"in flight 0, calls {calls}, failed 0, cached 0" in last, last


def test_writing_the_summary_and_report_is_a_step_announced_before_and_ended_after(tmp_path):
    lines, _ = _console_run(tmp_path, units=2)
    started = lines.index("writing summary and report…")
    ended = next(i for i, line in enumerate(lines) if line.startswith("writing summary and report: done in "))
    table = next(i for i, line in enumerate(lines) if line.startswith("toy run"))  # the summary's title
    last_progress = max(i for i, line in enumerate(lines) if line.startswith("toy ") and not line.startswith("toy run"))
    assert last_progress < started < ended < table
