"""The exchanges a Ray run's workers log, on their way to the driver's ``events.jsonl`` (PostgreSQL).

A unit runner writes each batch of exchanges it flushes as one row, the batch's JSON lines as text, with a batch
id of its own (:meth:`EventBatches.put`; a retried insert whose first attempt committed adds nothing). The driver
moves them into ``events.jsonl`` in three steps, each safe to repeat, so that a driver killed at any point loses
and doubles nothing:

1. :meth:`EventBatches.take` marks every waiting row of the run with the byte offset at which the driver is about
   to append them (the log's end) and returns their lines, in the order they were written;
2. the driver appends those lines to the log in one write and counts them;
3. the rows taken for that offset are marked appended, by the next drain's take in the same statement (one round
   trip per drain) or, at a session's end, by :meth:`EventBatches.appended`: their text is cleared and the row
   stays, as a tombstone, for :data:`KEEP_S` seconds, so a runner's insert retried after its first attempt
   committed (and was taken meanwhile) is recognised and adds nothing; older tombstones go.

A driver killed between 1 and 3 (or whose step 1 raised after its update committed) leaves taken rows: the next
session's driver, before anything runs, finds in the log the lines they hold at the offset they were marked with
(:meth:`EventBatches.left`: all of them, the first ones if the kill cut the append, or none), appends the rest and
counts only those (the lines already in the log were counted as the log was opened), then marks them appended;
then it takes what the workers wrote after the kill. Everything is keyed by ``run_id`` (the run folder's name):
runs sharing one database never see each other's rows. One driver drains a run at a time.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from dyneval.stores.postgres import TableStore

#: Seconds an appended batch's row stays (its text cleared): far longer than a runner's insert is retried
#: (:data:`stores.postgres.RECONNECT`, at most ~80 s with its connect timeouts).
KEEP_S = 600.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS dyneval_event_batches (
    run_id text NOT NULL,
    batch uuid NOT NULL,
    seq bigserial,
    worker text NOT NULL,
    events text,
    log_offset bigint,
    appended_at timestamptz,
    PRIMARY KEY (run_id, batch)
);
CREATE INDEX IF NOT EXISTS dyneval_event_batches_waiting ON dyneval_event_batches (run_id, log_offset)
    WHERE events IS NOT NULL;
CREATE INDEX IF NOT EXISTS dyneval_event_batches_appended ON dyneval_event_batches (run_id, appended_at)
    WHERE events IS NULL;
"""


#: The common table expressions that mark the batches taken for the offset ``%(appended)s`` appended (every taken
#: batch with ``%(every)s``) and drop the tombstones older than ``%(keep)s`` seconds; they touch disjoint rows
#: (text kept, text cleared) and none a take's update touches (taken for another offset, or not yet).
_APPENDED = (
    "marked AS (UPDATE dyneval_event_batches SET events = NULL, appended_at = now() WHERE run_id = %(run)s "
    "AND events IS NOT NULL AND (log_offset = %(appended)s OR (%(every)s AND log_offset IS NOT NULL))), "
    "gone AS (DELETE FROM dyneval_event_batches WHERE run_id = %(run)s AND events IS NULL "
    "AND appended_at < now() - make_interval(secs => %(keep)s))"
)


class EventBatches(TableStore):
    """One run's event batches in the PostgreSQL database ``dsn``, through a pool of at most ``connections``
    (autocommit; each operation tried again when its connection broke, :mod:`stores.postgres`). A runner's
    batches go one at a time, so one connection serves it."""

    WHAT, SCHEMA = "event batches", SCHEMA

    def __init__(self, dsn: str, run_id: str, connections: int = 1) -> None:
        super().__init__(dsn, connections)
        self.run_id = run_id

    def _run(self, what: str, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """``sql`` with ``params`` and the run's id (``%(run)s``); the rows it returned, if any."""

        def run(conn: Any, _: bool) -> list[tuple[Any, ...]]:
            cursor = conn.execute(sql, {"run": self.run_id, **params})
            return cursor.fetchall() if cursor.description else []

        return self._on_pool(what, run)

    def put(self, worker: str, lines: str) -> None:
        """Store one batch of ``worker``'s exchanges (``lines``: their JSON lines); once, however often the
        insert is tried."""
        self._run(
            "write a batch",
            "INSERT INTO dyneval_event_batches (run_id, batch, worker, events) "
            "VALUES (%(run)s, %(batch)s, %(worker)s, %(lines)s) ON CONFLICT (run_id, batch) DO NOTHING",
            {"batch": uuid.uuid4(), "worker": worker, "lines": lines},
        )

    def take(self, offset: int, appended: int | None = None) -> str:
        """The lines of every batch waiting, in the order they were written, marked as appended at ``offset`` of
        the log (those already marked at ``offset``, by an attempt whose answer a restart cut, included); in the
        same statement, the batches taken for the offset ``appended`` (which the log holds now) are marked
        appended (:meth:`appended`)."""
        rows = self._run(
            "take batches",
            f"WITH {_APPENDED} UPDATE dyneval_event_batches SET log_offset = %(offset)s WHERE run_id = %(run)s "
            "AND events IS NOT NULL AND (log_offset IS NULL OR log_offset = %(offset)s) RETURNING seq, events",
            {"offset": offset, "appended": appended, "every": False, "keep": KEEP_S},
        )
        return "".join(lines for _, lines in sorted(rows))

    def appended(self, offset: int | None = None) -> None:
        """Mark the batches taken for ``offset`` appended (call once the log holds them; ``None``: every taken
        batch, once :meth:`left` gave what the log lacked) and drop the tombstones older than :data:`KEEP_S`."""
        self._run(
            "mark batches appended",
            f"WITH {_APPENDED} SELECT 1",
            {"appended": offset, "every": offset is None, "keep": KEEP_S},
        )

    def left(self, log: Path | None) -> str:
        """The lines of the batches an earlier driver took and did not mark appended that ``log`` lacks: those
        after the first ones found whole at the offset they were taken for (a kill may have cut the append, and
        lines appended since, e.g. by the resume's pre-flight, may follow them)."""
        rows = self._run(
            "read taken batches",
            "SELECT log_offset, seq, events FROM dyneval_event_batches WHERE run_id = %(run)s "
            "AND events IS NOT NULL AND log_offset IS NOT NULL",
            {},
        )
        missing: list[str] = []
        for offset in sorted({r[0] for r in rows}):
            lines = "".join(r[2] for r in sorted(rows) if r[0] == offset).split("\n")[:-1]
            found = 0
            if log is not None and log.exists():
                with log.open("rb") as fh:
                    fh.seek(offset)
                    while found < len(lines) and fh.read(len(line := (lines[found] + "\n").encode())) == line:
                        found += 1
            missing += (line + "\n" for line in lines[found:])
        return "".join(missing)
