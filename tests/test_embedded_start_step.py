"""The embedded model's start is a step the run's console shows: it says what starts before the seconds of waiting
begin (a spinner on a terminal, a line elsewhere) and how long it took, and a role's model is opened only at that
role's first call."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from dyneval.runtime import embedded
from dyneval.runtime.events import EventLog
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.protocol import Run
from dyneval.runtime.services import Services
from dyneval.state.config import RunConfig


@pytest.fixture
def starter(monkeypatch):
    """Stands in for the llama.cpp server's start; records what the console showed when it was called."""
    calls: list[str] = []
    monkeypatch.delenv("DYNEVAL_EMBEDDED_URL", raising=False)
    monkeypatch.setattr(embedded, "_server", None)
    box = SimpleNamespace(calls=calls, buffer=None)

    def start(*args, **kwargs):
        calls.append(box.buffer.getvalue() if box.buffer else "")
        return SimpleNamespace(
            base_url="http://127.0.0.1:9/v1", process=SimpleNamespace(poll=lambda: None), stop=lambda: None
        )

    monkeypatch.setattr(embedded, "start_server", start)
    return box


def _run(tmp_path, console: Console) -> Run:
    config = RunConfig(protocol="test", roles={"target": "local", "evaluator": "judge@http://127.0.0.1:9/v1"})
    services = Services(config=config, run_dir=tmp_path, events=EventLog(tmp_path / "events.jsonl"))
    return Run(config=config, run_dir=tmp_path, services=services, console=console, executor=ExecutorChoice())


def test_the_start_is_announced_before_the_wait_and_timed_after_it(tmp_path, starter):
    starter.buffer = io.StringIO()
    run = _run(tmp_path, Console(file=starter.buffer, width=200))
    run.services.llm("evaluator")  # another role's model: nothing starts
    assert starter.calls == []
    run.services.llm("target")
    assert len(starter.calls) == 1 and embedded.STARTING in starter.calls[0]  # shown before the start began
    lines = starter.buffer.getvalue().splitlines()
    assert lines[0] == f"{embedded.STARTING}..."
    assert lines[1].startswith(f"{embedded.STARTING}: done in ") and lines[1].endswith(" s")
    run.services.llm("target")
    assert len(starter.calls) == 1  # started once per process


def test_on_a_terminal_the_start_shows_a_spinner(tmp_path, starter):
    starter.buffer = io.StringIO()
    run = _run(tmp_path, Console(file=starter.buffer, width=200, force_terminal=True, color_system=None))
    run.services.llm("target")
    shown = starter.calls[0]
    assert f"{embedded.STARTING}..." in shown and shown.lstrip("\x1b[?25l\r").startswith(("⠋", "⠙", "⠹"))
    assert f"{embedded.STARTING}: done in " in starter.buffer.getvalue()


def test_a_quiet_console_shows_nothing(tmp_path, starter):
    """``dyneval.evaluate`` runs with a quiet console: the step prints nothing there."""
    starter.buffer = io.StringIO()
    run = _run(tmp_path, Console(file=starter.buffer, quiet=True))
    run.services.llm("target")
    assert len(starter.calls) == 1 and starter.buffer.getvalue() == ""
