"""Ctrl-C and SIGTERM stop spending at once, leave a partial report and a resume command that works."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _finished_units(out: Path) -> int:
    """Units with a record so far (Ctrl-C comes once some are done, so the partial report has results)."""
    results = list(out.glob("*/results.jsonl"))
    return len(results[0].read_text().splitlines()) if results else 0


def _records(run_dir: Path) -> dict[str, dict]:
    """Each unit's latest record without what varies between runs (timings, usage)."""
    records = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["unit_id"]] = {k: v for k, v in record.items() if k not in ("wall_s", "usage")}
    return records


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "sig, code, word",
    [(signal.SIGINT, 130, "INTERRUPTED"), (signal.SIGTERM, 143, "TERMINATED")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_signal_sends_no_request_after_2s_writes_a_partial_report_and_prints_a_working_resume_command(
    tmp_path, sig, code, word
):
    """SIGTERM is what Docker, Kubernetes, systemd, Slurm and Ray send: it stops the run as Ctrl-C does (exit 143
    instead of 130), and the resumed run ends with the records of a run never stopped."""
    log = tmp_path / "standin.jsonl"
    standin = subprocess.Popen(
        [sys.executable, "-m", "tests.standin_endpoint", "--log", str(log), "--latency", "0.3"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = standin.stdout.readline().strip()
        out = tmp_path / "runs"
        run = subprocess.Popen(
            [
                sys.executable,
                "run.py",
                "--protocol",
                "interview",
                "--target",
                f"t@{url}",
                "--evaluator",
                f"e@{url}",
                "--concurrency",
                "3",
                "--out",
                str(out),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "300"},
        )
        deadline = time.monotonic() + 120
        while not _finished_units(out) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before it could be interrupted"
        signalled = time.time()
        run.send_signal(sig)
        stdout, stderr = run.communicate(timeout=60)

        assert run.returncode == code, stdout + stderr
        assert "Traceback" not in stdout + stderr
        late = [r for r in _requests(log) if r["ts"] > signalled + 2.0]
        assert late == [], f"{len(late)} requests reached the endpoint more than 2 s after Ctrl-C"
        run_dir = next(p for p in out.iterdir() if p.is_dir())
        assert "RUN_ID" not in stdout
        # the run id and the resume command come first, and again at the end
        resume_lines = [line for line in stdout.splitlines() if "resume with:" in line]
        assert run_dir.name in stdout.splitlines()[0] or run_dir.name in resume_lines[0]
        command = resume_lines[-1].split("resume with:", 1)[1].strip()
        assert command == f"python run.py --protocol interview --resume {run_dir.name} --out {out}"

        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["interrupted"]["unfinished_units"] > 0
        assert summary["status_counts"].get("ok", 0) >= 1 and summary["metrics"]["sessions"] >= 1
        assert summary["interrupted"]["resume"] == command
        assert word in (run_dir / "report.md").read_text() and (run_dir / "view.html").is_file()

        argv = shlex.split(command)
        resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["interrupted"] is None
        assert summary["status_counts"] == {"ok": summary["units"]} and summary["units"] == 7
        if sig == signal.SIGTERM:  # the same records as a run never stopped (the stand-in answers by content)
            whole = tmp_path / "whole"
            done = subprocess.run(
                [
                    sys.executable,
                    "run.py",
                    "--protocol",
                    "interview",
                    "--target",
                    f"t@{url}",
                    "--evaluator",
                    f"e@{url}",
                    "--concurrency",
                    "3",
                    "--out",
                    str(whole),
                ],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            assert _records(run_dir) == _records(next(p for p in whole.iterdir() if p.is_dir()))
    finally:
        standin.terminate()
        standin.wait(timeout=10)


def test_ctrl_c_in_process_launches_no_more_units_refuses_the_next_request_and_resume_finishes(tmp_path):
    from rich.console import Console

    from dyneval.runtime import stop
    from dyneval.runtime.runner import RunInterrupted, execute, open_run
    from dyneval.state.config import RunConfig
    from tests.fakes import ScriptedChat, last_text
    from tests.toy_protocol import ToyProtocol

    def target(messages, tool):
        if last_text(messages) == "question 1" and not resumed:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this request is in flight
            deadline = time.monotonic() + 30  # the handler runs in the main thread: wait for it, however loaded
            while not stop.stopped() and time.monotonic() < deadline:
                time.sleep(0.01)
        return "answer to " + last_text(messages)

    resumed = False
    chats = {"target": ScriptedChat(target), "evaluator": ScriptedChat(lambda m, t: {"correct": True})}

    def open_(run_id=None):
        config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 5}, concurrency=1)
        return open_run(ToyProtocol(), config, run_id=run_id, console=Console(quiet=True), chat_overrides=chats)

    run = open_()
    try:
        with pytest.raises(RunInterrupted) as interrupted:
            execute(ToyProtocol(), run, skip_preflight=True)
        assert (interrupted.value.unfinished, interrupted.value.total) == (4, 5)
        # the request in flight finished; the judge request after it was refused; q2..q4 never started
        assert [last_text(m) for m, _ in chats["target"].calls] == ["question 0", "question 1"]
        assert len(chats["evaluator"].calls) == 1
        summary = json.loads((run.run_dir / "summary.json").read_text())
        assert summary["status_counts"] == {"ok": 1} and summary["interrupted"]["unfinished_units"] == 4
        assert (run.run_dir / "report.md").exists()
    finally:
        stop.clear()
    resumed = True
    summary = execute(ToyProtocol(), open_(run.run_dir.name), skip_preflight=True)
    assert summary["status_counts"] == {"ok": 5}
    # q1's answer was saved before Ctrl-C: the resume asked only for the judge
    assert [last_text(m) for m, _ in chats["target"].calls].count("question 1") == 1


def test_a_finished_units_record_is_saved_by_its_worker_so_a_ctrl_c_in_the_main_thread_cannot_drop_it(
    tmp_path, monkeypatch
):
    """The main thread may be interrupted between taking a record and handling it (the signal handler raises
    there); the record must already be on disk by then (CI once lost unit 0 of an interrupted run this way)."""
    import threading

    from rich.console import Console

    from dyneval.runtime.runner import execute, open_run
    from dyneval.state.config import RunConfig
    from dyneval.stores.results import ResultStore
    from tests.fakes import ScriptedChat, last_text
    from tests.toy_protocol import ToyProtocol

    saved_by = []
    original = ResultStore.append

    def append(self, record):
        saved_by.append(threading.current_thread().name)
        original(self, record)

    monkeypatch.setattr(ResultStore, "append", append)
    chats = {
        "target": ScriptedChat(lambda m, t: "answer to " + last_text(m)),
        "evaluator": ScriptedChat(lambda m, t: {"correct": True}),
    }
    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 3}, concurrency=2)
    run = open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True), chat_overrides=chats)
    execute(ToyProtocol(), run, skip_preflight=True)
    assert len(saved_by) == 3 and all(name.startswith("unit-") for name in saved_by), saved_by
