"""The batch runner: run directory, pre-flight, concurrent units (one graph thread each), resume,
interrupt, results, summary and report.

Order of a run: the caller has checked config and flags; :func:`execute` runs the
protocol's ``plan()`` (every input file, the KB), sends the pre-flight request and
keeps the run directory only once the inputs are accepted and every endpoint
answered (a refused start leaves nothing behind, ``--out`` included); then it
prints the run id and resume command. Then the protocol's ``prepare()``, which
may start a build in the background (``Services.start_background``: JudgeAgent's
context graph); the units start at once, the live display shows the build's
stages and the units waiting for it, its failure ends the run with its error,
and the summary waits for it.

A unit is final only when its graph reached END (no task pending in its latest
checkpoint: ``snapshot.next`` is not enough, LangGraph leaves out of it a task
whose writes are saved while the step's next checkpoint is not) and its record
says ``ok`` or ``model_error``. Resume skips final units; every other one
continues from its last checkpoint (or starts, if it never checkpointed), so
infrastructure errors are tried again. A unit that reached END with ungraded
verdicts (``Protocol.ungraded``) is recorded as ``ungraded``; resume re-judges it
from the checkpoint just before its first ungraded verdict: the runner walks the
thread's checkpoint lineage (``get_state_history``), finds the earliest
checkpoint whose values hold an ungraded verdict and invokes the graph from that
checkpoint's parent, so LangGraph forks the thread there: the judging node runs
again, everything before it is kept.

Ctrl-C stops launching units at once and sets the stop flag (``runtime.stop``)
the call layer checks before each request; the runner waits at most
``STOP_GRACE_S`` for units in flight, writes a partial summary and report, and
raises :class:`RunInterrupted` with the resume command.
"""

from __future__ import annotations

import json
import queue
import secrets
import shlex
import shutil
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.panel import Panel
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table as RichTable

from dyneval.runtime import stop
from dyneval.runtime.stop import RunInterrupted
from dyneval.runtime.budget import check_priced
from dyneval.runtime.events import EventLog, Usage, usd
from dyneval.runtime.pricing import Pricing
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.llm import PING_STEP, is_endpoint_fault
from dyneval.runtime.protocol import FINAL_STATUSES, Protocol, Run, Unit
from dyneval.runtime.rescore import (DIVERGED, ReplayMissing, report_text as rescore_text,
                                     summary_fields as rescore_fields)
from dyneval.runtime.report import Heading, Table, Text, preload_plotting, write_report
from dyneval.runtime.services import Background, Services
from dyneval.runtime.view import write_view
from dyneval.runtime.view.adapters import adapter, leaves
from dyneval.runtime.view.data import headline_metrics
from dyneval.state.config import ROLES, RunConfig
from dyneval.state.errors import InfraError, InputError, ModelError
from dyneval.stores.checkpoints import open_checkpointer
from dyneval.stores.files import read_records, write_atomic
from dyneval.stores.results import ResultStore

#: Seconds Ctrl-C waits for units in flight (their next request is refused at once) before the partial report.
STOP_GRACE_S = 5.0

SMOKE_TEST_WARNING = (
    "The embedded SmolLM2-135M model is acting as {roles}. It is far too weak to judge other models: "
    "these results only show that the pipeline runs (a smoke test), not how good the target is."
)


def new_run_id(protocol: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    # 32 random bits: run ids name the checkpoint threads of runs that share a database (thread_id)
    return f"{stamp}-{protocol}-{secrets.token_hex(4)}"


def open_run(protocol: Protocol, config: RunConfig, *, run_id: str | None, console: Console,
             chat_overrides: dict[str, Any] | None = None, retry_sleep: Any = None) -> Run:
    """The run and its services; a resumed run's directory must exist, a new one is made by :func:`execute`.

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

        chat_overrides = {**replay_models(Path(config.out) / config.rescored_from, protocol.judge_roles),
                          **(chat_overrides or {})}
    services = Services(config=config, run_dir=run_dir, events=events, chat_overrides=chat_overrides or {},
                        retry_sleep=retry_sleep)
    called = protocol.judge_roles if config.rescored_from else protocol.roles  # a re-score's others are replayed
    cost_flag = "--max-cost" if config.max_cost is not None else "--max-cost-per-role" if config.max_cost_per_role \
        else None
    check_priced(cost_flag, pricing, {role: services.model_label(role) for role in called})
    return Run(config=config, run_dir=run_dir, services=services, console=console, resumed=resumed)


def resume_command(protocol: Protocol, run: Run) -> str:
    """The command that continues ``run``, spelled as this one was started: ``python run.py`` in the repository,
    else the installed ``dyneval`` command (also for the Python API)."""
    command = ["python", "run.py"] if Path(sys.argv[0]).name == "run.py" else ["dyneval"]
    return shlex.join([*command, "--protocol", protocol.name, "--resume", run.run_dir.name,
                       "--out", run.config.out])


@contextmanager
def _kept_only_if_accepted(run: Run) -> Iterator[list[Path]]:
    """Make the run directory; remove it again if an ``InputError`` rejects the inputs before any request, or the
    pre-flight refuses the start (:class:`PreflightRefused`: its pings are all that was sent).

    Every folder this call creates goes (``--out`` too, if it did not exist), so a
    refused start leaves nothing behind. The directory exists before ``plan()``
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
            raise InputError(f"cannot create the run directory {run.run_dir}: {exc.strerror or exc}",
                             field="--out") from None
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
        units = units[: run.config.limit]
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"{protocol.name}: plan produced duplicate unit ids")
    planned = [json.loads(json.dumps(asdict(u), ensure_ascii=False, default=str)) for u in units]
    if problem:
        whole = [u for u in saved if set(u) == {"id", "input", "meta"}]
        if planned[: len(whole)] != whole:
            raise InputError(f"{problem}, and the inputs no longer give the same units: the run cannot be resumed",
                             file=str(path))
        notes.append(f"{problem}; planned again from the inputs ({len(units)} units; the {len(whole)} whole "
                     "lines agree)")
    write_atomic(path, "".join(json.dumps(u, ensure_ascii=False) + "\n" for u in planned))
    return units


def print_plan(protocol: Protocol, run: Run, units: list[Unit]) -> None:
    table = RichTable(title=f"{protocol.name}: plan")
    table.add_column("role")
    table.add_column("model")
    for role in protocol.roles:
        table.add_row(role, run.services.model_label(role))
    run.console.print(table)
    run.console.print(f"units: {len(units)}   concurrency: {run.config.concurrency}   "
                      f"expected LLM calls per unit: {protocol.expected_calls(run)}")
    for unit in units[:10]:
        run.console.print(f"  {unit.id}  {json.dumps(unit.meta, ensure_ascii=False)[:100]}")
    if len(units) > 10:
        run.console.print(f"  ... and {len(units) - 10} more")


class PreflightRefused(InputError):
    """A model's endpoint failed the pre-flight request after the retries units get: the run does not start."""


def preflight(protocol: Protocol, run: Run) -> None:
    """One cheap request per distinct model before any real tokens are spent (the models at once), retried as a
    unit's requests are (backoff, the spec's ``max_retries``); a failure is :class:`PreflightRefused`."""
    from dyneval.prompts import load_prompt  # LangChain's prompt classes load with the run, not for `dyneval --help`

    first_role: dict[str, str] = {}
    for role in protocol.roles:
        if getattr(run.services.chat_overrides.get(role), "replay_of", None):
            continue  # a re-score's replayed role: no endpoint to ping
        first_role.setdefault(run.services.model_label(role), role)

    def ping(label_role: tuple[str, str]) -> None:
        label, role = label_role
        started = time.perf_counter()
        try:
            run.services.llm(role).text(load_prompt("common/ping").render(), step=PING_STEP)
        except (InfraError, InputError) as exc:
            raise PreflightRefused(f"endpoint for role {role} ({label}) does not answer: {exc}") from None
        if run.services.spec(role).provider == "embedded":
            run.console.print(f"{label} runs on this machine's CPU: a one-word reply took "
                              f"{time.perf_counter() - started:.1f} s (server start included), a long answer takes "
                              "tens of seconds, so a unit can take minutes; the ETA follows the finished units",
                              style="yellow", markup=False, highlight=False)

    parallel_map(ping, first_role.items(), workers=len(first_role))


def warn_if_smoke_test(protocol: Protocol, run: Run) -> str | None:
    roles = [r for r in run.config.embedded_judges() if r in protocol.roles and r not in run.services.chat_overrides]
    if not roles:
        return None
    text = SMOKE_TEST_WARNING.format(roles=", ".join(roles))
    run.console.print(Panel(text, title="smoke test only", style="bold yellow"))
    return text


def _reached_end(snapshot: Any) -> bool:
    """The thread has a checkpoint and no task pending in it (finished, or saved but not yet committed)."""
    return snapshot.metadata is not None and not snapshot.tasks


def _before_first_ungraded(protocol: Protocol, graph: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint config to fork from to re-judge: the parent of the earliest ungraded checkpoint.

    Walks the thread's current lineage only (head, then parents), not the
    branches earlier re-judgements left behind.
    """
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in graph.get_state_history(config)}
    snapshot, earliest = graph.get_state(config), None
    while snapshot is not None:
        if protocol.ungraded(dict(snapshot.values)) > 0:
            earliest = snapshot
        parent = snapshot.parent_config
        snapshot = by_id.get(parent["configurable"]["checkpoint_id"]) if parent else None
    return earliest.parent_config if earliest is not None else None


_DONE = object()


def thread_id(run: Run, unit: Unit, graph: Any) -> str:
    """The checkpoint thread of ``unit`` in ``run``: ``RUN_ID/UNIT_ID``, so runs sharing one PostgreSQL database (or
    one SQLite file) never continue each other's threads. A run directory made before run-scoped threads keeps
    its units' threads under their bare unit ids in its own SQLite file: a resume continues those (read, never
    migrated); a database shared with other runs is never searched for bare ids."""
    scoped = f"{run.run_dir.name}/{unit.id}"
    if run.resumed and not run.config.stores.postgres_dsn and \
            graph.get_state({"configurable": {"thread_id": scoped}}).metadata is None and \
            graph.get_state({"configurable": {"thread_id": unit.id}}).metadata is not None:
        return unit.id
    return scoped


def run_unit(protocol: Protocol, run: Run, graph: Any, unit: Unit, context: Any) -> dict[str, Any]:
    """Run (continue, or re-judge) one unit to END and return its record (status ``interrupted`` after Ctrl-C)."""
    started = time.perf_counter()
    record: dict[str, Any] = {"unit_id": unit.id, "meta": unit.meta}
    try:
        # the event log files each call under the unit id, not the thread id (runtime.llm.current_unit)
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id(run, unit, graph), "unit_id": unit.id},
                                  "recursion_limit": 200}
        snapshot = graph.get_state(config)
        start = config
        if snapshot.metadata is None:
            payload: Any = unit.input  # never checkpointed
        elif not _reached_end(snapshot):
            payload = None  # continue from the last checkpoint, with the writes already saved in it
        elif protocol.ungraded(dict(snapshot.values)) and (fork := _before_first_ungraded(protocol, graph, config)):
            payload, start = None, {**config, "configurable": fork["configurable"]}
        else:
            payload = _DONE  # reached END earlier; only its record was missing
        while payload is not _DONE:
            # "updates": the node's own writes, nothing to build; the state is read back with get_state. Not "custom"
            # (or "messages"): with either, LangGraph runs even a step's single node on a pool thread with a
            # waiter future, never in this thread (fewer threads; no calls/s gain measured, `bench.revisions`)
            graph.invoke(payload, start, context=context, stream_mode="updates")
            start = config  # after a fork the thread's head is the new branch
            snapshot = graph.get_state(config)
            pending = [i for task in snapshot.tasks for i in task.interrupts]
            if not pending:
                break
            from langgraph.types import Command  # langgraph is loaded with the graph, not for `dyneval --help`

            payload = Command(resume=protocol.on_interrupt(run, unit, pending[0].value))
        snapshot = graph.get_state(config)
        if not _reached_end(snapshot):
            raise RuntimeError(f"the graph stopped before END (next: {snapshot.next})")
        values = dict(snapshot.values)
        ungraded = protocol.ungraded(values)
        record.update(status="ungraded" if ungraded else "ok", ungraded_verdicts=ungraded,
                      **protocol.result(unit, values))
    except stop.StopRequested:
        record.update(status="interrupted")
    except ReplayMissing as exc:
        record.update(status=DIVERGED, error=str(exc))
    except ModelError as exc:
        record.update(status="model_error", error=str(exc))
    except InfraError as exc:
        record.update(status="infra_error", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a failed unit is recorded and the run goes on
        status = "infra_error" if is_endpoint_fault(exc) else "error"
        record.update(status=status, error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc(limit=6))
    record["wall_s"] = round(time.perf_counter() - started, 3)
    record["usage"] = run.services.events.usage(unit.id).as_dict()
    return record


def execute(protocol: Protocol, run: Run, *, dry_run: bool = False, skip_preflight: bool = False) -> dict[str, Any]:
    """Validate the inputs, then run every unfinished unit concurrently and write summary.json and the report."""
    stop.clear()
    notes: list[str] = list(run.services.events.notes)
    with _kept_only_if_accepted(run) as made:
        if protocol.custom_run(run):
            with _stop_on_signals():
                _await_background(run)  # e.g. JudgeAgent's --build-kb-only
            if protocol.leaves_no_run(run):
                _remove_made(made)
                return {}
            summary = run.run_dir / "summary.json"  # the summary a mode wrote (atad --evaluate), if it wrote one
            return json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else {}
        units = plan_units(protocol, run, notes)
        if not (dry_run or skip_preflight):
            with _stop_on_signals():
                preflight(protocol, run)
    resume = resume_command(protocol, run)
    if not dry_run:
        run.console.print(f"run [bold]{run.run_dir.name}[/]   resume with: {resume}", highlight=False,
                          soft_wrap=True)
    for note in run.services.ceiling_notes(protocol.roles):
        run.console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if dry_run:
        print_plan(protocol, run, units)
        _remove_made(made)  # a plan leaves no run folder behind
        return {}
    warning = warn_if_smoke_test(protocol, run)
    results = ResultStore(run.run_dir / "results.jsonl")
    wall_started = time.perf_counter()
    try:
        with _stop_on_signals():
            # the graph's modules load before prepare() starts its background work, not beside it: JudgeAgent's
            # graph import on this thread beside its context graph's torch import took 1.3 s instead of 0.2 s
            builder = protocol.builder()
            protocol.prepare(run, units)
            finished = {uid for uid, r in results.latest().items() if r.get("status") in FINAL_STATUSES}
            todo = [u for u in units if u.id not in finished]
            context = protocol.context(run)
            with open_checkpointer(run.run_dir, run.config.stores.postgres_dsn) as saver, _long_lived_heap():
                graph = builder.compile(checkpointer=saver, name=protocol.name)
                _run_all(protocol, run, graph, todo, context, results, already=len(units) - len(todo))
            _await_background(run)  # what prepare() started and no unit needed (its statistics, its errors)
    except (KeyboardInterrupt, stop.StopRequested) as exc:  # Ctrl-C, SIGTERM, or the budget is spent (runtime.budget)
        budget = run.services.budget.reached if run.services.budget else None
        with _signals_ignored():
            stop.request_stop()
            latest = results.latest()
            unfinished = sum(latest.get(u.id, {}).get("status") not in FINAL_STATUSES for u in units)
            terminated = isinstance(exc, stop.Terminated)
            interrupted = {"unfinished_units": unfinished, "resume": resume, "budget": budget,
                           "signal": "SIGTERM" if terminated else None if budget else "SIGINT"}
            with stop.refused_as_infra_error():
                _finish(protocol, run, units, results, notes, wall_started, warning, interrupted)
        raise RunInterrupted(run.run_dir.name, resume, unfinished, len(units), budget,
                             terminated=terminated) from None
    with stop.refused_as_infra_error():  # a summary's call the budget refuses falls back as a failed call would
        return _finish(protocol, run, units, results, notes, wall_started, warning, None)


@contextmanager
def _long_lived_heap() -> Iterator[None]:
    """While the units run, the cyclic collector leaves alone what is loaded by then (modules, classes, clients,
    the graph), which lives until the process ends (``gc.freeze``): six full collections over it took 0.5 s of a
    6-second, 1150-call ATAD run at zero latency. With the command's collection threshold, ATAD at zero latency 175 ->
    199 calls/s, CPU per call 5.8 -> 5.1 ms (``python -m bench.revisions``, median of 3). Undone after the units
    (garbage frozen meanwhile is collected later)."""
    import gc

    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _finish(protocol: Protocol, run: Run, units: list[Unit], results: ResultStore, notes: list[str],
            wall_started: float, warning: str | None, interrupted: dict[str, Any] | None) -> dict[str, Any]:
    """Write summary.json and the report from the records so far (a partial one after Ctrl-C)."""
    latest = results.latest()
    records = [latest[u.id] for u in units if u.id in latest]  # plan order, whatever order units ended in
    notes = list(dict.fromkeys([*notes, *results.notes, *run.services.events.notes]))
    for note in notes:
        run.console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    summary = build_summary(protocol, run, records, wall_s=time.perf_counter() - wall_started, warning=warning,
                            interrupted=interrupted, notes=notes)
    write_atomic(run.run_dir / "summary.json", json.dumps(summary, indent=2, default=str))
    blocks = [*header_blocks(protocol, run, summary, warning, records), *protocol.report(run, summary, records)]
    del latest, records  # not needed to render: the report and the view reuse their memory (bench/atad_memory.py)
    write_report(run.run_dir, f"{protocol.name} run {run.run_dir.name}", blocks)
    write_view(run.run_dir)
    print_summary(run, summary)
    return summary


#: The signals that stop a run, and what their handler raises: Ctrl-C, and SIGTERM (Docker, Kubernetes, systemd,
#: Slurm and Ray stop a process with it), which stops the run the same way and exits 143 instead of 130.
_STOPPING = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: stop.Terminated}


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise the stop flag in the signal handler itself, then interrupt as usual.

    So every thread's next request is refused at once, even while the main thread still waits for a pool to wind
    down (e.g. calls of ``prepare()`` run through ``parallel_map``). A signal the process ignores stays ignored,
    and a SIGTERM handler of someone else's (a host application, a server embedding the graphs) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = {sig: raised for sig, raised in _STOPPING.items() if signal.getsignal(sig) is not signal.SIG_IGN and
            (sig == signal.SIGINT or signal.getsignal(sig) in (signal.SIG_DFL, stop.on_sigterm))}

    def on_signal(signum: int, frame: Any) -> None:
        stop.request_stop()
        raise ours[signum]

    previous = {sig: signal.signal(sig, on_signal) for sig in ours}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM does not cut the bounded shutdown (partial report) short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Slots:
    """The ``limit`` worker slots of :func:`_run_all`: at most ``limit`` units work at once.

    A unit waiting for a background build gives its slot back (:class:`_UnitSlot`). A free slot goes first to a
    unit whose build is done and that waits to go on (:meth:`take`), else to a new worker thread with the next
    queued unit (``spawn``), so threads are made on demand: at most ``limit`` plus the units waiting.
    """

    def __init__(self, limit: int, queued: queue.SimpleQueue[Unit], spawn: Callable[[Unit], None]) -> None:
        self._cond = threading.Condition()
        self._free = limit
        self._resuming = 0  # units whose build is done, in take()
        self._queued, self._spawn = queued, spawn

    def start(self) -> None:
        with self._cond:
            self._hand_out()

    def _hand_out(self) -> None:
        """Wake the resuming units for the free slots; start the next units on those left (lock held). No unit
        starts after the stop."""
        self._cond.notify_all()
        while self._free > self._resuming and not stop.stopped():
            try:
                unit = self._queued.get_nowait()
            except queue.Empty:
                return
            self._free -= 1
            self._spawn(unit)

    def give_back(self) -> None:
        with self._cond:
            self._free += 1
            self._hand_out()

    def next_unit(self) -> Unit | None:
        """The next unit for a worker whose unit ended; ``None`` (its slot given back) after the stop, when a
        resuming unit needs the slot, or when no unit is left."""
        with self._cond:
            if not stop.stopped() and self._resuming <= self._free:
                try:
                    return self._queued.get_nowait()
                except queue.Empty:
                    pass
            self._free += 1
            self._hand_out()
            return None

    def take(self) -> None:
        """A slot again for a unit whose build is done; raises ``StopRequested`` within 0.2 s of the stop."""
        with self._cond:
            self._resuming += 1
            try:
                while True:
                    stop.raise_if_stopped()
                    if self._free:
                        self._free -= 1
                        return
                    self._cond.wait(0.2)
            finally:
                self._resuming -= 1


class _UnitSlot:
    """One unit's slot, given back while the unit waits for a background build (``Background.idle``) and taken
    again before it goes on; threads of the unit waiting at once share the one slot."""

    def __init__(self, slots: _Slots) -> None:
        self.slots = slots
        self.held = True  # False once the stop came while the unit waited for a slot again
        self._waits = 0
        self._lock = threading.Lock()

    @contextmanager
    def idle(self) -> Iterator[None]:
        with self._lock:
            self._waits += 1
            if self._waits == 1 and self.held:
                self.held = False
                self.slots.give_back()
        try:
            yield
        finally:
            with self._lock:
                self._waits -= 1
                if not self.held:
                    self.slots.take()
                    self.held = True


def _run_all(protocol: Protocol, run: Run, graph: Any, todo: list[Unit], context: Any, results: ResultStore,
             already: int) -> None:
    """Run ``todo`` with at most ``concurrency`` units working at once, appending each unit's record as it ends.

    A unit waiting for a background build gives its slot back, so another unit starts meanwhile (:class:`_Slots`).
    Workers take the next unit only while the stop flag is down, so Ctrl-C (or any
    exception reaching this loop) launches nothing more; units in flight get
    ``STOP_GRACE_S`` to end (their next request is refused), then this returns by
    re-raising. Workers are daemon threads: a request still blocked then does not
    hold up the process exit.
    """
    queued: queue.SimpleQueue[Unit] = queue.SimpleQueue()
    for unit in todo:
        queued.put(unit)
    ended: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def build_ended(future: Future[Any]) -> None:
        """A failed background build (prepare()'s) ends the run with its error, as when prepare() built it."""
        if future.exception() is not None:
            ended.put(future.exception())

    for job in run.services.background():
        job.future.add_done_callback(build_ended)

    def work(first: Unit) -> None:
        unit: Unit | None = first
        while unit is not None:
            slot = _UnitSlot(slots)
            token = Background.idle.set(slot.idle)
            try:
                record = run_unit(protocol, run, graph, unit, context)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which re-raises it
                ended.put(exc)
                return
            finally:
                Background.idle.reset(token)
            if record["status"] != "interrupted":  # stopped mid-unit: no record, resume continues it
                results.append(record)  # here, not in the main thread, where a Ctrl-C could drop it unsaved
            run.services.events.release(unit.id)
            ended.put(record)
            unit = slots.next_unit() if slot.held else None
        if stop.stopped():
            ended.put(stop.StopRequested("no unit is started after the stop"))  # the main thread stops waiting

    workers: list[threading.Thread] = []

    def spawn(unit: Unit) -> None:
        worker = threading.Thread(target=work, args=(unit,), name=f"unit-{len(workers)}", daemon=True)
        workers.append(worker)
        worker.start()

    slots = _Slots(run.config.concurrency, queued, spawn)

    with _progress_bar(run) as progress, \
            _live_status(run, progress, protocol.name, total=len(todo) + already, completed=already) as task:

        def keep(record: dict[str, Any]) -> None:
            """Show a unit that ended (its worker saved the record)."""
            if record["status"] == "interrupted":
                return
            progress.update(task, advance=1)
            if record["status"] not in FINAL_STATUSES:
                run.console.print(f"{record['unit_id']} {record['status']}: {record.get('error', '')}",
                                  style="red" if record["status"] != "ungraded" else "yellow",
                                  markup=False, highlight=False)

        try:
            slots.start()
            preload_plotting()  # imported while the first units wait on the endpoint, neither before nor after them
            for _ in todo:
                item = ended.get()
                if isinstance(item, BaseException):
                    raise item
                keep(item)
            if stop.stopped():  # the budget was spent as the last units ran: some of them may not have ended
                raise stop.StopRequested("no request is sent after the stop")
        except BaseException as exc:
            with _signals_ignored():
                stop.request_stop()
                deadline = time.monotonic() + STOP_GRACE_S
                # records already queued are shown too: a worker may end before the main thread took its last one
                while (any(w.is_alive() for w in list(workers)) or not ended.empty()) and time.monotonic() < deadline:
                    try:
                        item = ended.get(timeout=0.05)
                    except queue.Empty:
                        continue
                    if isinstance(item, dict):
                        keep(item)
            if not isinstance(exc, KeyboardInterrupt) and not any(w.is_alive() for w in list(workers)):
                stop.clear()  # not Ctrl-C and nothing left running: later calls in this process may go on
            raise


def _progress_bar(run: Run) -> Progress:
    """The run's live display: a row per task with n/total, elapsed time, ETA and a status text; redrawn 4 times a
    second, not rich's 10 (3.5 % of the unit threads' CPU at zero endpoint latency)."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=12), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                    console=run.console, transient=False, refresh_per_second=4)


#: Seconds between the plain progress lines of a background build on a console that is not a terminal.
PLAIN_EVERY_S = 10.0


class _BackgroundRows:
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
            self.progress.update(self.builds[i], status=waiting, **({"total": 1, "completed": 1} if done else {}))
            for stage, (count, total) in job.snapshot().items():
                if (i, stage) not in self.stages:
                    self.stages[i, stage] = self.progress.add_task(f"  {stage}", total=total, status="")
                task_id = self.stages[i, stage]
                self.progress.update(task_id, total=total, completed=count)
                task = next(t for t in self.progress.tasks if t.id == task_id)
                if plain and not task.finished:
                    eta = f", ETA {int(task.time_remaining)} s" if task.time_remaining is not None else ""
                    self.run.console.print(f"{job.label}: {stage} {count}/{total}{eta}"
                                           + (f" ({waiting})" if waiting else ""), markup=False, highlight=False)


def _await_background(run: Run) -> None:
    """Wait for what ``prepare()`` (or ``custom_run()``) builds in the background, its progress shown; a failed
    build raises its error here."""
    jobs = run.services.background()
    futures = [job.future for job in jobs]
    if not all(f.done() for f in futures):
        with _progress_bar(run) as progress:
            rows = _BackgroundRows(run, progress)
            while wait(futures, timeout=0.5).not_done:
                rows.refresh()
            rows.refresh()
    for future in futures:
        future.result()


@contextmanager
def _live_status(run: Run, progress: Progress, name: str, *, total: int, completed: int) -> Iterator[TaskID]:
    """The progress task of the units, its status line refreshed twice a second from the event log and the
    endpoints while units run: requests in flight, calls, failed attempts (retried or not), cache hits; with the
    rows of a background build and the units waiting for it (:class:`_BackgroundRows`)."""
    task = progress.add_task(name, total=total, completed=completed, status="")
    background = _BackgroundRows(run, progress)
    done = threading.Event()

    def refresh() -> None:
        while True:
            total = run.services.events.total()
            status = (f"in flight {run.services.in_flight()}, calls {total.calls}, failed {total.failed_calls}, "
                      f"cached {total.cache_hits}")
            progress.update(task, status=status)
            background.refresh()
            if done.wait(0.5):
                return

    ticker = threading.Thread(target=refresh, name="progress", daemon=True)
    ticker.start()
    try:
        yield task
    finally:
        done.set()
        ticker.join()
        background.refresh()  # the build's last counts in the final display


def _models_called(protocol: Protocol, run: Run) -> dict[str, str]:
    """Role -> model: the protocol's roles as configured, then every other role the run called (e.g. the models
    ATAD's evaluation answers with, logged as ``student``); several models of one role are listed by name."""
    models = {role: run.services.model_label(role) for role in ROLES if role in protocol.roles}
    for role, called in run.services.events.models_by_role().items():
        if role not in models:
            models[role] = ", ".join(sorted(called))
    return models


def build_summary(protocol: Protocol, run: Run, records: list[dict[str, Any]], *, wall_s: float,
                  warning: str | None, interrupted: dict[str, Any] | None = None,
                  notes: list[str] | None = None) -> dict[str, Any]:
    """Generic run figures plus the protocol's metrics.

    ``usage`` counts every call of the run (pre-flight and preparation included,
    earlier sessions of a resumed run too); ``per_unit`` averages the units' own.
    ``interrupted`` (Ctrl-C: unfinished units, resume command) marks a partial
    summary; ``notes`` lists repaired run files (torn lines dropped).
    """
    counts: dict[str, int] = {}
    units = Usage()
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        units.add(Usage.from_dict(r.get("usage") or {}))
    n = max(1, len(records))
    unit_wall = sum(r.get("wall_s", 0.0) for r in records)
    metrics = protocol.summarize(run, records)  # first: its own calls (interview's summary) count in usage
    return {
        "run_id": run.run_dir.name,
        "protocol": protocol.name,
        "models": _models_called(protocol, run),
        "smoke_test_warning": warning,
        "units": len(records),
        "status_counts": counts,
        "ungraded_verdicts": sum(r.get("ungraded_verdicts") or 0 for r in records),
        "interrupted": interrupted,
        "file_notes": notes or [],
        "usage": run.services.events.total().as_dict(),
        "usage_by_role": {role: u.as_dict() for role, u in run.services.events.by_role().items()},
        "unit_usage": units.as_dict(),
        "unit_wall_s_total": round(unit_wall, 3),
        "session_wall_s": round(wall_s, 3),
        "per_unit": {
            "calls": round(units.calls / n, 3),
            "tokens": round((units.prompt_tokens + units.completion_tokens) / n, 1),
            "wall_s": round(unit_wall / n, 3),
        },
        "metrics": metrics,
        **rescore_fields(protocol, run.config, records),
    }


def header_blocks(protocol: Protocol, run: Run, summary: dict[str, Any], warning: str | None,
                  records: list[dict[str, Any]]) -> list:
    blocks: list = []
    if warning:
        blocks.append(Text("WARNING: " + warning))
    if summary.get("interrupted"):
        stopped = summary["interrupted"]
        cause = f"the budget is spent: {stopped['budget']}" if stopped.get("budget") else "Ctrl-C"
        head = "TERMINATED (SIGTERM)" if stopped.get("signal") == "SIGTERM" else f"INTERRUPTED ({cause})"
        blocks.append(Text(f"{head}: a partial report; {stopped['unfinished_units']} units are not "
                           f"finished. Continue with: {stopped['resume']}"))
    if rescored := rescore_text(summary):
        blocks.append(Text(rescored))
    for note in summary.get("file_notes") or []:
        blocks.append(Text("Repaired run file: " + note))
    blocks.append(Table(["role", "model"], [[k, v] for k, v in summary["models"].items()], caption="Models"))
    usage = summary["usage"]
    blocks.append(Table(
        ["units", "statuses", "LLM calls", "prompt tokens", "completion tokens", "cost", "LLM seconds",
         "wall s / unit"],
        [[summary["units"], ", ".join(f"{k}={v}" for k, v in sorted(summary["status_counts"].items())),
          usage["calls"], usage["prompt_tokens"], usage["completion_tokens"], usd(usage), usage["llm_seconds"],
          summary["per_unit"]["wall_s"]]],
        caption="Run"))
    if usage["cache_hits"]:
        blocks.append(Text(f"Response cache: {usage['cache_hits']} replies reused, {usage['tokens_saved_by_cache']} "
                           f"tokens and {usd(usage, 'cost_saved_by_cache_usd')} saved."))
    blocks.append(Table(
        ["role", "calls", "failed attempts", "retries", "retry tokens", "retry cost", "prompt tokens",
         "completion tokens", "cost", "cache hits"],
        [[role, u["calls"], u["failed_calls"], u["retries"], u["retry_tokens"], usd(u, "retry_cost_usd"),
          u["prompt_tokens"], u["completion_tokens"], usd(u), u["cache_hits"]]
         for role, u in (summary.get("usage_by_role") or {}).items()],
        caption="Calls per role. Failed attempts: requests the endpoint failed (errors, timeouts; retried or not), "
                "which report no tokens. Retries: requests sent only because an earlier one failed (a retry after "
                "a failed attempt, or a repair of a malformed structured reply), with their tokens and cost; all "
                "are included in calls, tokens and cost"))
    failed = [[r["unit_id"], r["status"], (r.get("error") or "")[:300]] for r in records
              if r["status"] not in ("ok", "ungraded")]
    if failed:
        blocks.append(Table(["unit", "status", "reason"], failed, caption="Units that did not finish"))
    ungraded = [[r["unit_id"], r["ungraded_verdicts"]] for r in records if r["status"] == "ungraded"]
    if ungraded:
        blocks.append(Table(["unit", "ungraded verdicts"], ungraded,
                            caption="Units with ungraded verdicts (a judge failed); resume re-judges them"))
    blocks.append(Heading(protocol.description))
    return blocks


def print_summary(run: Run, summary: dict[str, Any]) -> None:
    table = RichTable(title=f"{summary['protocol']} summary")
    table.add_column("metric")
    table.add_column("value")
    table.add_row("units", str(summary["units"]))
    table.add_row("statuses", ", ".join(f"{k}={v}" for k, v in sorted(summary["status_counts"].items())))
    if summary["ungraded_verdicts"]:
        table.add_row("ungraded verdicts", f"{summary['ungraded_verdicts']} (resume re-judges them)")
    if summary.get("rescored_from"):
        table.add_row("re-scored from", f"{summary['rescored_from']} ({len(summary['diverged_units'])} unit(s) "
                                        "diverged: need a full re-run)")
    if summary["interrupted"]:
        table.add_row("interrupted", f"{summary['interrupted']['unfinished_units']} units unfinished (partial)")
    table.add_row("LLM calls", str(summary["usage"]["calls"]))
    table.add_row("tokens", str(summary["usage"]["prompt_tokens"] + summary["usage"]["completion_tokens"]))
    table.add_row("cost", usd(summary["usage"]) + (f", {usd(summary['usage'], 'cost_saved_by_cache_usd')} saved by "
                                                   "the cache" if summary["usage"]["cache_hits"] else ""))
    headline = headline_metrics(adapter(summary["protocol"]), summary["metrics"])  # named as in the paper, first
    for m in headline:
        value = f"{m['value']:.4g}" if isinstance(m["value"], float) else str(m["value"])
        table.add_row(m["name"], value + (f"  ({m['denominator']})" if m["denominator"] else ""))
    shown = {m["path"] for m in headline}
    rows = [row for row in _flat(summary["metrics"]) if row[0] not in shown]
    for key, value in rows[:_CONSOLE_METRICS]:
        table.add_row(key, value)
    if len(rows) > _CONSOLE_METRICS:
        table.add_row("...", f"{len(rows) - _CONSOLE_METRICS} more in summary.json and the report")
    run.console.print(table)
    run.console.print(f"run directory: [bold]{run.run_dir}[/]  (report: {run.run_dir / 'report.md'}, "
                      f"viewer: {run.run_dir / 'view.html'})")


_CONSOLE_METRICS = 24  # rows of flattened metrics printed on the console


def _flat(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """The numbers and texts among the metrics' leaves, as console rows."""
    return [(name, f"{value:.4g}" if isinstance(value, float) else str(value)) for name, value in leaves(metrics)
            if isinstance(value, (int, float, str)) and not isinstance(value, bool)]
