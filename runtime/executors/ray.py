"""The Ray executor (``--executor ray [--ray-address ADDR]``): each unit a Ray task on any node of a cluster.

A unit is still one LangGraph thread, checkpointed in PostgreSQL (``--postgres-dsn``, required), so whichever
worker runs it continues it from its last checkpoint. Ray retries a task whose worker or node died (at least
once); the unit's final record is written exactly once through an atomic claim with a lease in the same database
(:class:`stores.unit_claims.UnitClaims`): a worker claims the unit before running it, renews the lease while it
runs, and writes the final record only while it holds the lease; a retried task waits for the dead worker's lease
to run out, takes the unit over and continues it from its checkpoint, or hands back the final record that was
already written.

Endpoint limits (requests in flight, requests per second) and the run's budgets hold for the whole cluster
through the run's coordinator actor (:mod:`runtime.cluster`): a worker's call layer asks it before every
request. Every exchange a worker logs goes to the driver at once (an event sink actor on the driver's node), so
the driver's ``events.jsonl`` holds every call, those of a worker that died mid-unit included; the records come
back to the driver, which writes ``results.jsonl``, the summary and the report as with threads. Ctrl-C or
SIGTERM at the driver stops the coordinator (no worker sends another request), gives the units in flight the
runner's grace period, then cancels what still runs; the run resumes like any other.

The driver keeps at most ``--concurrency`` units submitted; each task reserves :data:`TASK_CPUS` of a CPU (units
wait on endpoints, not on CPUs) and tasks are spread over the nodes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from dyneval.runtime import stop
from dyneval.runtime.cluster import ClusterLimits, ClusterSlots, RunLimits, start_coordinator, stop_coordinator
from dyneval.runtime.events import EventLog
from dyneval.runtime.models import Endpoint
from dyneval.runtime.pricing import Pricing
from dyneval.runtime.protocol import FINAL_STATUSES, Protocol, Run, Unit
from dyneval.runtime.services import Services
from dyneval.runtime.signals import STOPPING, raised_as_received
from dyneval.runtime.unit import run_unit
from dyneval.state.config import RunConfig
from dyneval.stores.checkpoints import open_checkpointer
from dyneval.stores.results import ResultStore
from dyneval.stores.unit_claims import Claim, Heartbeat, UnitClaims

#: Seconds a worker's claim on a unit lasts without a heartbeat: a unit whose worker died is taken over this long
#: after its last heartbeat (``Heartbeat`` renews it every third of it).
LEASE_S = 10.0
#: The CPU share a unit's task reserves: units wait on endpoints, so many share a core.
TASK_CPUS = 0.01
#: How often Ray runs a task again whose worker process or node died.
TASK_RETRIES = 5


@dataclass(frozen=True)
class _Job:
    """What a worker needs to run units of one run (pickled into each task)."""

    protocol: Protocol
    config: RunConfig
    run_dir: str
    sink: Any  # the driver's event sink actor
    session: str  # one per driver session: a resumed run's workers start afresh


class _EventSink:
    """The Ray actor (on the driver's node) that collects the exchanges workers log, for the driver's log."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, events: list[dict[str, Any]]) -> None:
        self.events.extend(events)

    def take(self) -> list[dict[str, Any]]:
        taken, self.events = self.events, []
        return taken


class _ForwardedLog(EventLog):
    """A worker's event log: every exchange goes to the driver's sink before the call returns (so a worker that
    dies mid-unit leaves no call uncounted), and counts here for the unit's record and the budget's tally."""

    def __init__(self, sink: Any, pricing: Pricing) -> None:
        super().__init__(path=None, pricing=pricing)
        self.sink = sink

    def log(self, event: dict[str, Any]) -> None:
        import ray

        with self._lock:
            self._count(event)
        ray.get(self.sink.put.remote([event]))


class _ClusterServices(Services):
    """A worker's services: every endpoint's in-flight slots and rate limit are the cluster's (the coordinator's),
    and the budget is the coordinator's, over every worker's calls."""

    limits: ClusterLimits

    def _endpoint(self, ref: str, role: str) -> Endpoint:
        endpoint = super()._endpoint(ref, role)
        if isinstance(endpoint.slots, ClusterSlots):
            return endpoint
        key = next(k for k, opened in self._endpoints.items() if opened is endpoint)  # opened just now
        slots = self.limits.slots(endpoint.spec.model_dump_json(), endpoint.spec)
        self._endpoints[key] = replace(endpoint, slots=slots, limiter=None)
        return self._endpoints[key]


class _Worker:
    """One worker process's share of a run: its services, compiled graph (PostgreSQL checkpointer held open),
    context, claims store and coordinator client; made at the process's first unit of the run."""

    def __init__(self, job: _Job) -> None:
        config, run_id = job.config, Path(job.run_dir).name
        self.stack = ExitStack()
        self.claims = UnitClaims(config.stores.postgres_dsn)
        events = _ForwardedLog(job.sink, Pricing.for_run(config))
        services = _ClusterServices(config=config, run_dir=Path(job.run_dir), events=events,
                                    chat_overrides=_replayed(job.protocol, config))
        services.budget = None  # the coordinator's budget counts every worker's calls
        services.limits = ClusterLimits(run_id, usage=events.by_role)
        self.limits = services.limits
        self.run = Run(config=config, run_dir=Path(job.run_dir), services=services,
                       console=Console(quiet=True), resumed=True)
        saver = self.stack.enter_context(open_checkpointer(self.run.run_dir, config.stores.postgres_dsn))
        self.graph = job.protocol.builder().compile(checkpointer=saver, name=job.protocol.name)
        self.context = job.protocol.context(self.run)
        self.name = f"{self.limits.node[:12]}-{os.getpid()}"
        self.active = 0  # units of this session running in this process (guarded by _WORKERS_LOCK)

    def close(self) -> None:
        self.stack.close()
        self.claims.close()


def _replayed(protocol: Protocol, config: RunConfig) -> dict[str, Any]:
    """A re-score's replayed roles (its source run's log, read from the shared run folder)."""
    if not config.rescored_from:
        return {}
    from dyneval.runtime.replay import replay_models

    return replay_models(Path(config.out) / config.rescored_from, protocol.judge_roles)


_WORKERS: dict[str, _Worker] = {}
_WORKERS_LOCK = threading.Lock()


@contextmanager
def _worker(job: _Job) -> Iterator[_Worker]:
    """This process's share of ``job``'s session while one of its units runs here. A new session closes every
    other session with no unit running in this process (its PostgreSQL connections with it): a long-lived worker
    serving run after run keeps no connections of finished runs; a run still going reopens its share."""
    with _WORKERS_LOCK:
        if job.session not in _WORKERS:
            stop.clear()  # a new session in this process: an earlier one's stop is not this one's
            for session, idle in [(k, w) for k, w in _WORKERS.items() if not w.active]:
                _WORKERS.pop(session)
                idle.close()
            _WORKERS[job.session] = _Worker(job)
        worker = _WORKERS[job.session]
        worker.active += 1
    try:
        yield worker
    finally:
        with _WORKERS_LOCK:
            worker.active -= 1


def _unit_task(job: _Job, unit: Unit) -> dict[str, Any] | None:
    """The Ray task of one unit: claim it, run it to its record, write a final record once. Returns the record
    (the final one already written, if another attempt wrote it)."""
    with _worker(job) as worker:
        return _run_claimed(job, worker, unit)


def _run_claimed(job: _Job, worker: _Worker, unit: Unit) -> dict[str, Any] | None:
    run_id = worker.run.run_dir.name
    claim = _claim(worker, run_id, unit.id)
    if claim.status == "final":
        return worker.claims.final_records(run_id)[unit.id].record
    if claim.lease is None:  # the run stopped while another worker's lease ran out
        return {"unit_id": unit.id, "meta": unit.meta, "status": "interrupted"}
    lease = claim.lease
    try:
        with Heartbeat(worker.claims, lease):
            record = run_unit(job.protocol, worker.run, worker.graph, unit, worker.context)
    finally:
        worker.limits.flush()
    worker.run.services.events.release(unit.id)
    if record["status"] in FINAL_STATUSES:
        if not worker.claims.finish(lease, record, record["usage"]):
            final = worker.claims.final_records(run_id).get(unit.id)
            return final.record if final is not None else {**record, "status": "interrupted"}
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


class RayExecutor:
    """The :class:`runtime.executors.Executor` of Ray tasks (see the module's docstring)."""

    def __init__(self, protocol: Protocol, run: Run, results: ResultStore, sink: Any) -> None:
        import ray

        self.protocol, self.run, self.results, self.sink = protocol, run, results, sink
        self.job = _Job(protocol, run.config, str(run.run_dir), sink, uuid.uuid4().hex)
        self.task = ray.remote(_unit_task).options(num_cpus=TASK_CPUS, max_retries=TASK_RETRIES,
                                                   scheduling_strategy="SPREAD")
        self.limits = ClusterLimits(run.run_dir.name)  # the driver's: stop and budget
        self.ready: list[dict[str, Any]] = []
        self.queued: list[Unit] = []
        self.pending: dict[Any, Unit] = {}
        self.stopping = False

    def submit(self, units: list[Unit]) -> None:
        finals = UnitClaims(self.run.config.stores.postgres_dsn)
        with finals:
            written = finals.final_records(self.run.run_dir.name)
        self.ready = [written[u.id].record for u in units if u.id in written]  # written, then the driver stopped
        self.queued = [u for u in units if u.id not in written][::-1]
        self._top_up()

    def _top_up(self) -> None:
        while self.queued and len(self.pending) < self.run.config.concurrency and not self.stopping \
                and not stop.stopped():
            unit = self.queued.pop()
            self.pending[self.task.remote(self.job, unit)] = unit

    def ended(self) -> Iterator[dict[str, Any]]:
        for record in self.ready:
            yield self._keep(record)
        while self.pending:
            with raised_as_received():
                yield from self._collect(timeout=0.25)
            self._top_up()
        if self.queued:  # the stop came: nothing more is started
            raise stop.StopRequested("no unit is started after the stop")

    def _collect(self, timeout: float) -> Iterator[dict[str, Any]]:
        import ray

        done, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        self._drain()
        for ref in done:
            unit = self.pending.pop(ref)
            try:
                record = ray.get(ref)
            except (ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError) as exc:
                record = {"unit_id": unit.id, "meta": unit.meta,
                          "status": "interrupted" if self.stopping else "infra_error", "error": str(exc)}
            except ray.exceptions.RayError as exc:
                record = {"unit_id": unit.id, "meta": unit.meta, "status": "infra_error",
                          "error": f"{type(exc).__name__}: {exc}"[:2000]}
            self._drain()
            yield self._keep(record)

    def _keep(self, record: dict[str, Any]) -> dict[str, Any]:
        """A record back at the driver: its usage as the driver's log counts it (every attempt's exchanges),
        saved unless interrupted."""
        events = self.run.services.events
        record["usage"] = events.usage(record["unit_id"]).as_dict()
        if record["status"] != "interrupted":
            self.results.append(record)
        elif not self.stopping and (reached := self.limits.stats()["budget_reached"]):
            stop.request_stop()  # the budget is spent: the runner stops as when it is spent in this process
            if self.run.services.budget is not None:
                self.run.services.budget.reached = reached
        events.release(record["unit_id"])
        return record

    def _drain(self) -> None:
        """Log at the driver the exchanges workers sent since the last drain."""
        import ray

        events = self.run.services.events
        for event in ray.get(self.sink.take.remote()):
            events.log(event)

    def stop(self, grace_s: float) -> Iterator[dict[str, Any]]:
        import ray

        self.stopping = True
        self.limits.request_stop()
        deadline = time.monotonic() + grace_s
        while self.pending and time.monotonic() < deadline:
            yield from self._collect(timeout=min(0.25, max(0.0, deadline - time.monotonic())))
        for ref in self.pending:
            ray.cancel(ref, force=True, recursive=True)
        yield from self._collect(timeout=grace_s)
        self._drain()

    def working(self) -> bool:
        return bool(self.pending)


@contextmanager
def open_ray(protocol: Protocol, run: Run, results: ResultStore, address: str | None) -> Iterator[RayExecutor]:
    """Connect to the Ray cluster at ``address`` (``None``: start one on this machine), start the run's
    coordinator and event sink on the driver's node, and remove both when the units are done."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    connected = not ray.is_initialized()
    if connected:
        with _signal_handlers_kept():  # Ray's own SIGTERM handler would exit without the partial report
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    with open_checkpointer(run.run_dir, run.config.stores.postgres_dsn):
        pass  # the checkpoint tables made here, once: workers making them at once collide on their migrations
    run_id = run.run_dir.name
    stop_coordinator(run_id)  # a coordinator an earlier session left (its stop flag up)
    start_coordinator(run_id, RunLimits.of(run.config), spent=run.services.events.by_role())
    sink = ray.remote(_EventSink).options(num_cpus=0, scheduling_strategy=here).remote()
    try:
        yield RayExecutor(protocol, run, results, sink)
    finally:
        stop_coordinator(run_id)
        ray.kill(sink)
        if connected:
            ray.shutdown()


@contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """The process's Ctrl-C and SIGTERM handlers as they were before, whatever the block installs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in STOPPING}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
