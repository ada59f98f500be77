"""``dyneval --calibration LABELS --run RUN``: write a finished run's judge-calibrated share where people read it.

``summary.json`` gains ``metrics["judge_calibration"]`` (:func:`results.calibration.run.calibration_entry`), so
the run's viewer page, the run index of its folder and every later reading of the summary show the two rows
"raw" and "judge-calibrated (n labels)" beside the headline metrics (:func:`results.view.data.headline_metrics`);
``calibration.md`` / ``calibration.html`` hold the run's headline table with them, and the console prints them.
Calibrating again with other labels replaces the entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from dyneval.results.calibration.run import calibration_entry
from dyneval.results.headline import headlines, interval_text, method_text, number, report_blocks
from dyneval.results.report import write_report
from dyneval.results.view.index import write_index
from dyneval.results.view.page import write_view
from dyneval.state.errors import InputError
from dyneval.stores.files import write_atomic
from dyneval.stores.rundir import SUMMARY, RunDir

REPORT = "calibration"


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


def calibrate(run: RunDir, labels: Path, console: Console) -> None:
    """Compute the calibration of ``run`` with ``labels`` and write it (module docstring)."""
    entry = calibration_entry(run, labels)
    path = run.path / SUMMARY
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary.setdefault("metrics", {})["judge_calibration"] = entry
    write_atomic(path, json.dumps(summary, indent=2, default=str))
    write_report(
        run.path,
        f"{run.protocol} run {run.name}: judge-calibrated",
        report_blocks(run.protocol, summary["metrics"]),
        name=REPORT,
    )
    write_view(run.path)
    write_index(run.path.parent)
    for h in headlines(run.protocol, {"judge_calibration": entry}):
        console.print(
            f"{h.label}: {number(h.value)} {interval_text(h.interval)} ({method_text(h.interval)})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"calibration: {run.path / (REPORT + '.md')}", markup=False, highlight=False, soft_wrap=True)
