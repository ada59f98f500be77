"""Leases on a real Ray cluster (``tests/ray_cluster.py``: a head and two worker nodes on 127.0.0.1) with a
throw-away PostgreSQL: a unit runner takes a unit's lease only once it can start the unit, and a unit whose lease
is lost stops and is sent again, so every planned unit ends with exactly one final record, and the run exits 0
only when every unit is ``ok``.

The runners here are slow to start (``tests/slow_setup.py``, through a variable only the cluster's nodes have):
their graph takes longer than a lease (``LEASE_S``) to build, as a fresh runner's did on a loaded node. The lease
used to be taken before the graph was built and renewed only after: it ran out, the unit ran to its end anyway,
its final write was refused, and the driver dropped it, so the run exited 0 with units missing.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.golden_runs import respond
from tests.ray_cluster import RayCluster, cluster_or_skip
from tests.ray_runs import REPO, driver_command, interview_seeds, planned, records, whole_lines
from tests.slow_setup import SLOW_SETUP
from tests.standin_endpoint import StandIn

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from dyneval.runtime.executors.ray import LEASE_S  # noqa: E402
from dyneval.stores.unit_claims import UnitClaims  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Any:
    """Two worker nodes whose unit runners take longer than a lease to set up; the test that kills a node runs
    last."""
    yield from cluster_or_skip(workers=2, cpus_per_worker=1, env={SLOW_SETUP: str(LEASE_S + 2)})


def _driver(cluster: RayCluster, standin: StandIn, dsn: str, out: Path, seeds: str) -> subprocess.Popen[str]:
    """``run.py`` on the cluster with ``SlowSetupInterview`` as ``interview``; the driver itself sets up at once."""
    env = {k: v for k, v in cluster.env.items() if k != SLOW_SETUP}
    env["DYNEVAL_PROTOCOLS"] = "interview=tests.slow_setup:SlowSetupInterview"
    return subprocess.Popen(
        driver_command(
            standin.url,
            dsn,
            out,
            "--data",
            seeds,
            "--concurrency",
            "4",
            "--ray-address",
            cluster.address,
            "--skip-preflight",
        ),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run_dir(out: Path, driver: subprocess.Popen[str]) -> Path:
    while not list(out.glob("*/units.jsonl")):
        assert driver.poll() is None, driver.communicate()[0]
        time.sleep(0.1)
    return next(out.glob("*/units.jsonl")).parent


def _ended_once_each(run_dir: Path, dsn: str) -> Counter[str]:
    """The statuses of the run's records, checked to be one per planned unit, each with its one final record in
    the claims table."""
    units, lines = planned(run_dir), records(run_dir)
    assert sorted(r["unit_id"] for r in lines) == sorted(units), "a planned unit has no record, or two"
    with UnitClaims(dsn) as claims:
        assert sorted(claims.final_records(run_dir.name)) == sorted(units)
    return Counter(r["status"] for r in lines)


def test_a_unit_whose_lease_is_taken_over_stops_and_is_sent_again_and_ends_once(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    """Another holder takes a running unit's lease (its token raised in the claims table, as a takeover does):
    the runner's next renewal finds it lost, the unit stops at its next request and comes back to the driver,
    which sends it again; that attempt claims it and continues it from its checkpoint."""
    dsn, out = fresh_postgres_db("ray_lease_lost"), tmp_path / "out"
    with StandIn(respond=respond, latency_s=0.2) as standin:
        driver = _driver(cluster, standin, dsn, out, interview_seeds(tmp_path / "seeds.jsonl", 12))
        run_dir = _run_dir(out, driver)
        stolen = None
        with psycopg.connect(dsn, autocommit=True) as conn:
            while stolen is None:  # a unit that claimed and sent a request, its final record not written yet
                assert driver.poll() is None, driver.communicate()[0]
                for unit in sorted({e["unit"] for e in whole_lines(run_dir / "events.jsonl")}):
                    stolen = conn.execute(
                        "UPDATE dyneval_unit_claims SET token = token + 1, worker = 'another', "
                        "lease_expires_at = now() WHERE run_id = %s AND unit_id = %s AND NOT final AND token = 1 "
                        "RETURNING unit_id, token",
                        (run_dir.name, unit),
                    ).fetchone()
                    if stolen:
                        break
                time.sleep(0.05)
        output = driver.communicate(timeout=600)[0]
    assert driver.returncode == 0, output
    assert _ended_once_each(run_dir, dsn) == {"ok": 12}
    unit, token = stolen
    with UnitClaims(dsn) as claims:
        final = claims.final_records(run_dir.name)[unit]
    assert final.worker != "another" and final.token > token  # claimed again after the takeover, and finished


def test_runners_slower_to_set_up_than_a_lease_and_a_node_killed_mid_run_leave_one_final_record_per_unit(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    """The acceptance case: every runner, the one that replaces the killed node's too, builds its graph for longer
    than a lease; worker node 1 is killed once a few units ended. Every unit ends ``ok`` exactly once and the run
    exits 0; meanwhile no process of the cluster or the driver listens beyond 127.0.0.1."""
    dsn, out = fresh_postgres_db("ray_lease_slow"), tmp_path / "out"
    with StandIn(respond=respond, latency_s=0.1) as standin:
        driver = _driver(cluster, standin, dsn, out, interview_seeds(tmp_path / "seeds.jsonl", 24))
        run_dir = _run_dir(out, driver)
        while len(records(run_dir)) < 4:
            assert driver.poll() is None, driver.communicate()[0]
            time.sleep(0.1)
        assert cluster.beyond_loopback(driver.pid) == []
        cluster.kill("worker1")
        output = driver.communicate(timeout=900)[0]
    assert cluster.alive() == {"head", "worker2"}
    statuses = _ended_once_each(run_dir, dsn)
    assert statuses == {"ok": 24}, [r.get("error") for r in records(run_dir) if r["status"] != "ok"][:3]
    assert driver.returncode == 0, output
