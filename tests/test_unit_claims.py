"""Claims, leases and exactly-once final records of units in PostgreSQL (``stores.unit_claims``), against the
throw-away PostgreSQL server of ``tests/conftest.py``."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dyneval.stores.unit_claims import Claim, Heartbeat, Lease, UnitClaims

pytest.importorskip("psycopg")


@pytest.fixture
def claims_dsn(fresh_postgres_db: Callable[[str], str]) -> str:
    return fresh_postgres_db("unit_claims")


def race(dsn: str, n: int, action: Callable[[UnitClaims, int], Any]) -> list[Any]:
    """``action(store, i)`` on ``n`` threads, each with its own connection, released together by a barrier."""
    stores = [UnitClaims(dsn) for _ in range(n)]
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def go(i: int) -> None:
        barrier.wait()
        out[i] = action(stores[i], i)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    return out


def wait_expired(store: UnitClaims, lease: Lease) -> None:
    """Until the database's clock says ``lease`` ran out (the reaper's query lists its unit)."""
    while lease.unit_id not in store.expired(lease.run_id):
        time.sleep(0.05)


def test_of_racing_claimers_exactly_one_gets_each_unit(claims_dsn: str) -> None:
    units = [f"u{i}" for i in range(12)]

    def claim_all(store: UnitClaims, i: int) -> list[Claim]:
        return [store.claim("run-a", u, f"w{i}", lease_s=60) for u in units]

    outcomes = race(claims_dsn, 4, claim_all)
    for k, unit in enumerate(units):
        per_worker = [outcomes[w][k] for w in range(4)]
        winners = [c for c in per_worker if c.status == "claimed"]
        assert len(winners) == 1, (unit, per_worker)
        assert winners[0].lease.token == 1
        losers = [c for c in per_worker if c.status != "claimed"]
        assert {c.status for c in losers} == {"held"}
        assert {c.holder for c in losers} == {winners[0].lease.worker}


def test_an_expired_lease_is_taken_over_and_the_old_holders_late_final_write_is_refused(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        first = store.claim("run-a", "u1", "w1", lease_s=0.3).lease
        assert store.claim("run-a", "u1", "w2", lease_s=60).status == "held"
        wait_expired(store, first)
        taken = store.claim("run-a", "u1", "w2", lease_s=60)
        assert taken.status == "claimed" and taken.lease.token == first.token + 1
        assert not store.heartbeat(first)  # the old holder learns it lost the unit
        assert not store.finish(first, {"unit_id": "u1", "by": "w1"}, {"calls": 1})
        assert store.heartbeat(taken.lease)
        assert store.finish(taken.lease, {"unit_id": "u1", "by": "w2"}, {"calls": 3})
        final = store.final_records("run-a")
        assert list(final) == ["u1"]
        assert final["u1"].record == {"unit_id": "u1", "by": "w2"} and final["u1"].usage == {"calls": 3}
        assert (final["u1"].worker, final["u1"].token) == ("w2", 2)
        assert store.claim("run-a", "u1", "w3", lease_s=60).status == "final"


def test_an_expired_lease_refuses_the_final_write_even_before_a_takeover(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        lease = store.claim("run-a", "u1", "w1", lease_s=0.3).lease
        wait_expired(store, lease)
        assert not store.finish(lease, {"unit_id": "u1"}, {})
        assert store.final_records("run-a") == {}
        assert store.claim("run-a", "u1", "w1", lease_s=60).status == "claimed"  # its worker may claim again


def test_heartbeats_keep_a_lease_past_its_first_expiry(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        lease = store.claim("run-a", "u1", "w1", lease_s=2.0).lease
        for _ in range(6):  # 3 s in all: without the renewals the lease would have expired
            time.sleep(0.5)
            assert store.heartbeat(lease)
        assert store.expired("run-a") == []
        assert store.claim("run-a", "u1", "w2", lease_s=60).status == "held"


def test_a_heartbeat_thread_holds_the_lease_and_says_when_it_is_lost(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store, UnitClaims(claims_dsn) as other:
        lease = store.claim("run-a", "u1", "w1", lease_s=2.0).lease
        with Heartbeat(store, lease) as beat:
            time.sleep(3.0)  # 1.5 leases: renewed on the thread, never expired
            assert other.claim("run-a", "u1", "w2", lease_s=60).status == "held"
            assert not beat.lost.is_set()
            assert other.release(lease)  # as if it expired and was taken over: the next renewal fails
            assert beat.lost.wait(60)
        assert other.claim("run-a", "u1", "w2", lease_s=60).status == "claimed"


def test_the_final_record_is_written_once_when_two_workers_finish_together(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        old = store.claim("run-a", "u1", "w0", lease_s=0.3).lease
        wait_expired(store, old)
        new = store.claim("run-a", "u1", "w1", lease_s=60).lease
    # the worker that lost its lease and the one that took over both finish at once, twice each
    leases = [old, new, old, new]
    wrote = race(claims_dsn, 4, lambda s, i: s.finish(leases[i], {"unit_id": "u1", "writer": i}, {"calls": i}))
    assert wrote.count(True) == 1 and wrote.index(True) in (1, 3)
    with UnitClaims(claims_dsn) as store:
        final = store.final_records("run-a")
    assert list(final) == ["u1"] and final["u1"].worker == "w1"
    assert final["u1"].usage == {"calls": final["u1"].record["writer"]}  # usage stored with its own record


def test_usage_summed_over_final_records_counts_each_unit_once(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        for i in range(5):
            lease = store.claim("run-a", f"u{i}", "w1", lease_s=60).lease
            assert store.finish(lease, {"unit_id": f"u{i}"}, {"calls": i + 1})
            assert not store.finish(lease, {"unit_id": f"u{i}"}, {"calls": 100})  # a retried finish
        assert sum(f.usage["calls"] for f in store.final_records("run-a").values()) == 1 + 2 + 3 + 4 + 5


def test_a_released_lease_is_claimable_at_once(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        lease = store.claim("run-a", "u1", "w1", lease_s=600).lease
        assert store.release(lease)
        assert store.expired("run-a") == ["u1"]
        again = store.claim("run-a", "u1", "w2", lease_s=600)
        assert again.status == "claimed" and again.lease.token == 2
        assert not store.release(lease)


def test_two_runs_sharing_the_database_never_see_each_others_units(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        a = store.claim("run-a", "u1", "w1", lease_s=60)
        b = store.claim("run-b", "u1", "w2", lease_s=60)
        assert a.status == b.status == "claimed"
        assert store.finish(b.lease, {"unit_id": "u1", "run": "b"}, {"calls": 2})
        assert store.final_records("run-a") == {}
        assert store.claim("run-a", "u1", "w3", lease_s=60).status == "held"  # run b's final record is not a's
        assert store.finish(a.lease, {"unit_id": "u1", "run": "a"}, {"calls": 1})
        assert store.final_records("run-a")["u1"].record["run"] == "a"
        assert store.final_records("run-b")["u1"].record["run"] == "b"


def test_a_store_pickles_as_its_dsn_for_a_ray_task(claims_dsn: str) -> None:
    with UnitClaims(claims_dsn) as store:
        lease = store.claim("run-a", "u1", "w1", lease_s=60).lease
        copy = pickle.loads(pickle.dumps(store))
        try:
            assert copy.dsn == claims_dsn and copy.heartbeat(lease)
        finally:
            copy.close()
