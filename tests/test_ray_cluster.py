"""A real Ray cluster on this machine (a head and two worker nodes, ``tests/ray_cluster.py``): tasks run on each
worker node, a killed node's task is retried on a survivor, and the run's coordinator (``runtime.cluster``) holds
an endpoint's in-flight limit, its requests-per-second spacing and the run's budget across both workers, counted
by a loopback server that sees every request.

The tests share one cluster (starting one takes ~30 s on 2 cores); the one that kills a node runs last.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from dyneval.runtime import stop
from dyneval.runtime.budget import BudgetSpent
from dyneval.runtime.events import Usage
from dyneval.state.config import ModelSpec
from tests.fake_endpoint import loopback
from tests.ray_cluster import RayCluster, cluster_or_skip

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
cluster_mod = pytest.importorskip("dyneval.runtime.cluster")


class Counter:
    """A loopback HTTP server that counts requests in flight: each ``GET /NODE`` is held ``hold_s`` seconds;
    the most in flight at once, the requests per node and their arrival times are kept."""

    def __init__(self, hold_s: float = 0.05) -> None:
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0
        self.arrivals: list[tuple[float, str]] = []
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                with counter.lock:
                    counter.in_flight += 1
                    counter.peak = max(counter.peak, counter.in_flight)
                    counter.arrivals.append((time.monotonic(), self.path.strip("/")))
                time.sleep(hold_s)
                with counter.lock:
                    counter.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = loopback(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def by_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, node in self.arrivals:
            out[node] = out.get(node, 0) + 1
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayCluster]:
    """A head and two worker nodes, shared by this module's tests."""
    yield from cluster_or_skip()


@pytest.fixture
def counter() -> Iterator[Counter]:
    c = Counter()
    yield c
    c.close()


@ray.remote(num_cpus=0)
def where() -> str:
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0)
def call_endpoint(run_id: str | None, spec: ModelSpec, url: str, node: str, threads: int, calls: int) -> dict[str, Any]:
    """``threads`` threads each make ``calls`` requests to ``url``; with ``run_id`` each request is bracketed by
    the run's cluster slots, and each success is counted in a usage reported to the coordinator (one call of
    role ``target``). What came back: requests sent and refused."""
    from dyneval.runtime.cluster import ClusterLimits

    sent = refused = 0
    lock = threading.Lock()
    client = ClusterLimits(run_id, usage=lambda: {"target": Usage(calls=sent)}) if run_id else None
    slots = client.slots(spec.model_dump_json(), spec) if client else None

    def work() -> None:
        nonlocal sent, refused
        for _ in range(calls):
            try:
                grant = slots.acquire() if slots else 0
            except (BudgetSpent, stop.StopRequested):
                with lock:
                    refused += 1
                continue
            try:
                urllib.request.urlopen(f"{url}/{node}", timeout=60).read()
            finally:
                if slots:
                    slots.release(grant)
            with lock:  # counted after the release, as the call layer logs an exchange
                sent += 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if client:
        client.flush()
    return {"sent": sent, "refused": refused}


def spread(
    run_id: str | None, spec: ModelSpec, url: str, cluster: RayCluster, threads: int = 4, calls: int = 6
) -> list[dict[str, Any]]:
    """:func:`call_endpoint` on both worker nodes at once."""
    return ray.get(
        [call_endpoint.options(resources={w: 1}).remote(run_id, spec, url, w, threads, calls) for w in cluster.workers]
    )


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"test-{request.node.name}"
    yield name
    cluster_mod.stop_coordinator(name)


def coordinator_says(coordinator: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call one of the coordinator's methods in this process, as its actor would run it."""
    return asyncio.run(getattr(coordinator, method)(*args, **kwargs))


@pytest.fixture
def in_process() -> Iterator[Any]:
    """A coordinator object run in this process (its logic without Ray), leaving this process's stop flag down
    (its budget tests raise it)."""
    yield cluster_mod.Coordinator
    stop.clear()


def test_the_coordinator_halves_an_endpoints_limit_once_per_window_of_overloads(in_process: Any) -> None:
    async def scenario() -> list[Any]:
        c = in_process("r", cluster_mod.RunLimits())
        await c.register("e", 4, None, 30.0)
        grants = [(await c.acquire("e", "node"))[1] for _ in range(4)]
        assert await c.acquire("e", "node", blocking=False) == ("busy", "")
        for g in grants:  # a burst of 429s from one window halves the limit once
            await c.release(g, overloaded=True)
        stats = await c.stats()
        return [stats["endpoints"]["e"]["limit"], stats["endpoints"]["e"]["overloads"]]

    assert asyncio.run(scenario()) == [2.0, 4]


def test_a_second_report_from_a_worker_replaces_its_first(in_process: Any) -> None:
    c = in_process("r", cluster_mod.RunLimits(max_calls=5), {"target": Usage(calls=1)})
    coordinator_says(c, "report", "w1", {"target": Usage(calls=2)})
    coordinator_says(c, "report", "w1", {"target": Usage(calls=3), "evaluator": Usage(calls=1)})
    coordinator_says(c, "report", "w2", {"target": Usage(calls=1)})
    stats = coordinator_says(c, "stats")
    assert stats["usage"].calls == 1 + 3 + 1 + 1  # earlier sessions + w1's latest + w2
    assert stats["by_role"]["target"].calls == 5 and stats["by_role"]["evaluator"].calls == 1
    assert stats["budget_reached"] is None


def test_a_spent_budget_refuses_the_next_request_and_stops_the_run(in_process: Any) -> None:
    async def scenario() -> list[Any]:
        c = in_process("r", cluster_mod.RunLimits(max_calls=2))
        await c.register("e", None, None, 30.0)
        first = await c.acquire("e", "node", "w1", {"target": Usage(calls=1)})
        second = await c.acquire("e", "node", "w1", {"target": Usage(calls=2)})
        return [first[0], second, (await c.stats())["endpoints"]["e"]["in_flight"]]

    first, second, in_flight = asyncio.run(scenario())
    assert first == "granted"
    assert second[0] == "spent" and "2 calls of --max-calls 2" in second[1]
    assert in_flight == 1  # the refused request's slot went back
    assert stop.stopped()


def test_workers_configured_differently_are_refused(in_process: Any) -> None:
    c = in_process("r", cluster_mod.RunLimits())
    assert coordinator_says(c, "register", "e", 4, 2.0, 30.0) is None
    assert coordinator_says(c, "register", "e", 4, 2.0, 30.0) is None
    assert "every worker needs the same configuration" in coordinator_says(c, "register", "e", 8, 2.0, 30.0)


def test_the_cluster_has_a_head_and_two_workers_and_runs_a_task_on_each_worker(ray_nodes: RayCluster) -> None:
    assert ray_nodes.alive() == {"head", "worker1", "worker2"}
    assert len({n.node_id for n in ray_nodes.nodes.values()}) == 3
    for name in ray_nodes.workers:
        assert ray.get(where.options(resources={name: 1}).remote()) == ray_nodes.nodes[name].node_id


def test_every_process_of_the_cluster_and_its_driver_listens_on_loopback_only(ray_nodes: RayCluster) -> None:
    for name in ray_nodes.workers:  # each worker node has started a worker process
        ray.get(where.options(resources={name: 1}).remote())
    assert ray_nodes.beyond_loopback() == []
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}


def test_the_in_flight_limit_holds_across_tasks_on_both_workers(
    ray_nodes: RayCluster, counter: Counter, run_id: str
) -> None:
    spec = ModelSpec(model="m", base_url=counter.url + "/v1", concurrency=2)
    uncapped = spread(None, spec, counter.url, ray_nodes)  # the same load without the coordinator
    assert sum(r["sent"] for r in uncapped) == 48 and counter.peak > 2
    counter.peak = 0
    counter.arrivals.clear()
    coordinator = cluster_mod.start_coordinator(run_id)  # the test's handle keeps it
    results = spread(run_id, spec, counter.url, ray_nodes)
    assert [r["sent"] for r in results] == [24, 24]
    assert counter.peak == 2  # never more than the spec's concurrency, and both slots were used
    assert counter.by_node() == {"worker1": 24, "worker2": 24}
    deadline = time.monotonic() + 60  # a grant kept for a next request goes back (counted) once unused LINGER_S
    while (stats := ray.get(coordinator.stats.remote()))["endpoints"][spec.model_dump_json()]["in_flight"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (endpoint,) = stats["endpoints"].values()
    assert endpoint["granted"] == 48 and endpoint["peak_in_flight"] == 2
    assert stats["usage"].calls == 48  # both workers' reports, each counted once


def test_the_requests_per_second_limit_spaces_requests_from_both_workers(
    ray_nodes: RayCluster, counter: Counter, run_id: str
) -> None:
    spec = ModelSpec(model="m", base_url=counter.url + "/v1", requests_per_second=20)
    coordinator = cluster_mod.start_coordinator(run_id)
    spread(run_id, spec, counter.url, ray_nodes, threads=2, calls=5)
    times = sorted(t for t, _ in counter.arrivals)
    assert len(times) == 20 and set(counter.by_node()) == {"worker1", "worker2"}
    assert [e["granted"] for e in ray.get(coordinator.stats.remote())["endpoints"].values()] == [20]
    # 20 requests at 20/s: the first at once, each later one at least ~1/20 s after the one before
    assert times[-1] - times[0] >= 19 / 20 * 0.9


def test_the_run_budget_holds_across_both_workers(ray_nodes: RayCluster, counter: Counter, run_id: str) -> None:
    spec = ModelSpec(model="m", base_url=counter.url + "/v1", concurrency=1)
    coordinator = cluster_mod.start_coordinator(run_id, cluster_mod.RunLimits(max_calls=10))
    results = spread(run_id, spec, counter.url, ray_nodes, threads=2, calls=10)
    sent = sum(r["sent"] for r in results)
    # usage goes with every acquire and release; a request's own usage is counted just after its release (as the
    # call layer logs it), so each of the 2 worker processes may start one request past the budget; 2 budgets
    # held per process would have let 20 through
    assert sent == len(counter.arrivals) and 10 <= sent <= 12
    assert sum(r["refused"] for r in results) == 40 - sent
    stats = ray.get(coordinator.stats.remote())
    # the budget is seen spent at the first acquire after the 10th call was counted; by then the other process's
    # one request past the budget may have been counted too: what it says was spent is between 10 and what was sent
    noticed = re.fullmatch(r"(\d+) calls of --max-calls 10, .*", stats["budget_reached"])
    assert noticed and 10 <= int(noticed.group(1)) <= sent and stats["stopped"]


@ray.remote(num_cpus=1, max_retries=2)
def hold_then_report(marks: str) -> str:
    """Append this attempt's node to ``marks``; the first attempt then waits (for its node to be killed). One
    CPU: only worker nodes have one, so a retry cannot land on the head."""
    node = ray.get_runtime_context().get_node_id()
    path = Path(marks)
    with path.open("a") as f:
        f.write(node + "\n")
    if len(path.read_text().split()) == 1:
        time.sleep(3600)
    return node


@ray.remote(num_cpus=0)
def take_slot(run_id: str, spec: ModelSpec) -> int:
    from dyneval.runtime.cluster import ClusterLimits

    return ClusterLimits(run_id).slots(spec.model_dump_json(), spec).acquire()


def test_killing_a_worker_node_leaves_the_others_retries_its_task_and_frees_its_slots(
    ray_nodes: RayCluster, run_id: str, tmp_path: Path
) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    victim, survivor = ray_nodes.workers
    # a slot of a limit-1 endpoint taken on the victim and never released (its holder dies with the node)
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", concurrency=1)
    coordinator = cluster_mod.start_coordinator(run_id)
    assert ray.get(take_slot.options(resources={victim: 1}).remote(run_id, spec)) > 0
    # a task that prefers the victim (soft affinity: it may run elsewhere if the victim is gone)
    marks = tmp_path / "marks"
    ref = hold_then_report.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray_nodes.nodes[victim].node_id, soft=True)
    ).remote(str(marks))
    while not marks.exists():
        time.sleep(0.1)
    ray_nodes.kill(victim)
    assert ray_nodes.alive() == {"head", survivor}
    assert ray.get(ref) == ray_nodes.nodes[survivor].node_id
    assert marks.read_text().split() == [ray_nodes.nodes[victim].node_id, ray_nodes.nodes[survivor].node_id]
    # the dead node's slot comes back: a task on the survivor gets the endpoint's only slot
    assert ray.get(take_slot.options(resources={survivor: 1}).remote(run_id, spec)) > 0
    stats = ray.get(coordinator.stats.remote())
    (endpoint,) = stats["endpoints"].values()
    assert endpoint["reclaimed"] == 1 and endpoint["granted"] == 2
