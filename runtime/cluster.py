"""Limits for a whole Ray cluster: one coordinator actor per run holds every endpoint's in-flight and
requests-per-second limits and the run's budgets, for all workers at once (``--executor ray``).

In one process, an endpoint's :class:`runtime.concurrency.InFlight` and rate limiter and the run's
:class:`runtime.budget.Budget` are objects every thread shares. Across processes and machines they must live in
one place: the :class:`Coordinator`, a named Ray actor (``coordinator_name(run_id)`` in namespace ``dyneval``),
as RapidFire AI runs one rate-limiter actor for a cluster; the run's driver owns it, so it ends with the driver,
even one killed outright. It holds the same objects: an ``InFlight`` per endpoint (the same adaptive limit: a 429
or timeout halves it once per window, successes grow it back to the spec's ``concurrency``), the
requests-per-second spacing of the spec, and a ``Budget`` over the usage every worker reports. Why an actor and
not the database, and what it costs per call: ``docs/scale-out.md``.

A worker reaches it through :class:`ClusterLimits` (one per process and run): ``slots(key, spec)`` gives a
:class:`ClusterSlots`, which the call layer (:class:`runtime.llm.RoleLLM`) uses in place of the endpoint's own
``InFlight`` (``acquire`` / ``release`` around each request), with no separate rate limiter or budget: one
``acquire`` round trip waits for a slot, reserves the request's start time under the rate limit, reports the
worker's usage so far and checks the budget and the run's stop flag. ``release`` is sent without waiting, with
the usage again. The call layer logs a request's usage just after releasing its slot, so, as in one process
(where another thread may take the slot before the event is counted), a request may start before the previous
one's usage is counted: a budget can be overrun by at most about one request per worker process.

A grant whose holder is gone cannot stay counted: the coordinator releases the grants of a node Ray reports
dead, and any grant held longer than its request could take (the rate delay, the spec's ``timeout_s`` and
:data:`GRACE_S`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dyneval.runtime import stop
from dyneval.runtime.budget import Budget, BudgetSpent
from dyneval.runtime.concurrency import InFlight
from dyneval.runtime.events import Usage

if TYPE_CHECKING:
    from dyneval.state.config import ModelSpec, RunConfig

#: Ray namespace of the coordinators (a driver and its workers must use it to find one by name).
NAMESPACE = "dyneval"
#: How long past its request's timeout a grant may be held before the coordinator takes it back.
GRACE_S = 30.0
#: How often the coordinator looks for dead nodes and overdue grants while grants are out.
SWEEP_S = 2.0
#: Requests one grant may serve on its runner (handed on from a request that ended to the runner's next one)
#: where the run has no budget and the endpoint no requests-per-second limit and half its slots free.
HAND_ON = 64
#: Seconds after its grant past which a grant is not handed on any more (well inside :data:`GRACE_S`).
HOLD_S = 5.0
#: Seconds a runner keeps a grant no request of its own took before it gives it back to the coordinator: longer
#: than a request to another endpoint takes, which a unit makes in between (an interview alternates its target and
#: its evaluator), so the grant is still there for the unit's next request (docs/scale-out.md, "Grants handed on").
LINGER_S = 0.5


def coordinator_name(run_id: str) -> str:
    """The actor name of ``run_id``'s coordinator: every worker finds it by the run id alone."""
    return f"dyneval-limits:{run_id}"


@dataclass(frozen=True)
class RunLimits:
    """The run's budgets, as :class:`runtime.budget.Budget` takes them (unset: ``None`` / empty)."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_tokens_per_role: dict[str, int] = field(default_factory=dict)
    max_cost_per_role: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, config: RunConfig) -> RunLimits:
        return cls(
            config.max_calls,
            config.max_tokens,
            config.max_cost,
            dict(config.max_tokens_per_role),
            dict(config.max_cost_per_role),
        )

    def any(self) -> bool:
        return any(dataclasses.astuple(self))


class _Tally:
    """The usage every reporter (a worker's event log) sent, summed; what the coordinator's ``Budget`` reads in
    place of an event log. A reporter sends its cumulative usage per role, so a repeated or late report replaces
    its earlier one and nothing is counted twice."""

    def __init__(self, spent: dict[str, Usage] | None = None) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, Usage] = {role: dataclasses.replace(u) for role, u in (spent or {}).items()}
        self._reports: dict[str, dict[str, Usage]] = {}

    def report(self, reporter: str, by_role: dict[str, Usage]) -> None:
        with self._lock:
            before = self._reports.get(reporter, {})
            for role in set(before) | set(by_role):
                total = self._roles.setdefault(role, Usage())
                total.add(_difference(by_role.get(role, Usage()), before.get(role, Usage())))
            self._reports[reporter] = {role: dataclasses.replace(u) for role, u in by_role.items()}

    def total(self) -> Usage:
        with self._lock:
            out = Usage()
            for u in self._roles.values():
                out.add(u)
            return out

    def by_role(self) -> dict[str, Usage]:
        with self._lock:
            return {role: dataclasses.replace(u) for role, u in sorted(self._roles.items())}


def _difference(a: Usage, b: Usage) -> Usage:
    return Usage(*(getattr(a, f.name) - getattr(b, f.name) for f in dataclasses.fields(Usage)))


@dataclass
class _Endpoint:
    slots: InFlight
    interval_s: float  # 1 / requests_per_second; 0 = no rate limit
    timeout_s: float
    settings: tuple[int | None, float | None]
    cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    next_start: float = 0.0
    granted: int = 0
    leases: int = 0
    peak: int = 0
    reclaimed: int = 0


@dataclass(frozen=True)
class _Grant:
    endpoint: str
    window: int
    node: str
    deadline: float


class Coordinator:
    """The run's limits for the whole cluster (the body of the Ray actor; :func:`start_coordinator` makes it).

    An asyncio actor: a caller waiting for a slot costs a coroutine, not a thread, and ``release`` is never
    stuck behind waiting ``acquire`` calls. Every method returns plain values (no exception crosses Ray)."""

    def __init__(self, run_id: str, limits: RunLimits, spent: dict[str, Usage] | None = None) -> None:
        self.run_id = run_id
        self._tally = _Tally(spent)
        self._budget = (
            Budget(
                self._tally,
                limits.max_calls,
                limits.max_tokens,
                limits.max_cost,
                dict(limits.max_tokens_per_role),
                dict(limits.max_cost_per_role),
            )
            if limits.any()
            else None
        )
        self._endpoints: dict[str, _Endpoint] = {}
        self._grants: dict[int, _Grant] = {}
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None

    async def register(
        self, key: str, concurrency: int | None, requests_per_second: float | None, timeout_s: float
    ) -> str | None:
        """Declare endpoint ``key`` with its spec's limits (the first declaration wins); a later one with
        different limits is refused with the reason (workers configured differently)."""
        settings = (concurrency, requests_per_second)
        known = self._endpoints.get(key)
        if known is None:
            self._endpoints[key] = _Endpoint(
                InFlight(concurrency), 1.0 / requests_per_second if requests_per_second else 0.0, timeout_s, settings
            )
            return None
        if known.settings != settings:
            return (
                f"endpoint {key} is limited to concurrency={known.settings[0]}, requests_per_second="
                f"{known.settings[1]} by another worker, not concurrency={concurrency}, "
                f"requests_per_second={requests_per_second}: every worker needs the same configuration"
            )
        return None

    async def acquire(
        self,
        key: str,
        node: str,
        reporter: str | None = None,
        usage: dict[str, Usage] | None = None,
        blocking: bool = True,
    ) -> tuple[str, int, float, int] | tuple[str, str]:
        """Wait for a slot of ``key``, then check the run's stop flag and budget (after recording ``reporter``'s
        cumulative ``usage`` per role): ``("granted", grant_id, delay_s)``, where the request may start
        ``delay_s`` from now (the rate limit), and ``uses``, the requests the grant may serve on the caller's runner
        (:data:`HAND_ON` where the run has no budget, the endpoint no rate limit and at most half its slots are
        taken, else 1); ``("busy", "")`` without ``blocking``; ``("stopped", reason)`` or ``("spent", reason)``:
        no request."""
        if reporter is not None and usage is not None:
            self._tally.report(reporter, usage)
        endpoint = self._endpoints[key]
        async with endpoint.cond:
            while not (window := endpoint.slots.acquire(blocking=False)):
                if not blocking:
                    return "busy", ""
                await endpoint.cond.wait()
        refusal = self._refusal()
        if refusal is not None:
            await self._release(key, window, False)
            return refusal
        now = time.monotonic()
        start = max(now, endpoint.next_start)
        endpoint.next_start = start + endpoint.interval_s
        grant = next(self._ids)
        self._grants[grant] = _Grant(key, window, node, start + endpoint.timeout_s + GRACE_S)
        endpoint.granted += 1
        endpoint.leases += 1
        endpoint.peak = max(endpoint.peak, endpoint.slots.in_flight)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        roomy = (
            self._budget is None and not endpoint.interval_s and endpoint.slots.in_flight * 2 <= endpoint.slots.limit
        )
        return "granted", grant, start - now, HAND_ON if roomy else 1

    def _refusal(self) -> tuple[str, str] | None:
        if self._budget is not None:
            try:
                self._budget.check()  # a spent budget raises the actor's stop flag: this run's, as in one process
            except BudgetSpent as exc:
                return "spent", str(exc)
        if stop.stopped():
            return "stopped", "the run was stopped: no new request is sent"
        return None

    async def release(
        self,
        grant: int,
        overloaded: bool = False,
        reporter: str | None = None,
        usage: dict[str, Usage] | None = None,
        served: int = 1,
    ) -> None:
        """Free ``grant`` (``overloaded``: the endpoint refused its last request as overloaded, 429 or timeout),
        after recording ``reporter``'s cumulative ``usage``; ``served``: the requests it served."""
        if reporter is not None and usage is not None:
            self._tally.report(reporter, usage)
        held = self._grants.pop(grant, None)
        if held is not None:
            self._endpoints[held.endpoint].granted += served - 1
            await self._release(held.endpoint, held.window, overloaded, served)

    async def _release(self, key: str, window: int, overloaded: bool, served: int = 1) -> None:
        endpoint = self._endpoints[key]
        async with endpoint.cond:
            endpoint.slots.release(window, overloaded=overloaded, served=served)
            endpoint.cond.notify_all()

    async def report(self, reporter: str, usage: dict[str, Usage]) -> None:
        """Record ``reporter``'s cumulative usage per role (e.g. after its last request of a unit)."""
        self._tally.report(reporter, usage)

    async def request_stop(self) -> None:
        """Stop the run everywhere: every later ``acquire`` is refused (Ctrl-C or SIGTERM at the driver)."""
        stop.request_stop()

    async def stats(self) -> dict[str, Any]:
        """Per endpoint: slots taken now (requests in flight, and grants a runner holds for its next request), the
        most ever taken at once, requests granted (those a grant served once handed back), grants made (round trips
        that took a slot), the adaptive limit,
        overloads and grants taken back from gone holders; the usage reported and what spent the budget."""
        endpoints = {
            key: {
                "in_flight": e.slots.in_flight,
                "peak_in_flight": e.peak,
                "granted": e.granted,
                "leases": e.leases,
                "limit": e.slots.limit,
                "overloads": e.slots.overloads,
                "reclaimed": e.reclaimed,
            }
            for key, e in self._endpoints.items()
        }
        return {
            "endpoints": endpoints,
            "usage": self._tally.total(),
            "by_role": self._tally.by_role(),
            "budget_reached": self._budget.reached if self._budget else None,
            "stopped": stop.stopped(),
        }

    async def reclaim(self) -> int:
        """Take back the grants of nodes Ray reports dead and grants held past their deadline; how many."""
        if not self._grants:
            return 0
        import ray

        nodes = await asyncio.to_thread(ray.nodes)
        dead = {n["NodeID"] for n in nodes if not n["Alive"]}
        now = time.monotonic()
        gone = [g for g, held in self._grants.items() if held.node in dead or held.deadline < now]
        for grant in gone:
            held = self._grants.pop(grant)
            self._endpoints[held.endpoint].reclaimed += 1
            await self._release(held.endpoint, held.window, False)
        return len(gone)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            await self.reclaim()


def start_coordinator(run_id: str, limits: RunLimits | None = None, spent: dict[str, Usage] | None = None) -> Any:
    """The coordinator of ``run_id``: created (on this process's node, with no CPU) or, if this process made it
    already, that one. Keep the handle while the run goes on: the actor is owned by this process and ends when
    the process does (killed or not) or holds no handle to it any more. A resumed run makes its own, from
    ``spent``, the usage per role of earlier sessions, which the budget counts. Needs ``ray.init`` first."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # on the driver's node: with no CPU asked, Ray may place it on any node, which may die mid-run
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(Coordinator).options(
        name=coordinator_name(run_id),
        namespace=NAMESPACE,
        get_if_exists=True,
        num_cpus=0,
        max_restarts=0,
        max_concurrency=10_000,
        scheduling_strategy=here,
    )
    return actor.remote(run_id, limits or RunLimits(), spent)


def stop_coordinator(run_id: str) -> None:
    """Remove ``run_id``'s coordinator (as a session ends: a process that goes on, such as an application calling
    ``dyneval.evaluate``, would keep it); nothing if there is none."""
    import ray

    try:
        ray.kill(ray.get_actor(coordinator_name(run_id), namespace=NAMESPACE))
    except ValueError:
        pass


class ClusterLimits:
    """A process's client of ``run_id``'s coordinator (found by name; create it first with
    :func:`start_coordinator`).

    ``usage``: what this process itself spent so far, per role (e.g. the bound ``by_role`` of the worker's own
    :class:`runtime.events.EventLog`, which must hold only this process's exchanges); it is sent with each
    ``acquire`` when it changed, so the budget counts every worker's calls. Make one in each worker process
    (from the run id), not on the driver for the workers: it belongs to the process whose usage it reports.
    """

    def __init__(self, run_id: str, usage: Callable[[], dict[str, Usage]] | None = None) -> None:
        import ray

        self.run_id = run_id
        self.usage = usage
        try:
            # Any: ray types the methods of a handle it looks up as Never (the Coordinator's are called remotely)
            self.actor: Any = ray.get_actor(coordinator_name(run_id), namespace=NAMESPACE)
        except ValueError:
            raise RuntimeError(
                f"run {run_id} has no coordinator in this Ray cluster: the driver starts it "
                "(start_coordinator) before any worker asks for a slot"
            ) from None
        self.node = ray.get_runtime_context().get_node_id()
        self.reporter = f"{self.node[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._sent: dict[str, Usage] | None = None
        self._lock = threading.Lock()

    def slots(self, key: str, spec: ModelSpec) -> ClusterSlots:
        """The cluster-wide slots of endpoint ``key`` (the same key on every worker, e.g. the spec's JSON) under
        ``spec``'s ``concurrency`` and ``requests_per_second``."""
        return ClusterSlots(self, self.register(key, spec))

    def register(self, key: str, spec: ModelSpec) -> str:
        """Declare endpoint ``key`` with ``spec``'s limits to the coordinator (refused if another worker declared
        it with other limits); ``key``."""
        import ray

        problem = ray.get(self.actor.register.remote(key, spec.concurrency, spec.requests_per_second, spec.timeout_s))
        if problem:
            raise RuntimeError(problem)
        return key

    def changed_usage(self) -> dict[str, Usage] | None:
        """This process's usage per role if it changed since last sent (then counted as sent), else ``None``."""
        if self.usage is None:
            return None
        now = self.usage()
        with self._lock:
            if now == self._sent:
                return None
            self._sent = now
        return now

    def flush(self) -> None:
        """Send this process's usage now and wait until the coordinator has it (e.g. as a unit ends)."""
        import ray

        usage = self.changed_usage()
        if usage is not None:
            ray.get(self.actor.report.remote(self.reporter, usage))

    def request_stop(self) -> None:
        """Refuse every later request of the run on every worker (and here)."""
        import ray

        stop.request_stop()
        ray.get(self.actor.request_stop.remote())

    def stats(self) -> dict[str, Any]:
        import ray

        return ray.get(self.actor.stats.remote())

    def in_flight(self) -> int:
        """The run's requests in flight now, on every worker (granted, not yet released)."""
        return sum(e["in_flight"] for e in self.stats()["endpoints"].values())


@dataclass
class _Held:
    """A grant on this process: the requests it may still serve, those it served, when it was granted and since
    when it waits unused (``None``: a request holds it)."""

    grant: int
    uses: int
    served: int
    granted: float
    idle_since: float | None = None


class ClusterSlots:
    """One endpoint's slots for the whole cluster, used by the call layer as its ``InFlight``: ``acquire``
    (waits for a slot, then the rate limit's delay) returns the grant that ``release`` frees. A refused
    request raises as in one process: :class:`runtime.budget.BudgetSpent` for a spent budget,
    :class:`runtime.stop.StopRequested` once the run was stopped, and sets this process's stop flag, so its
    other threads send nothing either.

    A grant the coordinator lets serve several requests (``uses``, :meth:`Coordinator.acquire`) is kept here
    when its request ends and taken by this process's next ``acquire`` without a round trip, until it served
    ``uses`` requests, was granted :data:`HOLD_S` ago, its last request was refused as overloaded, the run
    stopped here, or no request took it within :data:`LINGER_S`; then it goes back with the requests it served.
    A request takes the grant kept last, so the grants a runner holds beyond what its requests need age out. So
    a runner asks the coordinator about once per :data:`HAND_ON` requests while the endpoint has room, and every
    request still holds one of the endpoint's slots: the limit holds as before."""

    def __init__(self, client: ClusterLimits, key: str) -> None:
        self.client, self.key = client, key
        self.in_flight = 0  # this process's requests (the live progress line sums them)
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}  # grant -> its use here
        self._sweeping = False

    def acquire(self, blocking: bool = True) -> int:
        with self._lock:  # once the run stopped here, kept grants only go back (at the next sweep)
            idle = [] if stop.stopped() else [h for h in self._held.values() if h.idle_since is not None]
            kept = max(idle, key=lambda h: h.idle_since or 0.0, default=None)  # the last one back: the others age out
            if kept is not None:
                kept.idle_since = None
                self.in_flight += 1
                return kept.grant
        import ray

        c = self.client
        usage = c.changed_usage()
        answer = ray.get(
            c.actor.acquire.remote(self.key, c.node, c.reporter if usage is not None else None, usage, blocking)
        )
        if answer[0] == "busy":
            return 0
        if answer[0] != "granted":
            stop.request_stop()
            if answer[0] == "spent":
                stop.refuse(answer[1], BudgetSpent)
            stop.raise_if_stopped()
        _, grant, delay, uses = answer
        with self._lock:
            self.in_flight += 1
            self._held[grant] = _Held(grant, uses, 0, time.monotonic())
        if delay > 0:
            time.sleep(delay)
        return grant

    def release(self, window: int = 0, *, overloaded: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            self.in_flight -= 1
            held = self._held[window]
            held.served += 1
            if overloaded or held.served >= held.uses or now - held.granted > HOLD_S or stop.stopped():
                del self._held[window]
            else:
                held.idle_since = now
                if not self._sweeping:
                    self._sweeping = True
                    threading.Thread(target=self._sweep, name="grant-sweep", daemon=True).start()
                return
        self._give_back(held, overloaded)

    def _give_back(self, held: _Held, overloaded: bool = False) -> None:
        c = self.client
        usage = c.changed_usage()
        # not awaited: the caller goes on at once
        c.actor.release.remote(held.grant, overloaded, c.reporter if usage is not None else None, usage, held.served)

    def _sweep(self) -> None:
        """Give back the grants no request took within :data:`LINGER_S` (all of them once the run stopped here);
        ends once none is kept."""
        while True:
            time.sleep(LINGER_S)
            now = time.monotonic()
            with self._lock:
                unused = [
                    h
                    for h in self._held.values()
                    if h.idle_since is not None and (stop.stopped() or now - h.idle_since >= LINGER_S)
                ]
                for held in unused:
                    del self._held[held.grant]
                self._sweeping = any(h.idle_since is not None for h in self._held.values())
            for held in unused:
                self._give_back(held)
            if not self._sweeping:
                return
