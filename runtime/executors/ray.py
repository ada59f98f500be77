"""The Ray executor (``--executor ray [--ray-address ADDR]``): a run's units on the worker processes of a cluster.

A session starts one unit runner (a threaded Ray actor, its own process) per CPU of every live node that has
CPUs, before the protocol's preparation: the preparation maps its heavy work over them (:mod:`runtime.spread`),
then the driver keeps at most ``--concurrency`` units running, each sent to the least busy runner, which runs it
on a thread as the thread executor does (one process per CPU, threads inside: a task per unit made a process per
unit in flight, with its own interpreter, pools and connections).

A unit is still one LangGraph thread, checkpointed in PostgreSQL (``--postgres-dsn``, required), so whichever
runner runs it continues it from its last checkpoint. The unit's final record is written exactly once through an
atomic claim with a lease in the same database (:class:`stores.unit_claims.UnitClaims`): a runner claims the
unit once it can start it (its graph compiled, its checkpointer open), renews the lease from that moment while
the unit runs, and writes the final record only while it holds the lease. A runner that loses a lease stops
the unit at its next request and hands it back; a runner whose process or node died is replaced on a live node.
Either way the driver sends the unit again (up to :data:`TASK_RETRIES` times, then records it ``infra_error``
with the reason): the new attempt waits for the old lease to run out, takes the unit over and continues it
from its checkpoint, or hands back the final record that was already written. No unit the driver sent is left
without a record unless the run stops.

Endpoint limits (requests in flight, requests per second) and the run's budgets hold for the whole cluster
through the run's coordinator actor (:mod:`runtime.cluster`): a worker's call layer asks it for a slot (a grant
may serve several requests of one runner while the endpoint has room). The exchanges a worker logs go in batches
(before each checkpoint write, at each unit's end) to a table in the run's PostgreSQL database, from which the
driver appends them to the run's ``events.jsonl`` as units end (:mod:`.ray_events`, :mod:`stores.event_batches`;
a batch used to go to an event sink actor on the driver's node: an actor call per graph step of a runner, and a
central process whose CPU per call matched the coordinator's). So the log holds every call a checkpoint holds
(with the ``worker`` that made it), those of a worker that died mid-unit included; those written after the driver
was killed reach it when the run resumes. The records come back to the driver, which writes ``results.jsonl``,
the summary and the report as with threads. Ctrl-C or SIGTERM at the driver stops the coordinator and the runners
(no worker sends another request), gives the units in flight the runner's grace period, then kills the runners;
the run resumes like any other. The runners end with the session, so a long-lived cluster keeps nothing of a
finished run; the driver owns them and the coordinator, so Ray ends them all when the driver dies, even killed
outright.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from dyneval.runtime import stop
from dyneval.runtime.cluster import ClusterLimits, ClusterSlots, RunLimits, start_coordinator, stop_coordinator
from dyneval.runtime.driver_folder import resolve_files_from
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.executors.ray_address import effective_address, keep_on_loopback
from dyneval.runtime.executors.ray_events import Drain, ForwardedLog
from dyneval.runtime.executors.threads import long_lived_heap
from dyneval.runtime.library_output import LIBRARY_LOG, library_output_to
from dyneval.runtime.models import Endpoint
from dyneval.runtime.pricing import Pricing
from dyneval.runtime.protocol import FINAL_STATUSES, Protocol, Run, Unit
from dyneval.runtime.services import Services
from dyneval.runtime.signals import STOPPING, raised_as_received
from dyneval.runtime.spread import LocalSpread
from dyneval.runtime.unit import run_unit
from dyneval.state.config import RunConfig
from dyneval.state.errors import InfraError, InputError
from dyneval.stores.checkpoints import open_checkpointer
from dyneval.stores.event_batches import EventBatches
from dyneval.stores.results import ResultStore
from dyneval.stores.unit_claims import Claim, Heartbeat, UnitClaims

#: Seconds a worker's claim on a unit lasts without a heartbeat: a unit whose worker died is taken over this long
#: after its last heartbeat (``Heartbeat`` renews it every third of it).
LEASE_S = 10.0
#: How often a unit (or a preparation item) is sent again after its runner died or (a unit) gave it back.
TASK_RETRIES = 5
#: Seconds between the driver's drains of the workers' exchanges (:class:`.ray_events.Drain`), which count the
#: usage of the units that ended: their records wait for the next one, so one drain serves all the units that end
#: meanwhile, not one each (a database statement each, the driver's largest cost per unit). Their final records
#: are in the database already (a killed driver loses none), and their slots go to the next units at once.
DRAIN_S = 0.2
#: Seconds the driver waits for ``ray.init`` to join an existing cluster whose port answered.
CONNECT_S = 60.0


@dataclass(frozen=True)
class _Job:
    """What a worker needs to run units of one run (pickled into each task)."""

    protocol: Protocol
    config: RunConfig
    run_dir: str  # absolute: a runner's working folder is its node's, not the driver's
    executor: ExecutorChoice  # the session's (a runner's run names where it runs, as the driver's does)
    cwd: str  # the driver's working folder, which relative files (graph:, --state-check, --kb, --bank-db) are in


def _postgres_dsn(config: RunConfig) -> str:
    """The database of a Ray session's checkpoints and unit claims (:meth:`.ExecutorChoice.check` refuses a session
    without one, before anything starts)."""
    if not config.stores.postgres_dsn:
        raise InputError("--executor ray needs --postgres-dsn", field="--executor")
    return config.stores.postgres_dsn


class _ClusterServices(Services):
    """A worker's services: every endpoint's in-flight slots and rate limit are the cluster's (the coordinator's),
    and the budget is the coordinator's, over every worker's calls."""

    limits: ClusterLimits

    def _endpoint(self, ref: str, role: str) -> Endpoint:
        endpoint = super()._endpoint(ref, role)
        if isinstance(endpoint.slots, ClusterSlots):
            return endpoint
        key = next(k for k, opened in self._endpoints.items() if opened is endpoint)  # opened just now
        slots = _LeasedSlots(self.limits, self.limits.register(endpoint.spec.model_dump_json(), endpoint.spec))
        self._endpoints[key] = replace(endpoint, slots=slots, limiter=None)
        return self._endpoints[key]


#: The lease of the unit this thread (or a node's thread, which copies its context) works for: set once its
#: renewal failed.
_LEASE_LOST: ContextVar[threading.Event | None] = ContextVar("lease_lost", default=None)
#: Why a runner gave a unit back (the driver sends it again).
LEASE_LOST = f"the runner lost the unit's lease (not renewed within {LEASE_S:g} s, or taken over) and stopped it"


class _LeasedSlots(ClusterSlots):
    """An endpoint's cluster slots that also refuse the request of a unit whose lease was lost, before the slot
    and once it is granted (right before the request): the unit stops at its next call as after Ctrl-C, its
    checkpoints kept, and the rest of the run goes on."""

    def acquire(self, blocking: bool = True) -> int:
        _refuse_if_lease_lost()
        grant = super().acquire(blocking)
        try:
            _refuse_if_lease_lost()
        except stop.StopRequested:
            self.release(grant)
            raise
        return grant


def _refuse_if_lease_lost() -> None:
    lost = _LEASE_LOST.get()
    if lost is not None and lost.is_set():
        raise stop.StopRequested(LEASE_LOST)


class _Worker:
    """One worker process's share of a run session: its services, claims store and coordinator client; the
    protocol's graph compiled on its PostgreSQL checkpointer as the runner starts, on a thread of its own (while
    the driver prepares, so the first unit does not wait for the imports); and, at its first unit (after the
    driver's preparation, which the context may read), the protocol's context."""

    def __init__(self, job: _Job) -> None:
        config, run_id = job.config, Path(job.run_dir).name
        self.job = job
        self.stack = ExitStack()
        # this process's warnings and log records: to the run's library.log while the runner lives
        self.stack.enter_context(library_output_to(Path(job.run_dir) / LIBRARY_LOG))
        self.claims = UnitClaims(_postgres_dsn(config))
        self.limits = ClusterLimits(run_id)
        self.name = f"{self.limits.node[:12]}-{os.getpid()}"
        batches = self.stack.enter_context(EventBatches(_postgres_dsn(config), run_id))
        self.events = events = ForwardedLog(batches, Pricing.for_run(config), self.name)
        if RunLimits.of(config).any():  # only a budget reads the usage workers report with their requests
            self.limits.usage = events.by_role
        services = _ClusterServices(
            config=config, run_dir=Path(job.run_dir), events=events, chat_overrides=_replayed(job)
        )
        services.budget = None  # the coordinator's budget counts every worker's calls
        services.limits = self.limits
        self.run = Run(
            config=config,
            run_dir=Path(job.run_dir),
            services=services,
            console=Console(quiet=True),
            executor=job.executor,
            resumed=True,
        )
        self._compiled: Future[Any] = Future()
        threading.Thread(target=self._compile, name="warm-up", daemon=True).start()
        self._graph: tuple[Any, Any] | None = None
        self._graph_lock = threading.Lock()

    def _compile(self) -> None:
        """Open the checkpointer (a pool of up to ``--concurrency`` connections: the units this runner may run
        at once), compile the protocol's graph on it and import the call layer's client."""
        try:
            saver = self.stack.enter_context(
                open_checkpointer(
                    self.run.run_dir,
                    _postgres_dsn(self.job.config),
                    self.job.config.concurrency,
                    before_write=self.events.flush,
                )
            )
            protocol = self.job.protocol
            graph = protocol.builder().compile(checkpointer=saver, name=protocol.name)
            import langchain_openai  # noqa: F401  # what the first request imports (runtime.models)
        except BaseException as exc:  # noqa: BLE001 - raised at the first unit, as when it was made there
            self._compiled.set_exception(exc)
        else:
            self._compiled.set_result(graph)

    def graph(self, params: dict[str, Any]) -> tuple[Any, Any]:
        """The compiled graph (waited for) and the protocol's context, made at the first unit from the run's
        parameters as the driver's preparation left them (``params``: JudgeAgent's preparation names the knowledge
        base it made from the questions' references, after the runners started with the run's config); from then
        on the cyclic collector leaves alone what is loaded (:func:`.threads.long_lived_heap`). The checkpointer and
        the heap stay so until the process ends: the session kills its runners when it ends."""
        with self._graph_lock:
            if self._graph is None:
                self.run.params.update(params)
                self._graph = (self._compiled.result(), self.job.protocol.context(self.run))
                self.stack.enter_context(long_lived_heap())
            return self._graph


def _replayed(job: _Job) -> dict[str, Any]:
    """A re-score's replayed roles (its source run's log, read from the shared run folder, beside this run's)."""
    if not job.config.rescored_from:
        return {}
    from dyneval.runtime.replay import replay_models

    return replay_models(Path(job.run_dir).parent / job.config.rescored_from, job.protocol.judge_roles)


class _UnitRunner:
    """The Ray actor of one worker process in a run session: it runs units (and preparation items) on its
    threads, as the thread executor does in one process. One per worker CPU; killed when the session ends, so a
    long-lived cluster keeps no process, connection or pool of a finished run."""

    def __init__(self, job: _Job) -> None:
        stop.clear()
        resolve_files_from(job.cwd)
        self.worker = _Worker(job)

    def run_unit(self, unit: Unit, params: dict[str, Any]) -> dict[str, Any]:
        """Claim ``unit``, run it to its record, write a final record once (``params``: the run's parameters after
        the driver's preparation). Returns the record (the final one already written, if another attempt wrote
        it)."""
        return _run_claimed(self.worker, unit, params)

    def stop(self) -> None:
        """Refuse this runner's next requests at once (the driver's Ctrl-C or SIGTERM), grants it holds for its
        next requests included; called in the ``control`` concurrency group, so a runner whose unit threads are
        all busy still takes it."""
        stop.request_stop()

    def call(self, fn: Callable[[Services, Any], Any], item: Any) -> Any:
        """One preparation item (:mod:`runtime.spread`) with this worker's services."""
        try:
            return fn(self.worker.run.services, item)
        finally:
            self.worker.events.flush()
            self.worker.limits.flush()


def _run_claimed(worker: _Worker, unit: Unit, params: dict[str, Any]) -> dict[str, Any]:
    """The unit claimed only once its graph and checkpointer are ready (a fresh runner on a loaded node took
    longer than a lease to make them), its lease renewed from the moment it is taken; a lease lost meanwhile
    stops the unit at its next request, and the record comes back ``interrupted`` with the reason."""
    run_id = worker.run.run_dir.name
    graph, context = worker.graph(params)
    claim = _claim(worker, run_id, unit.id)
    if claim.status == "final":
        return worker.claims.final_records(run_id)[unit.id].record
    if claim.lease is None:
        return {
            "unit_id": unit.id,
            "meta": unit.meta,
            "status": "interrupted",
            "error": "the runner was stopped while another attempt's lease ran out",
        }
    lease = claim.lease
    with Heartbeat(worker.claims, lease) as beat:
        held = _LEASE_LOST.set(beat.lost)
        try:
            record = run_unit(worker.job.protocol, worker.run, graph, unit, context)
        finally:
            _LEASE_LOST.reset(held)
            worker.events.flush()  # before the final record: every exchange of the unit is in the database
            worker.limits.flush()
    worker.run.services.events.release(unit.id)
    if record["status"] == "interrupted" and beat.lost.is_set():
        record["error"] = LEASE_LOST
    if record["status"] in FINAL_STATUSES:
        if not worker.claims.finish(lease, record, record["usage"]):
            final = worker.claims.final_records(run_id).get(unit.id)
            return final.record if final is not None else {**record, "status": "interrupted", "error": LEASE_LOST}
    else:
        worker.claims.release(lease)
    return record


def _claim(worker: _Worker, run_id: str, unit_id: str) -> Claim:
    """Claim ``unit_id``, waiting while another worker's lease (a dead worker's) runs out; a claim without a lease
    once the run is stopped."""
    while True:
        claim = worker.claims.claim(run_id, unit_id, worker.name, LEASE_S)
        if claim.status != "held" or stop.stopped():
            return claim
        time.sleep(LEASE_S / 5)


class _Gone(Exception):
    """The worker process holding a call died (its node, or the process); the call may run again elsewhere."""


class _Runners:
    """The session's unit runners: one per CPU of every live node that has CPUs (so none on a head started with
    ``--num-cpus 0``), at most ``--concurrency``; each call goes to the least busy runner. A runner whose process
    or node died is replaced on a live node, and its calls are handed back to be sent again."""

    def __init__(self, job: _Job, limit: int) -> None:
        self.job, self.limit = job, max(1, limit)
        self.busy: dict[Any, int] = {}  # runner -> calls in flight
        self.node: dict[Any, str] = {}  # runner -> its node's id
        self.lost: set[str] = set()  # nodes a runner died on: none is placed there again in this session
        self.calls: dict[Any, Any] = {}  # call ref -> runner
        self._spawn()

    def _spawn(self) -> None:
        """Start runners until every live CPU has one (or ``limit`` are running). A node a runner died on gets no
        new one while another node has room (Ray declares a killed node dead only some seconds later); on a
        single node, or once every node lost one, they may."""
        import ray

        live = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
        for nodes in ([n for n in live if n["NodeID"] not in self.lost], live):
            for node in nodes:
                self._fill(node["NodeID"], int(node["Resources"]["CPU"]))
            if self.busy:
                return
        raise RuntimeError("the Ray cluster has no live node with a CPU to run units on")

    def _fill(self, node_id: str, cpus: int) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id, soft=False)
        while list(self.node.values()).count(node_id) < cpus and len(self.busy) < self.limit:
            runner = (
                ray.remote(concurrency_groups={"control": 1})(_UnitRunner)  # type: ignore[call-overload]  # its stubs omit concurrency_groups
                .options(num_cpus=0, max_concurrency=self.limit, max_restarts=0, scheduling_strategy=here)
                .remote(self.job)
            )
            self.node[runner] = node_id
            self.busy[runner] = 0

    def send(self, method: str, *args: Any) -> Any:
        """Call ``method`` on the least busy runner; the call's ref."""
        runner = min(self.busy, key=self.busy.__getitem__)
        ref = getattr(runner, method).remote(*args)
        self.busy[runner] += 1
        self.calls[ref] = runner
        return ref

    def result(self, ref: Any) -> Any:
        """What the call returned (what it raised, as raised); :class:`_Gone` when its runner died."""
        import ray

        runner = self.calls.pop(ref)
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            if runner in self.busy:
                del self.busy[runner]
                self.lost.add(self.node.pop(runner))
                if not stop.stopped():
                    self._spawn()  # on a live node; Ray tells a killed node's death some seconds late
            raise _Gone(str(exc)) from None
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        finally:
            if runner in self.busy:
                self.busy[runner] -= 1

    def stop(self) -> None:
        """Tell every runner the run stopped (not waited for: a runner's next request is refused either way, by
        the coordinator, once its held grants are spent)."""
        for runner in self.busy:
            runner.stop.options(concurrency_group="control").remote()

    def kill(self) -> None:
        import ray

        for runner in list(self.busy):
            ray.kill(runner)
        self.busy.clear()
        self.node.clear()


def _ended(refs: list[Any], timeout: float) -> list[Any]:
    """The calls of ``refs`` that ended, as soon as one did (within ``timeout``): waiting for all of them, or for
    the timeout, left the ended ones' slots idle (at zero latency most of a unit runner's threads sat idle)."""
    import ray

    done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    if done and len(refs) > 1:
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return done


class RaySpread:
    """The :class:`runtime.spread.Spread` of a Ray session: each item a call on the session's runners, at most
    ``--concurrency`` at once; an item whose runner died is sent again (up to :data:`TASK_RETRIES` times)."""

    remote = True

    def __init__(self, runners: _Runners, concurrency: int, drain: Callable[[], None]) -> None:
        self.runners, self.concurrency, self.drain = runners, max(1, concurrency), drain

    def map(self, fn: Callable[[Services, Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        import ray

        queued = list(range(len(items)))[::-1]
        pending: dict[Any, int] = {}
        tries: dict[int, int] = {}
        try:
            while queued or pending:
                while queued and len(pending) < self.concurrency:
                    stop.raise_if_stopped()
                    i = queued.pop()
                    pending[self.runners.send("call", fn, items[i])] = i
                done = _ended(list(pending), timeout=0.25)
                self.drain()
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        result = self.runners.result(ref)
                    except _Gone as exc:
                        tries[i] = tries.get(i, 0) + 1
                        if tries[i] > TASK_RETRIES:
                            raise RuntimeError(f"a preparation item's worker died {tries[i]} times: {exc}") from None
                        queued.append(i)
                        continue
                    yield i, result
        finally:
            for ref in pending:
                ray.cancel(ref)


class RayExecutor:
    """The :class:`runtime.executors.Executor` of the session's runners (see the module's docstring)."""

    def __init__(self, session: RaySession, results: ResultStore) -> None:
        self.session, self.run, self.results = session, session.run, results
        self.params = dict(self.run.params)  # as the preparation left them: the runners' contexts are made from them
        self.ready: list[dict[str, Any]] = []
        self.queued: list[Unit] = []
        self.pending: dict[Any, Unit] = {}
        self.tries: dict[str, int] = {}
        self.stopping = False
        self.undrained: list[dict[str, Any]] = []  # ended units' records, waiting for the next drain
        self.last_drain = 0.0  # time.monotonic() of the last drain

    def submit(self, units: list[Unit]) -> None:
        finals = UnitClaims(_postgres_dsn(self.run.config))
        with finals:
            written = finals.final_records(self.run.run_dir.name)
        self.ready = [written[u.id].record for u in units if u.id in written]  # written, then the driver stopped
        self.queued = [u for u in units if u.id not in written][::-1]
        self._top_up()

    def _top_up(self) -> None:
        while (
            self.queued and len(self.pending) < self.run.config.concurrency and not self.stopping and not stop.stopped()
        ):
            unit = self.queued.pop()
            self.pending[self.session.runners.send("run_unit", unit, self.params)] = unit

    def ended(self) -> Iterator[dict[str, Any]]:
        for record in self.ready:
            yield self._keep(record)
        while self.pending:
            with raised_as_received():
                yield from self._collect(timeout=0.25)
        yield from self._drained()
        if self.queued:  # the stop came: nothing more is started
            raise stop.StopRequested("no unit is started after the stop")

    def _collect(self, timeout: float) -> Iterator[dict[str, Any]]:
        """The records of the units that ended (within ``timeout``), once the exchanges they logged were drained
        (at most :data:`DRAIN_S` later); their slots go to the next units first."""
        if self.undrained:  # they wait no longer than DRAIN_S for units that end meanwhile
            timeout = min(timeout, max(0.0, self.last_drain + DRAIN_S - time.monotonic()))
        done = _ended(list(self.pending), timeout)
        self.undrained += [r for r in (self._record(ref, self.pending.pop(ref)) for ref in done) if r is not None]
        self._top_up()
        if time.monotonic() - self.last_drain >= DRAIN_S:  # and the log keeps up with units still running
            yield from self._drained()

    def _drained(self) -> Iterator[dict[str, Any]]:
        """Drain the workers' exchanges (a worker logs each before its unit's call returns: the ended units' are
        there), then keep the records that waited for it."""
        self.session.drain()
        self.last_drain = time.monotonic()
        records, self.undrained = self.undrained, []
        for record in records:
            yield self._keep(record)

    def _record(self, ref: Any, unit: Unit) -> dict[str, Any] | None:
        """The record ``ref`` returned, or the failure it is; ``None`` for a unit sent again.

        A unit comes back ``interrupted`` while the driver goes on when the run's budget is spent (then the run
        stops, as in one process) or when its runner gave it back (its lease was lost): such a unit, like one
        whose runner died, is sent again, up to :data:`TASK_RETRIES` times, and then recorded ``infra_error``
        with the reason. None is dropped: every unit sent ends with a record, or the run stops."""
        try:
            record = self.session.runners.result(ref)
        except _Gone as exc:  # continued from its checkpoint once the dead runner's lease ran out
            return self._again(unit, f"its unit runner died: {exc}")
        except Exception as exc:  # noqa: BLE001 - a unit's failure is its record, as with threads
            return {
                "unit_id": unit.id,
                "meta": unit.meta,
                "status": "infra_error",
                "error": f"{type(exc).__name__}: {exc}"[:2000],
            }
        if record["status"] != "interrupted" or self.stopping:
            return record
        if reached := self.session.limits.stats()["budget_reached"]:
            stop.request_stop()  # the budget is spent: the runner stops as when it is spent in this process
            if self.run.services.budget is not None:
                self.run.services.budget.reached = reached
            return record
        return self._again(unit, record.get("error") or "its runner stopped it")

    def _again(self, unit: Unit, reason: str) -> dict[str, Any] | None:
        """Send ``unit`` again (``None``), or its record once it was sent too often or the run is stopping."""
        self.tries[unit.id] = self.tries.get(unit.id, 0) + 1
        if not self.stopping and self.tries[unit.id] <= TASK_RETRIES:
            self.queued.append(unit)
            return None
        if self.stopping:
            return {"unit_id": unit.id, "meta": unit.meta, "status": "interrupted", "error": reason}
        return {
            "unit_id": unit.id,
            "meta": unit.meta,
            "status": "infra_error",
            "error": f"sent {self.tries[unit.id]} times; the last time {reason}",
        }

    def _keep(self, record: dict[str, Any]) -> dict[str, Any]:
        """A record back at the driver: its usage as the driver's log counts it (every attempt's exchanges),
        saved unless interrupted (the run is stopping)."""
        events = self.run.services.events
        record["usage"] = events.usage(record["unit_id"]).as_dict()
        if record["status"] != "interrupted":
            self.results.append(record)
        events.release(record["unit_id"])
        return record

    def stop(self, grace_s: float) -> Iterator[dict[str, Any]]:
        self.stopping = True
        self.session.limits.request_stop()
        self.session.runners.stop()
        deadline = time.monotonic() + grace_s
        while self.pending and time.monotonic() < deadline:
            yield from self._collect(timeout=min(0.25, max(0.0, deadline - time.monotonic())))
        if self.pending:
            self.session.runners.kill()  # what still runs after the grace: its process goes, its lease runs out
            yield from self._collect(timeout=grace_s)
        yield from self._drained()

    def working(self) -> bool:
        return bool(self.pending)


class RaySession:
    """A run's session on a Ray cluster: the connection, the run's coordinator and the unit runners, from before
    the protocol's preparation (which maps its heavy work over the runners through :attr:`spread`) until the units
    are done."""

    def __init__(self, protocol: Protocol, run: Run, batches: EventBatches) -> None:
        self.protocol, self.run, self.batches = protocol, run, batches
        self.limits = ClusterLimits(run.run_dir.name)  # the driver's: stop and budget
        job = _Job(protocol, run.config, str(run.run_dir.resolve()), run.executor, os.getcwd())
        self.runners = _Runners(job, run.config.concurrency)
        self.spread = RaySpread(self.runners, run.config.concurrency, self.drain)
        self._draining = threading.Lock()
        self._drain = Drain(batches, run.services.events)

    def drain(self) -> None:
        """Append to ``events.jsonl`` and count the exchanges workers wrote since the last drain."""
        with self._draining:
            self._drain()

    def drained(self) -> None:
        """The session's last drain is done: its rows are marked appended."""
        with self._draining:
            self._drain.close()

    @contextmanager
    def units(self, builder: Any, context: Any, results: ResultStore) -> Iterator[RayExecutor]:
        """The executor of the units (the runners compile the graph and make the context themselves)."""
        yield RayExecutor(self, results)


@contextmanager
def open_ray(protocol: Protocol, run: Run, address: str | None) -> Iterator[RaySession]:
    """Connect to the Ray cluster at ``address`` (``None``: start one on this machine, on 127.0.0.1), start the
    run's coordinator on the driver's node and the unit runners, and remove them all at the end. All of them are
    owned by this process: if it is killed, Ray ends them too."""
    keep_on_loopback(effective_address(address)[0])
    import ray

    connection = None if ray.is_initialized() else _connect(address)
    with open_checkpointer(run.run_dir, _postgres_dsn(run.config)):
        pass  # the checkpoint tables made here, once: workers making them at once collide on their migrations
    run_id = run.run_dir.name
    stop_coordinator(run_id)  # a coordinator an earlier session in this process left (its stop flag up)
    with EventBatches(_postgres_dsn(run.config), run_id) as batches:
        coordinator = start_coordinator(run_id, RunLimits.of(run.config), spent=run.services.events.by_role())
        session = None
        try:
            session = RaySession(protocol, run, batches)
            run.services.spread, run.services.remote_in_flight = session.spread, session.limits.in_flight
            yield session
            session.drained()
        finally:
            run.services.spread, run.services.remote_in_flight = LocalSpread(run.services), None
            if session is not None:
                session.runners.kill()
            ray.kill(coordinator)
            if connection is not None:
                ray.shutdown()
                connection.set()


def _connect(address: str | None) -> threading.Event:
    """``ray.init`` on a thread of its own, waited for here; set the event it returns once ``ray.shutdown`` ran.

    Not on this thread: Ray retries a cluster that does not let it in for minutes, with the thread blocked up to
    30 s at a time, and on the main thread it installs a SIGTERM handler that exits without the partial report,
    so Ctrl-C and SIGTERM would wait for it and SIGTERM would not exit 143. The thread lives until the event is
    set: the processes of a Ray that ``init`` starts on this machine are bound to the thread that started them
    (``PR_SET_PDEATHSIG``). An existing cluster (``address``, or ``RAY_ADDRESS``) must let the driver in within
    :data:`CONNECT_S` seconds (its port answered already, :func:`.ray_address.reach`): else ``InfraError``.

    Ray's core worker also installs a crash handler for SIGTERM as it starts (it aborts the process, exit -6):
    this process's own handlers are put back at every wait and once ``init`` returned."""
    import ray

    outcome: list[BaseException | None] = []
    release = threading.Event()

    def hold() -> None:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except BaseException as exc:  # noqa: BLE001 - raised again on the waiting thread
            outcome.append(exc)
            return
        outcome.append(None)
        release.wait()

    existing = address is not None or effective_address(address)[0] is not None
    handlers = (
        {sig: handler for sig in STOPPING if (handler := signal.getsignal(sig)) is not None}
        if threading.current_thread() is threading.main_thread()
        else {}
    )
    quiet = _Unsaid("SIGTERM handler is not set")  # what Ray says off the main thread: ours stays, as wanted
    logging.getLogger("ray._private.worker").addFilter(quiet)
    try:
        threading.Thread(target=hold, name="ray-init", daemon=True).start()
        deadline = time.monotonic() + CONNECT_S if existing else float("inf")
        while not outcome and time.monotonic() < deadline:
            time.sleep(0.1)  # short waits: a signal's handler runs between them
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    finally:
        logging.getLogger("ray._private.worker").removeFilter(quiet)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if not outcome:
        raise InfraError(
            f"the Ray cluster at {address or effective_address(address)[0]} accepts connections but did "
            f"not let this driver in within {CONNECT_S:g} s (is it the GCS address of a Ray head?)"
        )
    if outcome[0] is not None:
        raise outcome[0]
    return release


class _Unsaid(logging.Filter):
    """Drops the log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)
