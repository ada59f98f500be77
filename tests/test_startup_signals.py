"""Ctrl-C and SIGTERM at any moment of a command's start-up: one line and exit 130 / 143 (or the run's own exit if
it finished), never a traceback from a signal raised inside an import (a C extension then fails with
"initialization failed"), and no run folder a resume cannot continue."""

from __future__ import annotations

import importlib
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from dyneval.cli import main
from dyneval.runtime import runner
from dyneval.runtime.signals import on_stop_signal
from dyneval.runtime.stop import Terminated
from tests.standin_endpoint import StandIn

REPO = Path(__file__).resolve().parents[1]


def test_sigterm_during_an_import_lets_the_import_finish_then_stops_the_main_thread(tmp_path, monkeypatch):
    """The handler raises nothing inside the import; the signal is taken once the import has ended."""
    (tmp_path / "signalled_while_imported.py").write_text(
        "import signal\nsignal.raise_signal(signal.SIGTERM)\nfinished = True\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = signal.signal(signal.SIGTERM, on_stop_signal)
    try:
        with pytest.raises(Terminated):
            module = importlib.import_module("signalled_while_imported")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the signal comes back here, outside any import
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.modules.pop("signalled_while_imported", None)
    assert module.finished


def test_sigterm_while_the_run_folder_is_made_leaves_no_folder_and_says_so(tmp_path, monkeypatch, capsys):
    """A folder without its config.json could not be resumed (``--resume`` reads it): none is left, and the line
    offers no resume command."""
    made = runner.write_atomic

    def signalled(path: Path, text: str) -> None:
        if path.name == "config.json":
            raise Terminated
        made(path, text)

    monkeypatch.setattr(runner, "write_atomic", signalled)
    out = tmp_path / "runs"
    with StandIn() as standin:
        code = main(
            [
                "--protocol",
                "interview",
                "--limit",
                "1",
                "--target",
                standin.spec("t"),
                "--evaluator",
                standin.spec("e"),
                "--out",
                str(out),
            ]
        )
    assert code == 143
    assert capsys.readouterr().out.strip().splitlines()[-1] == "terminated (SIGTERM) before the run started"
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_at_20_random_moments_of_start_up_exits_143_without_a_traceback_and_every_run_left_resumes(tmp_path):
    """Seeded delays over the first 3 s of ``run.py --protocol interview --limit 1``: the interpreter's start-up,
    the imports, the run folder, the plan, the pre-flight and the unit. Before dyneval's first line runs the
    signal's default action ends the process, with nothing printed or made."""
    rng = random.Random(32)
    outcomes: Counter[str] = Counter()
    with StandIn() as standin:
        roles = ["--target", standin.spec("t"), "--evaluator", standin.spec("e")]
        for trial in range(20):
            out = tmp_path / f"trial{trial}"
            run = subprocess.Popen(
                [sys.executable, "run.py", "--protocol", "interview", "--limit", "1", *roles, "--out", str(out)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            time.sleep(rng.uniform(0.0, 3.0))
            run.send_signal(signal.SIGTERM)
            stdout, stderr = run.communicate(timeout=120)
            said = f"trial {trial}: exit {run.returncode}\n{stdout}\n{stderr}"
            left = [p for p in out.iterdir() if p.is_dir() and p.name != "_cache"] if out.exists() else []
            if run.returncode == -signal.SIGTERM:
                assert stdout == stderr == "" and not out.exists(), said
                outcomes["killed before dyneval ran"] += 1
                continue
            assert run.returncode in (0, 143) and stderr == "" and "Traceback" not in stdout, said
            last = stdout.strip().splitlines()[-1]
            if run.returncode == 143 and not left:
                assert last == "terminated (SIGTERM) before the run started" and not out.exists(), said
            for run_dir in left:
                if run.returncode == 143:
                    assert f"--resume {run_dir.name} " in last, said
                resumed = subprocess.run(
                    [sys.executable, "run.py", "--protocol", "interview", "--resume", run_dir.name, "--out", str(out)],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert resumed.returncode == 0, f"{said}\nresumed:\n{resumed.stdout}\n{resumed.stderr}"
            outcomes["finished" if run.returncode == 0 else "stopped, run folder left" if left else "stopped"] += 1
    print("\nSIGTERM at 20 moments of start-up:", dict(outcomes))
