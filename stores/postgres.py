"""Holding on to PostgreSQL through a restart: every connection a run holds (the checkpointer's, the unit claims',
llmeval's question bank's) comes from a pool that replaces a broken one, and every operation is tried again when
its connection broke.

A server restart (``pg_ctl restart``, a failover) ends every open connection, and connections fail while the
server starts. An operation that meets that (:func:`is_disconnect`: psycopg's ``OperationalError``, also inside
SQLAlchemy's) is tried again with :data:`RECONNECT`'s backoff: 9 attempts, waits doubling from 0.25 s to 8 s with
jitter, so an outage of 15 s is always ridden out; each attempt waits at most :data:`CONNECT_TIMEOUT_S` for a
connection. After the last attempt the operation raises :class:`state.errors.InfraError` (the unit ends
``infra_error``; a resume tries it again). A retried write must be idempotent: a checkpoint ``put`` is an upsert,
and the unit claims recognise their own write whose acknowledgement the restart lost.

Messages name a server by :func:`server_of` (host, port, database), never with its password.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from dyneval.state.errors import InfraError, RetryPolicy, one_line

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

T = TypeVar("T")
C = TypeVar("C", bound="Connection[Any]")

#: Seconds an attempt waits for a connection: libpq's ``connect_timeout``, and the pool's wait for a free one.
CONNECT_TIMEOUT_S = 5
#: An operation whose connection broke is tried 9 times in all, over at least 15 s and at most 32 s of waits.
RECONNECT = RetryPolicy(max_retries=8, base_delay_s=0.25, max_delay_s=8.0)
#: Connections one pool (a checkpointer, a claims store) opens at most: threads of a process working at once.
POOL_MAX = 8

# psycopg's pool logs each failed reconnection as a warning; without a handler of the application's, Python would
# print them over the run's live display while the server is down (the retries above say what matters)
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


def server_of(dsn: str) -> str:
    """``HOST:PORT/DATABASE`` of a DSN (URL or ``key=value``), for messages: never the user's password."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"{host}{port}/{params.get('dbname') or params.get('user') or ''}"


def is_disconnect(exc: BaseException) -> bool:
    """The server could not be reached or its connection broke (psycopg's ``OperationalError`` anywhere in the
    chain of causes: SQLAlchemy raises its own error from psycopg's)."""
    from psycopg import OperationalError

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OperationalError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def retried(
    server: str,
    what: str,
    operation: Callable[[int], T],
    policy: RetryPolicy = RECONNECT,
    pool: ConnectionPool[Any] | None = None,
) -> T:
    """``operation(attempt)``, tried again while its connection breaks (``attempt`` counts from 1: a write that
    may have been committed before its acknowledgement was lost looks for itself from attempt 2); then an
    :class:`InfraError` naming ``server`` and ``what`` failed. With the ``pool`` the operation took its connection
    from, a broken connection has the pool check its idle ones before the next attempt (a restart broke them
    all; each would otherwise cost an attempt)."""

    def give_up(attempts: int, exc: Exception) -> InfraError:
        return InfraError(f"PostgreSQL {server}: {what} failed after {attempts} attempts: {one_line(exc)}")

    def attempt(n: int) -> T:
        try:
            return operation(n)
        except Exception as exc:
            if pool is not None and is_disconnect(exc):
                pool.check()  # the broken connections go, new ones are opened in the background
            raise

    return policy.call(attempt, retry_on=is_disconnect, give_up=give_up)


def on_pool(pool: ConnectionPool[Any], server: str, what: str, operation: Callable[[Any, bool], T]) -> T:
    """``operation(connection, again)`` on a connection of ``pool`` (:func:`retried`; ``again`` from the second
    attempt on: the first may have committed before the restart cut its answer)."""

    def attempt(n: int) -> T:
        with pool.connection() as conn:
            return operation(conn, n > 1)

    return retried(server, what, attempt, pool=pool)


def make_tables(pool: ConnectionPool[Any], server: str, what: str, schema: str) -> None:
    """Run ``schema`` (``CREATE ... IF NOT EXISTS`` statements) on an autocommit ``pool``, one process at a time:
    concurrent ``CREATE TABLE IF NOT EXISTS`` can collide in the catalog."""

    def make(conn: Any, _: bool) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
            conn.execute(schema)

    on_pool(pool, server, f"{what}: make tables", make)


def open_pool(dsn: str, connection_class: type[C], max_size: int | None = None, **connection: Any) -> ConnectionPool[C]:
    """A pool of at most ``max_size`` (default :data:`POOL_MAX`; more are opened only while all are busy)
    ``connection_class`` connections to ``dsn`` (``connection``: their options, e.g.
    ``autocommit=True``; ``Connection[DictRow]`` with ``row_factory=dict_row``), open once one connection is made
    (:func:`retried`). A connection is not checked as it is handed out (a round trip to the server for every
    operation: a tenth of a Ray driver's CPU, and as many extra statements for the server as operations): one that
    broke fails its operation, which :func:`retried` tries again once the pool has checked its idle ones. The
    caller closes the pool."""
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool[C] = ConnectionPool(
        dsn,
        connection_class=connection_class,
        kwargs={"connect_timeout": CONNECT_TIMEOUT_S, **connection},
        min_size=1,
        max_size=max_size or POOL_MAX,
        timeout=CONNECT_TIMEOUT_S,
        open=False,
    )
    try:
        retried(server_of(dsn), "connect", lambda _: pool.open(wait=True, timeout=CONNECT_TIMEOUT_S))
    except BaseException:
        pool.close()
        raise
    return pool


class TableStore:
    """A store of its own tables in one PostgreSQL database: a pool of at most ``connections`` autocommit
    connections (:func:`open_pool`), the tables of :attr:`SCHEMA` made as it opens (:func:`make_tables`), and each
    operation run on the pool and tried again when its connection broke (:meth:`_on_pool`). A subclass names its
    tables' purpose (:attr:`WHAT`, in messages) and their schema."""

    WHAT: ClassVar[str]
    SCHEMA: ClassVar[str]

    def __init__(self, dsn: str, connections: int | None = None) -> None:
        from psycopg import Connection

        self.dsn, self.server = dsn, server_of(dsn)
        self._pool = open_pool(dsn, Connection, connections, autocommit=True)
        try:
            make_tables(self._pool, self.server, self.WHAT, self.SCHEMA)
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_pool(self, what: str, operation: Callable[[Any, bool], T]) -> T:
        """``operation(connection, again)`` on a connection of the pool, tried again while its connection breaks;
        ``again`` from the second attempt on (the first may have committed before the restart cut its answer)."""
        return on_pool(self._pool, self.server, f"{self.WHAT}: {what}", operation)
