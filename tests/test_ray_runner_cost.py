"""What keeps a Ray unit runner close to a thread's cost without giving up what the log and the checkpoints
guarantee, on a head and one worker node started as separate ``ray start`` processes (``tests/ray_cluster.py``).

What must hold: a runner has compiled the protocol's graph before the driver sends it a unit; a checkpoint is never
stored before the exchanges that led to it are written (else a unit continued from it elsewhere would hold calls
the log lacks); and a runner asks the coordinator for a slot about once per several requests while the endpoint
has room, the requests all counted. (That a runner's exchanges are written once each, in far fewer batches than
exchanges: ``tests/test_event_batches.py``.)
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dyneval.protocols.interview import InterviewProtocol
from dyneval.runtime.runner import open_run
from dyneval.state.config import ModelSpec, RunConfig, StoreConfig
from dyneval.stores.checkpoints import open_checkpointer
from tests.ray_cluster import RayCluster, cluster_or_skip

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from dyneval.runtime import cluster as cluster_mod  # noqa: E402
from dyneval.runtime.executors.ray import open_ray  # noqa: E402


class MarkingInterview(InterviewProtocol):
    """The interview protocol, whose graph building appends the building process's id to ``marker``."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def builder(self) -> Any:
        with open(self.marker, "a") as out:
            out.write(f"{os.getpid()}\n")
        return super().builder()


@pytest.fixture(scope="module")
def cluster() -> Any:
    yield from cluster_or_skip(workers=1, cpus_per_worker=1)


def _until(done: Any, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_runners_compile_the_protocols_graph_before_the_driver_sends_a_unit(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "built"
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1")  # never called: no unit is sent
    config = RunConfig(
        protocol="interview",
        out=str(tmp_path / "out"),
        models={"m": spec},
        roles={"target": "m", "evaluator": "m"},
        concurrency=4,
        stores=StoreConfig(postgres_dsn=fresh_postgres_db("ray_warm")),
    )
    protocol = MarkingInterview(str(marker))
    run = open_run(protocol, config, run_id=None, console=Console(quiet=True))
    run.run_dir.mkdir(parents=True)
    with open_ray(protocol, run, cluster.address) as session:
        # before: a runner built the graph at its first unit, so with none sent nothing was ever built
        assert _until(marker.exists), "no runner built the graph while no unit was sent"
        assert session.runners.calls == {}  # nothing was sent to a runner
    builders = {int(pid) for pid in marker.read_text().split()}
    assert builders and os.getpid() not in builders  # built in the runner's process, not the driver's


def test_a_checkpoint_is_not_stored_when_the_exchanges_before_it_could_not_be_sent(
    fresh_postgres_db: Any, tmp_path: Path
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    dsn = fresh_postgres_db("ray_before_write")

    def database_gone() -> None:
        raise RuntimeError("the exchanges cannot be written")

    thread = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}", "checkpoint_ns": ""}}
    with open_checkpointer(tmp_path, dsn, before_write=database_gone) as saver:
        with pytest.raises(RuntimeError, match="cannot be written"):
            saver.put(thread, empty_checkpoint(), {}, {})  # type: ignore[arg-type]  # metadata: an empty one
        with pytest.raises(RuntimeError, match="cannot be written"):
            saver.put_writes({**thread, "configurable": {**thread["configurable"], "checkpoint_id": "c"}}, [], "task")
        assert saver.get_tuple(thread) is None  # nothing was stored


@ray.remote(num_cpus=1)
def requests_through_slots(run_id: str, spec: ModelSpec, threads: int, requests: int) -> int:
    """``threads`` threads each take and give back a slot ``requests`` times (a request that takes no time)."""
    from dyneval.runtime.cluster import ClusterLimits

    slots = ClusterLimits(run_id).slots(spec.model_dump_json(), spec)

    def work() -> None:
        for _ in range(requests):
            slots.release(slots.acquire())

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return slots.in_flight


def test_a_runner_asks_the_coordinator_about_once_per_several_requests_while_the_endpoint_has_room(
    cluster: RayCluster,
) -> None:
    run_id = f"test-hand-on-{uuid.uuid4().hex[:8]}"
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", concurrency=64)
    coordinator = cluster_mod.start_coordinator(run_id)
    try:
        assert ray.get(requests_through_slots.remote(run_id, spec, 4, 40)) == 0
        assert _until(
            lambda: ray.get(coordinator.stats.remote())["endpoints"][spec.model_dump_json()]["in_flight"] == 0
        )
        (endpoint,) = ray.get(coordinator.stats.remote())["endpoints"].values()
        assert endpoint["granted"] == 160  # every request counted
        assert endpoint["leases"] <= 160 / 2  # before: one round trip to the coordinator per request
    finally:
        cluster_mod.stop_coordinator(run_id)


@ray.remote(num_cpus=1)
def alternating_requests(run_id: str, specs: list[ModelSpec], threads: int, requests: int, latency_s: float) -> None:
    """``threads`` threads each make ``requests`` requests of ``latency_s`` seconds, alternating between the
    endpoints of ``specs`` (as an interview unit alternates its target's and its evaluator's requests)."""
    from dyneval.runtime.cluster import ClusterLimits

    client = ClusterLimits(run_id)
    slots = [client.slots(spec.model_dump_json(), spec) for spec in specs]

    def work() -> None:
        for i in range(requests):
            endpoint = slots[i % len(slots)]
            grant = endpoint.acquire()
            time.sleep(latency_s)
            endpoint.release(grant)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def test_a_runner_alternating_two_endpoints_keeps_its_grants_across_the_other_endpoints_requests(
    cluster: RayCluster,
) -> None:
    """A grant waits on its runner longer than a request to the other endpoint takes, so a runner whose units
    alternate two endpoints (requests of 0.1 s here) still asks the coordinator about once per several requests:
    a grant kept only 50 ms went back during every other request, one round trip per request (40 leases of 40)."""
    run_id = f"test-alternate-{uuid.uuid4().hex[:8]}"
    specs = [ModelSpec(model=m, base_url="http://127.0.0.1:9/v1", concurrency=64) for m in ("target", "evaluator")]
    coordinator = cluster_mod.start_coordinator(run_id)
    try:
        ray.get(alternating_requests.remote(run_id, specs, 4, 10, 0.1))
        assert _until(
            lambda: all(e["in_flight"] == 0 for e in ray.get(coordinator.stats.remote())["endpoints"].values())
        )
        endpoints = ray.get(coordinator.stats.remote())["endpoints"].values()
        assert sum(e["granted"] for e in endpoints) == 40  # every request counted
        assert sum(e["leases"] for e in endpoints) <= 40 / 2
    finally:
        cluster_mod.stop_coordinator(run_id)
