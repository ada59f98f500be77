"""The one seam between the run engine and the results: a finished (or stopped) run handed over to be written.

:func:`finish_run` turns the unit records of a run into ``summary.json``, ``report.md``/``report.html``, the run's
viewer page and the index of its ``--out`` folder, then prints the console summary. The engine
(:mod:`runtime.runner`) imports this module and nothing else of :mod:`results`.
"""

from __future__ import annotations

import json
from typing import Any

from dyneval.results.console_summary import render_summary
from dyneval.results.report import preload_plotting, write_report
from dyneval.results.summary import build_summary, header_blocks
from dyneval.results.view.index import write_index
from dyneval.results.view.page import write_view
from dyneval.runtime.display import WRITING, step
from dyneval.runtime.protocol import Protocol, Run
from dyneval.runtime.trials import first_trials
from dyneval.stores.files import write_atomic

__all__ = ["finish_run", "preload_plotting", "write_run_report"]


def write_run_report(protocol: Protocol, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """``report.md`` / ``report.html`` of a run from its summary and records: the run's header, then the protocol's
    report (whose headline table shows the judge-calibrated rows of a calibrated run beside the raw ones)."""
    warning = summary.get("smoke_test_warning")
    blocks = [
        *header_blocks(protocol, run, summary, warning, records),
        *protocol.report(run, summary, first_trials(records)),  # what its metrics were computed on
    ]
    write_report(run.run_dir, f"{protocol.name} run {run.run_dir.name}", blocks)


def finish_run(
    protocol: Protocol,
    run: Run,
    records: list[dict[str, Any]],
    *,
    wall_s: float,
    warning: str | None,
    interrupted: dict[str, Any] | None,
    notes: list[str],
    missing: list[str],
) -> dict[str, Any]:
    """Write summary.json, the report, the viewer and the index from ``records`` (in plan order; the caller keeps
    no other reference to them, so rendering reuses their memory), shown as a step; then print the summary."""
    with step(run, WRITING):
        summary = build_summary(
            protocol,
            run,
            records,
            wall_s=wall_s,
            warning=warning,
            interrupted=interrupted,
            notes=notes,
            missing=missing,
        )
        write_atomic(run.run_dir / "summary.json", json.dumps(summary, indent=2, default=str))
        write_run_report(protocol, run, summary, records)
        del records  # not needed to render: the view reuses their memory (bench/atad_memory.py)
        write_view(run.run_dir)
        write_index(run.run_dir.parent)
    render_summary(summary, run.console)
    run.console.print(
        f"run directory: [bold]{run.run_dir}[/]  (report: {run.run_dir / 'report.md'}, "
        f"viewer: {run.run_dir / 'view.html'}, all runs: {run.run_dir.parent / 'index.html'})"
    )
    return summary
