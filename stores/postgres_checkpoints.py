"""LangGraph's PostgreSQL checkpointer over a connection pool, each of its operations tried again when its
connection broke (:mod:`stores.postgres`), and its tables made by one process at a time.

Every operation of ``PostgresSaver`` is safe to repeat: ``put`` and ``put_writes`` are upserts keyed by the
checkpoint (and task and write index), the others read or delete. With a pool each operation has a connection of its
own, so the saver's lock, which serialised the threads of a process on its one connection, is not taken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from dyneval.state.errors import InfraError
from dyneval.stores.postgres import open_pool, retried, server_of

T = TypeVar("T")

#: Seconds a process waits while another one makes or migrates the checkpoint tables.
SETUP_WAIT_S = 120.0


class PooledSaver(PostgresSaver):
    """``PostgresSaver`` on a connection pool (:meth:`connect` makes one; closing ``conn``, the pool, closes it)."""

    def __init__(
        self,
        pool: ConnectionPool[Connection[DictRow]],
        server: str,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(pool)
        self.lock = nullcontext()  # type: ignore[assignment]  # each operation holds a connection of its own
        self.pool = pool  # ``conn``, typed as the pool it is
        self.server = server
        self.before_write = before_write or (lambda: None)

    @classmethod
    def connect(
        cls, dsn: str, connections: int | None = None, before_write: Callable[[], None] | None = None
    ) -> PooledSaver:
        """A saver on a new pool of at most ``connections`` (default :data:`stores.postgres.POOL_MAX`), its tables
        made (:meth:`setup`); ``before_write`` runs before each ``put`` and ``put_writes``."""
        pool = open_pool(
            dsn, Connection[DictRow], connections, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = cls(pool, server_of(dsn), before_write)
        try:
            saver.setup()
        except BaseException:
            pool.close()
            raise
        return saver

    def _retried(self, what: str, operation: Callable[[], T]) -> T:
        return retried(self.server, f"checkpoint {what}", lambda _: operation(), pool=self.pool)

    def setup(self) -> None:
        """Make or migrate the tables, one process at a time: ``PostgresSaver.setup`` run by two processes at once
        on a fresh database fails in one of them on a duplicate migration row or catalog entry. The lock is a
        session advisory lock taken by polling ``pg_try_advisory_lock``, not by waiting in ``pg_advisory_lock``:
        a migration's ``CREATE INDEX CONCURRENTLY`` waits for statements older than itself, a waiting lock call
        too (two processes opening at once then took 1.6 s instead of 0.6 s)."""

        def locked(conn: Connection[DictRow]) -> bool:
            row = conn.execute("SELECT pg_try_advisory_lock(hashtext('dyneval_checkpoint_setup')) AS held").fetchone()
            return row is not None and bool(row["held"])

        def once() -> None:
            with self.pool.connection() as conn:
                deadline = time.monotonic() + SETUP_WAIT_S
                while not locked(conn):
                    if time.monotonic() > deadline:
                        raise InfraError(
                            f"PostgreSQL {self.server}: another process has been making the checkpoint "
                            f"tables for {SETUP_WAIT_S:.0f} s"
                        )
                    time.sleep(0.05)
                try:
                    PostgresSaver(conn).setup()
                finally:
                    conn.execute("SELECT pg_advisory_unlock(hashtext('dyneval_checkpoint_setup'))")

        self._retried("setup", once)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._retried("read", lambda: super(PooledSaver, self).get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        # read whole before the first is handed out, so that a retry never hands one out twice
        yield from self._retried(
            "list", lambda: list(super(PooledSaver, self).list(config, filter=filter, before=before, limit=limit))
        )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.before_write()
        return self._retried("write", lambda: super(PooledSaver, self).put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.before_write()
        self._retried("write", lambda: super(PooledSaver, self).put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._retried("delete", lambda: super(PooledSaver, self).delete_thread(thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._retried("prune", lambda: super(PooledSaver, self).prune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._retried(
            "read", lambda: super(PooledSaver, self).get_delta_channel_history(config=config, channels=channels)
        )
