"""``dyneval --calibration LABELS --run RUN``: write a finished run's judge-calibrated metrics where people read them.

``summary.json`` gains ``metrics["judge_calibration"]`` (:func:`results.calibration.run.calibration_entry`), and
the run's report (``report.md`` / ``report.html``) is rendered again from the run folder as the run's end rendered
it, so its headline table shows each judge-based metric's "judge-calibrated (n labels)" row right below the raw
one (:func:`results.view.data.headline_metrics`); so do the viewer page, the run index of its folder, every later
reading of the summary and the console. Calibrating again with other labels replaces the entry.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rich.console import Console

from dyneval.results.calibration.run import calibration_entry
from dyneval.results.finish import write_run_report
from dyneval.results.headline import headlines, value_text
from dyneval.results.view.adapters import bank_location
from dyneval.results.view.index import write_index
from dyneval.results.view.page import write_view
from dyneval.runtime.events import EventLog
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.protocol import Run, protocol_class
from dyneval.runtime.services import Services
from dyneval.state.errors import InputError
from dyneval.stores.files import write_atomic
from dyneval.stores.rundir import SUMMARY, RunDir


def run_folder(ref: str, out: str) -> RunDir:
    """A run given by its id under ``out`` or as a folder; ``InputError`` naming ``--run`` when there is none or
    it has not finished (no ``summary.json``)."""
    path = Path(ref) if Path(ref).is_dir() else Path(out) / ref
    run = RunDir(path, "--run")
    if not run.has(SUMMARY):
        raise InputError(
            f"no finished run {ref!r} (a folder with summary.json, or a run id under {out})", setting="--run"
        )
    return run


def render_report(run: RunDir, summary: dict[str, object]) -> None:
    """The run's report rendered again from its folder (its configuration, records and ``summary``): no model is
    called (the events are not read, the services open nothing until asked)."""
    config = run.run_config()
    services = Services(config=config, run_dir=run.path, events=EventLog(None))
    quiet = Console(quiet=True)
    live = Run(config=config, run_dir=run.path, services=services, console=quiet, executor=ExecutorChoice())
    write_run_report(protocol_class(run.protocol)(), live, summary, run.records())


def calibrate(run: RunDir, labels: Path, console: Console) -> None:
    """Compute the calibration of ``run`` with ``labels`` and write it (module docstring)."""
    entry = calibration_entry(run, labels)
    path = run.path / SUMMARY
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary.setdefault("metrics", {})["judge_calibration"] = entry
    write_atomic(path, json.dumps(summary, indent=2, default=str))
    say = partial(console.print, markup=False, highlight=False, soft_wrap=True)
    if run.protocol == "llmeval" and bank_location(run.path, run.config()) is None:  # its report reads the bank
        say(
            f"report: not rendered again (its question bank is not where run {run.name} kept it); summary.json, "
            "the viewer and the run index hold the calibrated rows"
        )
    else:
        render_report(run, summary)
        say(f"report: {run.path / 'report.md'}")
    write_view(run.path)
    write_index(run.path.parent)
    rows = headlines(run.protocol, summary["metrics"])
    calibrated = {h.path for h in rows if h.metric.startswith("judge_calibration.")}
    for h in rows:
        if h.path in calibrated or f"judge_calibration.{h.path}.calibrated" in calibrated:
            say(f"{h.label}: {value_text(h)}")
