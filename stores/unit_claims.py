"""Who runs which unit of a run, and each unit's final record written exactly once (PostgreSQL).

Ray retries a task whose worker died, so a unit may run more than once (at least once); what must happen exactly
once is its final record, and that comes from the database. The design follows LangGraph Server's run queue as
its open reimplementation Aegra shows it (``aegra_api/services/worker_executor.py`` and ``lease_reaper.py``): a
worker claims a run with one atomic ``UPDATE ... RETURNING`` that sets ``claimed_by`` and ``lease_expires_at``,
renews the lease by a heartbeat while it runs, and a reaper hands a run whose lease expired to another worker,
which resumes it from its checkpoint. Here the claimed thing is one unit ``(run_id, unit_id)`` (one LangGraph
thread, checkpointed in the same PostgreSQL database), and:

- :meth:`UnitClaims.claim` is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (the first claim inserts, a
  takeover updates only a row whose lease has expired): of racing claimers exactly one gets the row. Every claim
  raises the unit's fencing ``token``; the :class:`Lease` carries it.
- :meth:`UnitClaims.heartbeat` renews a lease still held (same token, not expired); ``False`` means it is lost:
  the worker stops the unit (another may have taken it over). :class:`Heartbeat` renews it on a thread.
- :meth:`UnitClaims.finish` writes the final record in one transaction that first marks the claim final, only
  if the caller's token still holds an unexpired lease; the row lock taken by that update serialises it with
  any takeover. A worker that lost its lease writes nothing; a second finish writes nothing; the call says
  whether it wrote. The unit's usage is stored in the same row, so summing final records counts each unit once.
- :meth:`UnitClaims.expired` is the reaper's query: units whose lease ran out before a final record (the driver
  submits them again; the next claim takes them over).

Lease times are the database's clock (``now()``), so workers on machines whose clocks differ agree on expiry.
Everything is keyed by ``run_id``: runs sharing one database never see each other's units. A unit that ends
without a final record (a failure resume retries, an interruption) calls :meth:`UnitClaims.release`, so the next
claim takes it at once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dyneval.state.errors import InfraError
from dyneval.stores.postgres import TableStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS dyneval_unit_claims (
    run_id text NOT NULL,
    unit_id text NOT NULL,
    worker text NOT NULL,
    token bigint NOT NULL,
    lease_expires_at timestamptz,
    claimed_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    final boolean NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, unit_id)
);
CREATE TABLE IF NOT EXISTS dyneval_unit_finals (
    run_id text NOT NULL,
    unit_id text NOT NULL,
    worker text NOT NULL,
    token bigint NOT NULL,
    record jsonb NOT NULL,
    usage jsonb NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, unit_id)
);
"""

_CLAIM = """
INSERT INTO dyneval_unit_claims AS c (run_id, unit_id, worker, token, lease_expires_at, claimed_at, heartbeat_at)
VALUES (%(run)s, %(unit)s, %(worker)s, 1, now() + make_interval(secs => %(lease)s), now(), now())
ON CONFLICT (run_id, unit_id) DO UPDATE
   SET worker = excluded.worker, token = c.token + 1, lease_expires_at = excluded.lease_expires_at,
       claimed_at = now(), heartbeat_at = now()
 WHERE NOT c.final AND c.lease_expires_at <= now()
RETURNING token
"""

_HELD = "token = %(token)s AND NOT final AND lease_expires_at > now()"


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one unit: valid while the unit's token is still ``token`` and the lease has not
    expired (heartbeats renew it by ``lease_s``)."""

    run_id: str
    unit_id: str
    worker: str
    token: int
    lease_s: float


@dataclass(frozen=True)
class Claim:
    """The outcome of :meth:`UnitClaims.claim`: ``claimed`` (``lease`` is yours), ``held`` (``holder`` has an
    unexpired lease until ``expires_at``) or ``final`` (the unit's final record exists: nothing to do)."""

    status: Literal["claimed", "held", "final"]
    lease: Lease | None = None
    holder: str | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class FinalRecord:
    """A unit's one final record, who wrote it (``worker``, with the lease ``token``) and the usage stored with
    it (a ``runtime.events.Usage.as_dict`` dict)."""

    unit_id: str
    record: dict[str, Any]
    usage: dict[str, Any]
    worker: str
    token: int
    written_at: datetime


class UnitClaims(TableStore):
    """Claims, leases and final records of units in one PostgreSQL database (``dsn``), shared by every worker.

    A pool of connections per instance (autocommit), each operation on one of them and tried again when it broke
    (:mod:`stores.postgres`): a process makes one instance and its threads share it. An instance pickles as its
    DSN, so a Ray task can be handed one and connects on its worker, through the same pool and retries.
    """

    WHAT, SCHEMA = "unit claims", SCHEMA

    def __reduce__(self) -> tuple[Any, ...]:
        return UnitClaims, (self.dsn,)

    def claim(self, run_id: str, unit_id: str, worker: str, lease_s: float) -> Claim:
        """Claim ``unit_id`` of ``run_id`` for ``worker`` for ``lease_s`` seconds: a unit never claimed, or whose
        lease expired without a final record (taken over: the unit continues from its checkpoint)."""
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, not {lease_s}")
        params = {"run": run_id, "unit": unit_id, "worker": worker, "lease": float(lease_s)}

        def claim(conn: Any, again: bool) -> Claim:
            row = conn.execute(_CLAIM, params).fetchone()
            if row is not None:
                return Claim("claimed", Lease(run_id, unit_id, worker, row[0], float(lease_s)))
            row = conn.execute(
                "SELECT worker, lease_expires_at, final, token, lease_expires_at > now() "
                "FROM dyneval_unit_claims WHERE run_id = %(run)s AND unit_id = %(unit)s",
                params,
            ).fetchone()
            if row is None:  # cannot happen: the insert conflicted, so the row exists (claims are never deleted)
                raise RuntimeError(f"unit {unit_id} of run {run_id} has no claim row after a conflicting claim")
            holder, expires_at, final, token, live = row
            if final:
                return Claim("final")
            if again and live and holder == worker:  # the first attempt claimed it; the restart cut its answer
                return Claim("claimed", Lease(run_id, unit_id, worker, token, float(lease_s)))
            return Claim("held", holder=holder, expires_at=expires_at)

        return self._on_pool("claim", claim)

    def heartbeat(self, lease: Lease) -> bool:
        """Renew ``lease`` by its ``lease_s``; ``False``: it is lost (expired, taken over or final)."""
        return self._on_pool(
            "heartbeat",
            lambda conn, _: (
                conn.execute(
                    f"UPDATE dyneval_unit_claims SET lease_expires_at = now() + make_interval(secs => %(lease)s), "
                    f"heartbeat_at = now() WHERE run_id = %(run)s AND unit_id = %(unit)s AND {_HELD} RETURNING 1",
                    _params(lease),
                ).fetchone()
                is not None
            ),
        )

    def release(self, lease: Lease) -> bool:
        """Give ``lease`` up without a final record (the unit failed or was interrupted): the next claim takes
        the unit at once. ``False``: it was no longer held."""
        return self._on_pool(
            "release",
            lambda conn, _: (
                conn.execute(
                    f"UPDATE dyneval_unit_claims SET lease_expires_at = now() WHERE run_id = %(run)s "
                    f"AND unit_id = %(unit)s AND {_HELD} RETURNING 1",
                    _params(lease),
                ).fetchone()
                is not None
            ),
        )

    def finish(self, lease: Lease, record: dict[str, Any], usage: dict[str, Any]) -> bool:
        """Write the unit's final ``record`` and its ``usage`` once, if ``lease`` still holds the unit; ``True``
        when this call wrote it (``False``: the lease was lost, or the record exists already)."""
        params = {
            **_params(lease),
            "worker": lease.worker,
            "record": json.dumps(record, ensure_ascii=False),
            "usage": json.dumps(usage),
        }

        def finish(conn: Any, again: bool) -> bool:
            with conn.transaction():
                held = conn.execute(
                    f"UPDATE dyneval_unit_claims SET final = true, lease_expires_at = NULL WHERE run_id = %(run)s "
                    f"AND unit_id = %(unit)s AND {_HELD} RETURNING 1",
                    params,
                ).fetchone()
                if held is None:  # lost, or (tried again) written by the first attempt, whose answer was cut
                    return (
                        again
                        and conn.execute(
                            "SELECT 1 FROM dyneval_unit_finals WHERE run_id = %(run)s AND unit_id = %(unit)s "
                            "AND token = %(token)s AND worker = %(worker)s",
                            params,
                        ).fetchone()
                        is not None
                    )
                return (
                    conn.execute(
                        "INSERT INTO dyneval_unit_finals (run_id, unit_id, worker, token, record, usage) "
                        "VALUES (%(run)s, %(unit)s, %(worker)s, %(token)s, %(record)s, %(usage)s) "
                        "ON CONFLICT (run_id, unit_id) DO NOTHING RETURNING 1",
                        params,
                    ).fetchone()
                    is not None
                )

        return self._on_pool("finish", finish)

    def final_records(self, run_id: str) -> dict[str, FinalRecord]:
        """The final records of ``run_id``, by unit id (in the order they were written)."""
        rows = self._on_pool(
            "read final records",
            lambda conn, _: conn.execute(
                "SELECT unit_id, record, usage, worker, token, written_at FROM dyneval_unit_finals "
                "WHERE run_id = %s ORDER BY written_at, unit_id",
                (run_id,),
            ).fetchall(),
        )
        return {r[0]: FinalRecord(*r) for r in rows}

    def expired(self, run_id: str) -> list[str]:
        """The reaper's query: units of ``run_id`` whose lease ran out before a final record was written."""
        rows = self._on_pool(
            "read expired leases",
            lambda conn, _: conn.execute(
                "SELECT unit_id FROM dyneval_unit_claims WHERE run_id = %s AND NOT final "
                "AND lease_expires_at <= now() ORDER BY unit_id",
                (run_id,),
            ).fetchall(),
        )
        return [r[0] for r in rows]


class Heartbeat:
    """Renews ``lease`` every ``lease.lease_s / 3`` seconds on a daemon thread while the unit runs (``with
    Heartbeat(store, lease) as beat: ...``); ``beat.lost`` is set once a renewal finds the lease lost, or finds no
    database after its retries (the unit should stop: its final write would be refused anyway)."""

    def __init__(self, store: UnitClaims, lease: Lease) -> None:
        self.store, self.lease = store, lease
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{lease.unit_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.lease.lease_s / 3):
            try:
                held = self.store.heartbeat(self.lease)
            except InfraError:  # the database stayed out of reach: the lease cannot be known to hold
                held = False
            if not held:
                self.lost.set()
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _params(lease: Lease) -> dict[str, Any]:
    return {"run": lease.run_id, "unit": lease.unit_id, "token": lease.token, "lease": float(lease.lease_s)}
