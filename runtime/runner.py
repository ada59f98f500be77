"""A run's lifecycle: open, plan, pre-flight, execute, finish.

Order of a run: the caller has checked config and flags; :func:`execute` reaches
every store the run needs (``runtime.reach``), runs the
protocol's ``plan()`` (every input file, the KB), sends the pre-flight request and
keeps the run directory only once the inputs are accepted and every endpoint
answered (a refused start leaves nothing behind, ``--out`` included); then it
prints the run id and resume command. Then the protocol's ``prepare()``, which
may start a build in the background (``Services.start_background``: JudgeAgent's
context graph); the units start at once on an executor (``runtime.executors``),
the live display (``runtime.display``) shows the build's stages and the units
waiting for it, its failure ends the run with its error, and the summary
(``results.summary``) waits for it.

Resume skips final units; every other one continues from its last checkpoint, or
is re-judged from before its first ungraded verdict (``runtime.unit``).

Ctrl-C stops launching units at once and sets the stop flag (``runtime.stop``)
the call layer checks before each request; the runner waits at most
``STOP_GRACE_S`` for units in flight, writes a partial summary and report, and
raises :class:`RunInterrupted` with the resume command.
"""

from __future__ import annotations

import ctypes
import json
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel

from dyneval.results.finish import finish_run, preload_plotting
from dyneval.runtime import stop
from dyneval.runtime.agents.checks import check_agents_of_run
from dyneval.runtime.budget import check_priced
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.display import await_background, live_status, print_plan, progress_bar
from dyneval.runtime.events import EventLog
from dyneval.runtime.executors import Executor, open_session
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.library_output import LIBRARY_LOG, library_output_to
from dyneval.runtime.llm import PING_STEP
from dyneval.runtime.pricing import Pricing
from dyneval.runtime.protocol import FINAL_STATUSES, Protocol, Run, Unit
from dyneval.runtime.reach import reach_stores
from dyneval.runtime.services import Services
from dyneval.runtime.signals import signals_ignored, stop_on_signals
from dyneval.runtime.stop import RunInterrupted
from dyneval.runtime.trials import with_trials
from dyneval.state.config import RunConfig
from dyneval.state.errors import InfraError, InputError
from dyneval.stores.files import read_records, write_atomic
from dyneval.stores.results import ResultStore

#: Seconds Ctrl-C waits for units in flight (their next request is refused at once) before the partial report.
STOP_GRACE_S = 5.0

SMOKE_TEST_WARNING = (
    "The embedded SmolLM2-135M model is acting as {roles}. It is far too weak to judge other models: "
    "these results only show that the pipeline runs (a smoke test), not how good the target is."
)


def new_run_id(protocol: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    # 32 random bits: run ids name the checkpoint threads of runs that share a database (thread_id)
    return f"{stamp}-{protocol}-{secrets.token_hex(4)}"


def open_run(
    protocol: Protocol,
    config: RunConfig,
    *,
    run_id: str | None,
    console: Console,
    executor: ExecutorChoice = ExecutorChoice(),
    chat_overrides: dict[str, Any] | None = None,
    retry_sleep: Any = None,
) -> Run:
    """The run and its services; a resumed run's directory must exist, a new one is made by :func:`execute`.
    Its units run on ``executor`` (``--executor``: threads of this process unless it names Ray), whichever batch
    of the session runs them.

    A re-score (``config.rescored_from``) serves every role but the protocol's judges from its source run's log.
    """
    resumed = run_id is not None
    run_dir = Path(config.out) / (run_id or new_run_id(protocol.name))
    if resumed and not run_dir.is_dir():
        raise InputError(f"no run directory {run_dir} to resume", field="--resume")
    pricing = Pricing.for_run(config)
    events = EventLog(run_dir / "events.jsonl", pricing=pricing)
    events.load_existing()
    if config.rescored_from:
        from dyneval.runtime.replay import replay_models  # LangChain: loaded for a re-score only, not for `--help`

        chat_overrides = {
            **replay_models(Path(config.out) / config.rescored_from, protocol.judge_roles),
            **(chat_overrides or {}),
        }
    services = Services(
        config=config, run_dir=run_dir, events=events, chat_overrides=chat_overrides or {}, retry_sleep=retry_sleep
    )
    run = Run(config=config, run_dir=run_dir, services=services, console=console, executor=executor, resumed=resumed)
    called = protocol.judge_roles if config.rescored_from else protocol.roles_in(run)  # a re-score replays others
    cost_flag = (
        "--max-cost" if config.max_cost is not None else "--max-cost-per-role" if config.max_cost_per_role else None
    )
    check_priced(cost_flag, pricing, {role: services.model_label(role) for role in called})
    return run


def resume_command(protocol: Protocol, run: Run) -> str:
    """The command that continues ``run``, spelled as this one was started: ``python run.py`` in the repository,
    else the installed ``dyneval`` command (also for the Python API)."""
    command = ["python", "run.py"] if Path(sys.argv[0]).name == "run.py" else ["dyneval"]
    return shlex.join([*command, "--protocol", protocol.name, "--resume", run.run_dir.name, "--out", run.config.out])


@contextmanager
def _kept_only_if_accepted(run: Run) -> Iterator[list[Path]]:
    """Make the run directory; remove it again if an ``InputError`` rejects the inputs before any request, or the
    pre-flight refuses the start (:class:`PreflightRefused`: its pings are all that was sent).

    Every folder this call creates goes (``--out`` too, if it did not exist), so a
    refused start leaves nothing behind; so does Ctrl-C or SIGTERM while the folder is
    made (from its ``config.json`` on, a resume continues it). The directory exists before ``plan()``
    only because the protocols' other modes (``custom_run``) write into it, and
    before the pre-flight because the event log records its pings. Yields the
    folders it made, outermost last.
    """
    made = [p for p in (run.run_dir, *run.run_dir.parents) if not p.exists()]
    try:
        try:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(run.run_dir / "config.json", json.dumps(run.config.masked(), indent=2))
        except OSError as exc:
            raise InputError(
                f"cannot create the run directory {run.run_dir}: {exc.strerror or exc}", field="--out"
            ) from None
        except KeyboardInterrupt:  # a folder without its config.json could not be resumed: none is left
            _remove_made(made)
            raise
        yield made
    except InputError as exc:
        if isinstance(exc, PreflightRefused) or run.services.events.total().calls == 0:
            _remove_made(made)
        raise


def _remove_made(made: list[Path]) -> None:
    """Remove the folders :func:`_kept_only_if_accepted` made (``--out`` too if this call created it); a resumed
    run's own folder, made earlier, stays."""
    if made:
        shutil.rmtree(made[-1], ignore_errors=True)


def _saved_units(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The units written when the run started, and what is wrong with the file (None if whole)."""
    problems: list[str] = []
    saved = list(read_records(path, problems))
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        problems.append(f"{path.name}: its last line is cut short")
    if not problems and any(set(u) != {"id", "input", "meta"} for u in saved):
        problems.append(f"{path.name}: a line is not a unit (id, input, meta)")
    return saved, (problems[0] if problems else None)


def plan_units(protocol: Protocol, run: Run, notes: list[str]) -> list[Unit]:
    """Units of the run; a resumed run reuses the list written (atomically) when it started.

    A ``units.jsonl`` a kill cut (written by an older version) is planned again from
    the inputs, provided its whole lines agree with the new plan.
    """
    path = run.run_dir / "units.jsonl"
    saved, problem = _saved_units(path) if run.resumed and path.exists() else ([], None)
    if saved and problem is None:
        return [Unit(**u) for u in saved]
    units = protocol.plan(run)
    if run.config.limit is not None:
        units = protocol.within_limit(units, run.config.limit)
    units = with_trials(units, run.config.trials)
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"{protocol.name}: plan produced duplicate unit ids")

    def line(unit: Unit) -> str:
        return json.dumps(asdict(unit), ensure_ascii=False, default=str)

    if problem:
        whole = [u for u in saved if set(u) == {"id", "input", "meta"}]
        if [json.loads(line(u)) for u in units[: len(whole)]] != whole:
            raise InputError(
                f"{problem}, and the inputs no longer give the same units: the run cannot be resumed", file=str(path)
            )
        notes.append(
            f"{problem}; planned again from the inputs ({len(units)} units; the {len(whole)} whole lines agree)"
        )
    write_atomic(path, (line(u) + "\n" for u in units))  # a line at a time: the plan's text is never whole
    return units


class PreflightRefused(InputError):
    """A model's endpoint failed the pre-flight request after the retries units get: the run does not start."""


def preflight(protocol: Protocol, run: Run) -> None:
    """One cheap request per distinct model before any real tokens are spent (the models at once), retried as a
    unit's requests are (backoff, the spec's ``max_retries``); a failure is :class:`PreflightRefused`."""
    from dyneval.prompts import load_prompt  # LangChain's prompt classes load with the run, not for `dyneval --help`

    first_role: dict[str, str] = {}
    for role in protocol.roles_in(run):
        if getattr(run.services.chat_overrides.get(role), "replay_of", None):
            continue  # a re-score's replayed role: no endpoint to ping
        if run.services.spec(role).provider == "agent":
            continue  # an agent target was imported at start-up; a ping would be a turn in its store
        first_role.setdefault(run.services.model_label(role), role)

    def ping(label_role: tuple[str, str]) -> None:
        label, role = label_role
        started = time.perf_counter()
        try:
            run.services.llm(role).text(load_prompt("common/ping").render(), step=PING_STEP)
        except (InfraError, InputError) as exc:
            raise PreflightRefused(f"endpoint for role {role} ({label}) does not answer: {exc}") from None
        if run.services.spec(role).provider == "embedded":
            run.console.print(
                f"{label} runs on this machine's CPU: a one-word reply took "
                f"{time.perf_counter() - started:.1f} s (server start included), a long answer takes "
                "tens of seconds, so a unit can take minutes; the ETA follows the finished units",
                style="yellow",
                markup=False,
                highlight=False,
            )

    parallel_map(ping, first_role.items(), workers=len(first_role))


def warn_if_smoke_test(protocol: Protocol, run: Run) -> str | None:
    called = protocol.roles_in(run)
    roles = [r for r in run.config.embedded_judges() if r in called and r not in run.services.chat_overrides]
    if not roles:
        return None
    text = SMOKE_TEST_WARNING.format(roles=", ".join(roles))
    run.console.print(Panel(text, title="smoke test only", style="bold yellow"))
    return text


def execute(
    protocol: Protocol,
    run: Run,
    *,
    dry_run: bool = False,
    skip_preflight: bool = False,
) -> dict[str, Any]:
    """Validate the inputs, then run every unfinished unit concurrently on the run's executor (``run.executor``)
    and write summary.json and the report. A mode of the protocol that has no units (:meth:`.Protocol.local_mode`)
    refuses ``--executor ray`` before anything is made. Libraries' warnings go to the run's ``library.log``."""
    with library_output_to(run.run_dir / LIBRARY_LOG):
        return _execute(protocol, run, dry_run=dry_run, skip_preflight=skip_preflight)


def _execute(protocol: Protocol, run: Run, *, dry_run: bool, skip_preflight: bool) -> dict[str, Any]:
    if run.executor.name != "threads" and (flag := protocol.local_mode(run)):
        raise InputError(
            f"{flag} works in this process only, not on Ray runners: leave out --executor ray",
            field="--executor",
        )
    check_run_options(protocol, run)
    run.executor.check(run.config)
    reach_stores(protocol, run)  # before the run folder: a store out of reach leaves nothing behind
    stop.clear()
    notes: list[str] = list(run.services.events.notes)
    with _kept_only_if_accepted(run) as made:
        if protocol.custom_run(run):
            with stop_on_signals():
                await_background(run)  # e.g. JudgeAgent's --build-kb-only
            if protocol.leaves_no_run(run):
                _remove_made(made)
                return {}
            summary = run.run_dir / "summary.json"  # the summary a mode wrote (atad --evaluate), if it wrote one
            return json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else {}
        units = plan_units(protocol, run, notes)
        plan = [u.id for u in units]
        if not (dry_run or skip_preflight):
            with stop_on_signals():
                run.console.print("checking that every model answers (one short request each)…", highlight=False)
                preflight(protocol, run)
    resume = resume_command(protocol, run)
    if not dry_run:
        run.console.print(f"run [bold]{run.run_dir.name}[/]   resume with: {resume}", highlight=False, soft_wrap=True)
    for note in run.services.ceiling_notes(protocol.roles_in(run)):
        run.console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if dry_run:
        print_plan(protocol, run, units)
        _remove_made(made)  # a plan leaves no run folder behind
        return {}
    warning = warn_if_smoke_test(protocol, run)
    results = ResultStore(run.run_dir / "results.jsonl")
    wall_started = time.perf_counter()
    try:
        with stop_on_signals(), open_session(protocol, run) as session:
            # the graph's modules load before prepare() starts its background work, not beside it: JudgeAgent's
            # graph import on this thread beside its context graph's torch import took 1.3 s instead of 0.2 s
            builder = protocol.builder()
            protocol.prepare(run, units)
            finished = {uid for uid, r in results.latest().items() if r.get("status") in FINAL_STATUSES}
            todo = [u for u in units if u.id not in finished]
            del units  # the units to run are todo's, handed over to the executor by _run_all
            if run.executor.name != "threads":
                await_background(run)  # other processes cannot wait for this one's build: it ends first
            with session.units(builder, protocol.context(run), results) as units_on:
                _run_all(protocol, run, units_on, todo, already=len(plan) - len(todo))
            await_background(run)  # what prepare() started and no unit needed (its statistics, its errors)
    except (KeyboardInterrupt, stop.StopRequested) as exc:  # Ctrl-C, SIGTERM, or the budget is spent (runtime.budget)
        budget = run.services.budget.reached if run.services.budget else None
        with signals_ignored():
            stop.request_stop()
            latest = results.latest()
            unfinished = sum(latest.get(uid, {}).get("status") not in FINAL_STATUSES for uid in plan)
            terminated = isinstance(exc, stop.Terminated)
            interrupted = {
                "unfinished_units": unfinished,
                "resume": resume,
                "budget": budget,
                "signal": "SIGTERM" if terminated else None if budget else "SIGINT",
            }
            with stop.refused_as_infra_error():
                _finish(protocol, run, plan, results, notes, wall_started, warning, interrupted)
        if budget and not isinstance(exc, KeyboardInterrupt):
            stop.clear()  # the spent budget refuses this run's requests still; an app's next call goes out
        raise RunInterrupted(run.run_dir.name, resume, unfinished, len(plan), budget, terminated=terminated) from None
    with stop.refused_as_infra_error():  # a summary's call the budget refuses falls back as a failed call would
        return _finish(protocol, run, plan, results, notes, wall_started, warning, None)


def check_run_options(protocol: Protocol, run: Run) -> None:
    """``--trials`` only where the protocol's units have a binary verdict and no cached reply stands in for a
    trial; ``--state-check`` and ``--executor ray`` only with agents that allow them (:mod:`runtime.agents.checks`)."""
    if run.config.trials > 1:
        if why := protocol.trials_refused(run):
            raise InputError(why, field="--trials")
        if run.config.stores.cache:
            raise InputError(
                "--trials repeats each unit to see whether its verdicts change: --cache would give every trial "
                "the first one's replies; leave out --cache",
                field="--cache",
            )
    check_agents_of_run(protocol.subjects(run), run.config, run.executor.name)


def _run_all(protocol: Protocol, run: Run, executor: Executor, todo: list[Unit], already: int) -> None:
    """Run ``todo`` on ``executor`` (which takes the list's units over: it is left empty), showing each unit as it
    ends (its record is saved by then).

    Ctrl-C (or any exception reaching this loop) stops the executor: nothing more is launched, units in flight
    get ``STOP_GRACE_S`` to end (their next request is refused), then this returns by re-raising.
    """
    with (
        progress_bar(run) as progress,
        live_status(run, progress, protocol.name, total=len(todo) + already, completed=already) as task,
    ):

        def keep(record: dict[str, Any]) -> None:
            """Show a unit that ended."""
            if record["status"] == "interrupted":
                return
            progress.update(task, advance=1)
            if record["status"] not in FINAL_STATUSES:
                run.console.print(
                    f"{record['unit_id']} {record['status']}: {record.get('error', '')}",
                    style="red" if record["status"] != "ungraded" else "yellow",
                    markup=False,
                    highlight=False,
                )

        try:
            executor.submit(todo)
            todo.clear()  # handed over: the executor holds a unit until it starts, so memory is flat in the plan
            preload_plotting()  # imported while the first units wait on the endpoint, neither before nor after them
            for record in executor.ended():
                keep(record)
            if stop.stopped():  # the budget was spent as the last units ran: some of them may not have ended
                raise stop.StopRequested("no request is sent after the stop")
        except BaseException as exc:
            with signals_ignored():
                stop.request_stop()
                for record in executor.stop(STOP_GRACE_S):
                    keep(record)
            if not isinstance(exc, KeyboardInterrupt) and not executor.working():
                stop.clear()  # not Ctrl-C and nothing left running: later calls in this process may go on
            raise


def _finish(
    protocol: Protocol,
    run: Run,
    plan: list[str],
    results: ResultStore,
    notes: list[str],
    wall_started: float,
    warning: str | None,
    interrupted: dict[str, Any] | None,
) -> dict[str, Any]:
    """Write summary.json and the report from the records so far (a partial one after Ctrl-C), shown as a step."""
    _return_free_memory()
    latest = results.latest()
    # the plan against the records, whatever the executor: a run that ended (not stopped) with a planned unit
    # that has no record lost it somewhere; it is counted and named, never left out of the denominator quietly
    missing = [] if interrupted else [uid for uid in plan if uid not in latest]
    if missing:
        notes.append(
            f"{len(missing)} of {len(plan)} planned units have no record ({_listed(missing)}): the "
            "executor lost them; resume runs them"
        )
    notes = list(dict.fromkeys([*notes, *results.notes, *run.services.events.notes]))
    for note in notes:
        run.console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    # popped, so that only the results hold the records while the report is rendered (bench/atad_memory.py)
    return finish_run(
        protocol,
        run,
        [latest.pop(uid) for uid in plan if uid in latest],
        wall_s=time.perf_counter() - wall_started,
        warning=warning,
        interrupted=interrupted,
        notes=notes,
        missing=missing,
    )


def _return_free_memory() -> None:
    """Give the pages the allocator holds free back to the system (glibc's ``malloc_trim``; elsewhere nothing):
    the units' memory, freed as they ended, would otherwise stay in the process beside the records the summary
    reads, so the report phase would add to the run's peak instead of reusing it (bench/atad_memory.py)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # no glibc (macOS, musl): the allocator keeps its pages
        pass


def _listed(ids: list[str], shown: int = 5) -> str:
    """The first ``shown`` of ``ids``, and how many more."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more
