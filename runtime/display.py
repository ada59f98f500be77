"""What a run shows on the console while it works: the plan table, the progress bar of the units with its live
status line, the rows of a background build, and the step that writes the summary and report.

Redrawn 4 times a second, not rich's 10 (3.5 % of the unit threads' CPU at zero endpoint latency). Every counter
is drawn once more when the units end, so the last line printed is true.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import wait
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table as RichTable

from dyneval.runtime.protocol import Protocol, Run, Unit

#: Seconds between the plain progress lines of a background build on a console that is not a terminal.
PLAIN_EVERY_S = 10.0
#: What the console says while the summary and the report are written.
WRITING = "writing summary and report…"


def print_plan(protocol: Protocol, run: Run, units: list[Unit]) -> None:
    table = RichTable(title=f"{protocol.name}: plan")
    table.add_column("role")
    table.add_column("model")
    for role in protocol.roles_in(run):
        table.add_row(role, run.services.model_label(role))
    run.console.print(table)
    run.console.print(
        f"units: {len(units)}   concurrency: {run.config.concurrency}   "
        f"expected LLM calls per unit: {protocol.expected_calls(run)}"
    )
    for unit in units[:10]:
        run.console.print(f"  {unit.id}  {json.dumps(unit.meta, ensure_ascii=False)[:100]}")
    if len(units) > 10:
        run.console.print(f"  ... and {len(units) - 10} more")


def progress_bar(run: Run) -> Progress:
    """The run's live display: a row per task with n/total, elapsed time, ETA and a status text; redrawn 4 times a
    second, not rich's 10 (3.5 % of the unit threads' CPU at zero endpoint latency)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=12),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=run.console,
        transient=False,
        refresh_per_second=4,
    )


class BackgroundRows:
    """The rows of what ``prepare()`` builds in the background (JudgeAgent's context graph): a row per build saying
    how many units wait for it, and under it a row per stage with n/total and ETA. A console that is not a terminal
    gets no live display, so it gets a plain line per unfinished stage every ``PLAIN_EVERY_S`` seconds instead."""

    def __init__(self, run: Run, progress: Progress) -> None:
        self.run, self.progress = run, progress
        self.builds: dict[int, TaskID] = {}
        self.stages: dict[tuple[int, str], TaskID] = {}
        self.printed = time.monotonic()

    def refresh(self) -> None:
        plain = not self.run.console.is_terminal and time.monotonic() - self.printed >= PLAIN_EVERY_S
        if plain:
            self.printed = time.monotonic()
        for i, job in enumerate(self.run.services.background()):
            done, n = job.future.done(), job.waiting
            waiting = f"{n} unit{'s' * (n != 1)} waiting for the {job.label}" if n and not done else ""
            if i not in self.builds:
                self.builds[i] = self.progress.add_task(job.label, total=None, status="")
            self.progress.update(  # None: left as it was
                self.builds[i], status=waiting, total=1 if done else None, completed=1 if done else None
            )
            for stage, (count, total) in job.snapshot().items():
                if (i, stage) not in self.stages:
                    self.stages[i, stage] = self.progress.add_task(f"  {stage}", total=total, status="")
                task_id = self.stages[i, stage]
                self.progress.update(task_id, total=total, completed=count)
                task = next(t for t in self.progress.tasks if t.id == task_id)
                if plain and not task.finished:
                    eta = f", ETA {int(task.time_remaining)} s" if task.time_remaining is not None else ""
                    self.run.console.print(
                        f"{job.label}: {stage} {count}/{total}{eta}" + (f" ({waiting})" if waiting else ""),
                        markup=False,
                        highlight=False,
                    )


def await_background(run: Run) -> None:
    """Wait for what ``prepare()`` (or ``custom_run()``) builds in the background, its progress shown; a failed
    build raises its error here."""
    jobs = run.services.background()
    futures = [job.future for job in jobs]
    if not all(f.done() for f in futures):
        with progress_bar(run) as progress:
            rows = BackgroundRows(run, progress)
            while wait(futures, timeout=0.5).not_done:
                rows.refresh()
            rows.refresh()
    for future in futures:
        future.result()


@contextmanager
def live_status(run: Run, progress: Progress, name: str, *, total: int, completed: int) -> Iterator[TaskID]:
    """The progress task of the units, its status line refreshed twice a second from the event log and the
    endpoints while units run: requests in flight, calls, failed attempts (retried or not), cache hits; with the
    rows of a background build and the units waiting for it (:class:`BackgroundRows`). When the units end, every
    counter is read once more, so the last line shown holds the run's final counts."""
    task = progress.add_task(name, total=total, completed=completed, status="")
    background = BackgroundRows(run, progress)
    done = threading.Event()

    def show() -> None:
        total = run.services.events.total()
        progress.update(
            task,
            status=f"in flight {run.services.in_flight()}, calls {total.calls}, "
            f"failed {total.failed_calls}, cached {total.cache_hits}",
        )
        background.refresh()

    def refresh() -> None:
        while True:
            show()
            if done.wait(0.5):
                return

    ticker = threading.Thread(target=refresh, name="progress", daemon=True)
    ticker.start()
    try:
        yield task
    finally:
        done.set()
        ticker.join()
        show()  # the final counts: the ticker's last line is up to half a second old


@contextmanager
def step(run: Run, text: str) -> Iterator[None]:
    """A step with no counts of its own (writing the summary and the report): a spinner with ``text`` on a
    terminal, else one line saying it started; either way one line saying it ended and how long it took."""
    started = time.perf_counter()
    if run.console.is_terminal:
        with run.console.status(text):
            yield
    else:
        run.console.print(text, markup=False, highlight=False)
        yield
    run.console.print(
        f"{text.rstrip('…')}: done in {time.perf_counter() - started:.1f} s", markup=False, highlight=False
    )
