"""Runs that share one PostgreSQL database never see each other's checkpoints: each unit's thread belongs to its
run (``RUN_ID/UNIT_ID``). Two runs of the same plan with different targets, each killed (-9) mid-run and resumed,
end with their own target's answers; the first run's results stay as they were. A run directory from before
run-scoped threads still resumes its units from its own SQLite file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.standin_endpoint import StandIn, generic_reply

REPO = Path(__file__).resolve().parents[1]


def _by_model(body: dict[str, Any]) -> dict[str, Any] | None:
    """Free-text answers name the model that gave them (so a record shows whose reply it holds)."""
    if body.get("tools"):
        return None
    reply = generic_reply(body)
    return {**reply, "content": f"[{body.get('model')}] {reply['content']}"}


def _records(out: Path) -> dict[str, dict]:
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    latest = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        latest[record["unit_id"]] = record
    return latest


def _answers(record: dict) -> list[str]:
    return [a["answer"] for a in [*record["seed_interactions"], *record["followup_results"]]]


def _run_killed_then_resumed(standin: StandIn, target: str, dsn: str, out: Path, kill_after: int) -> None:
    """``dyneval --protocol interview`` killed with SIGKILL once the stand-in saw ``kill_after`` more requests of
    ``target``, then resumed to its end."""
    argv = [
        sys.executable,
        "run.py",
        "--protocol",
        "interview",
        "--target",
        standin.spec(target),
        "--evaluator",
        standin.spec("judge"),
        "--postgres-dsn",
        dsn,
        "--out",
        str(out),
        "--limit",
        "4",
        "--concurrency",
        "2",
        "--max-questions",
        "2",
        "--skip-preflight",
    ]
    seen = sum(r.model == target for r in standin.requests)
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while (
        sum(r.model == target for r in standin.requests) < seen + kill_after
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert proc.poll() is None, f"the run ended before the kill: {proc.stderr.read()[-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    done = subprocess.run(
        [*argv[:2], "--protocol", "interview", "--resume", run_dir.name, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.integration
def test_two_runs_sharing_one_postgresql_keep_their_own_threads_through_kills_and_resumes(fresh_postgres_db, tmp_path):
    dsn = fresh_postgres_db("shared_runs")
    with StandIn(respond=_by_model, latency_s=0.05) as standin:
        _run_killed_then_resumed(standin, "model-x", dsn, tmp_path / "a", kill_after=3)
        a_before = _records(tmp_path / "a")
        _run_killed_then_resumed(standin, "model-y", dsn, tmp_path / "b", kill_after=3)
        b = _records(tmp_path / "b")
        asked_by_b = [r for r in standin.requests if r.model == "model-y"]
    assert len(a_before) == len(b) == 4 and {r["status"] for r in [*a_before.values(), *b.values()]} == {"ok"}
    assert all(answer.startswith("[model-x]") for r in a_before.values() for answer in _answers(r))
    assert all(answer.startswith("[model-y]") for r in b.values() for answer in _answers(r)), (
        "run B holds answers it did not get from its own target"
    )
    assert len(asked_by_b) >= sum(len(_answers(r)) for r in b.values())  # B asked its target every answer itself
    assert _records(tmp_path / "a") == a_before


def test_a_run_directory_from_before_run_scoped_threads_resumes_its_units(tmp_path):
    """A unit checkpointed under its bare id (older run directories) is continued, not started again."""
    from rich.console import Console

    from dyneval.runtime.runner import execute, open_run
    from dyneval.state.config import RunConfig
    from dyneval.stores.checkpoints import open_checkpointer
    from tests.fakes import ScriptedChat
    from tests.toy_protocol import ToyProtocol

    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 2})
    chats = {"target": ScriptedChat(lambda m, t: "a"), "evaluator": ScriptedChat(lambda m, t: {"correct": True})}
    run = open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True), chat_overrides=chats)
    execute(ToyProtocol(), run, skip_preflight=True)
    with open_checkpointer(run.run_dir) as saver:  # rename the threads to the old, bare form
        saver.conn.execute("UPDATE checkpoints SET thread_id = substr(thread_id, instr(thread_id, '/') + 1)")
        saver.conn.execute("UPDATE writes SET thread_id = substr(thread_id, instr(thread_id, '/') + 1)")
        saver.conn.commit()
        threads = {row[0] for row in saver.conn.execute("SELECT thread_id FROM checkpoints")}
    assert threads == {"q0", "q1"}
    (run.run_dir / "results.jsonl").write_text("")  # as if killed after the graphs ended, before the records
    resumed = open_run(
        ToyProtocol(), config, run_id=run.run_dir.name, console=Console(quiet=True), chat_overrides=chats
    )
    calls_before = sum(len(chat.calls) for chat in chats.values())
    summary = execute(ToyProtocol(), resumed, skip_preflight=True)
    assert summary["status_counts"] == {"ok": 2}
    assert sum(len(chat.calls) for chat in chats.values()) == calls_before, "a legacy thread was run again"
