"""Checkpointers: SQLite in the run directory by default, PostgreSQL when a DSN is given."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver


@contextmanager
def open_checkpointer(
    run_dir: Path,
    postgres_dsn: str | None = None,
    connections: int | None = None,
    before_write: Callable[[], None] | None = None,
) -> Iterator[BaseCheckpointSaver]:
    """Yield a ready checkpointer; closes its connections on exit. On PostgreSQL: a pool that outlasts a restart of
    the server (:mod:`stores.postgres_checkpoints`), of at most ``connections`` (default
    :data:`stores.postgres.POOL_MAX`): a process whose threads checkpoint at once needs one each, or they queue;
    ``before_write`` runs before each checkpoint or pending write is stored (a Ray runner sends its events).

    The SQLite file is in WAL mode (``SqliteSaver.setup``) with ``synchronous=NORMAL``: a committed checkpoint
    survives a kill of the process (it is in the WAL file, which SQLite replays on the next open), as the event
    log and ``results.jsonl`` do (appended, not fsynced); only an OS crash or power loss may drop the last
    commits, never corrupt the file. SQLite's default ``FULL`` fsyncs the WAL on every commit while the saver
    holds its one lock, which halved the calls per second of a run at zero endpoint latency (README,
    Performance).
    """
    if postgres_dsn:
        try:
            from dyneval.stores.postgres_checkpoints import PooledSaver
        except ImportError as exc:  # optional extra
            raise ImportError("PostgreSQL checkpoints need: pip install -e '.[postgres]'") from exc
        pooled = PooledSaver.connect(postgres_dsn, connections, before_write)
        try:
            yield pooled
        finally:
            pooled.conn.close()
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        conn.execute("PRAGMA synchronous=NORMAL")
        yield saver
    finally:
        conn.close()
