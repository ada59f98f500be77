"""The llmeval question bank's database connection, its locks and its request-rate buckets: the base of every
part of :class:`stores.question_bank.QuestionBank` (whose tables are in :mod:`stores.bank_schema`).

Writes are serialised by a process-wide lock per database (SQLite allows one writer) and run inside
transactions. What must hold across processes (the exam server's ``--workers``, runs sharing a PostgreSQL bank)
is kept by the database itself: a PostgreSQL advisory lock per name (:meth:`BankStore.exclusive`; the sampling
of a model's sessions takes one per model, so no question twice in a cycle, section 2.2 of LLMEval-3, seed 002),
and the request-rate buckets are rows updated under a row lock.

On PostgreSQL every public method of the bank's parts (this class's subclasses) is one operation tried again when
its connection broke, as the checkpointer's and the unit claims' are (:func:`stores.postgres.retried`: a server
restart is ridden out); a broken connection is replaced as it is taken from the engine's pool (``pool_pre_ping``).
A method called inside another is tried again with it. A method is one transaction or a read (or steps each safe
to repeat: ``move_secret``, ``bank_id``), so an attempt that broke was rolled back and is repeated whole; only a
commit whose answer the restart cut is met again, which ``create_session`` (idempotent per id) absorbs and
``submit`` or ``append_item`` refuse as any repeat (``QuotaError``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from dyneval.stores.bank_location import bank_server, bank_url
from dyneval.stores.bank_schema import metadata, rates
from dyneval.stores.postgres import CONNECT_TIMEOUT_S, retried, server_of

F = TypeVar("F", bound=Callable[..., Any])

_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()
_operation = threading.local()  # .running: this thread is inside a retried operation of a bank


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def advisory_key(name: str) -> int:
    """The 64-bit PostgreSQL advisory lock key of ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


def _reconnecting(method: F) -> F:
    """``method`` as one operation of a PostgreSQL bank, tried again when its connection broke."""

    @functools.wraps(method)
    def operation(self: BankStore, *args: Any, **kwargs: Any) -> Any:
        if self.server is None or getattr(_operation, "running", False):
            return method(self, *args, **kwargs)
        _operation.running = True
        try:
            return retried(self.server, f"question bank: {method.__name__}", lambda _: method(self, *args, **kwargs))
        finally:
            _operation.running = False

    return operation  # type: ignore[return-value]  # functools.wraps types it _Wrapped, called as method is


class BankStore:
    """The bank's engine (tables created on open), its write lock and its locks across processes."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value) and not inspect.isgeneratorfunction(value):
                setattr(cls, name, _reconnecting(value))

    def __init__(self, location: str | Path) -> None:
        self.url = bank_url(location)
        server = bank_server(str(location))
        #: The PostgreSQL server (for messages), ``None`` for a SQLite file.
        self.server = server_of(server) if server else None
        kwargs: dict[str, Any] = {"future": True}
        if self.url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 60}
        else:
            kwargs.update(pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
        self.engine: Engine = sa.create_engine(self.url, **kwargs)
        if self.url.startswith("sqlite"):

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

        with _locks_guard:
            self._lock = _locks.setdefault(self.url, threading.RLock())
        with self._lock:
            self._create_tables()

    @_reconnecting
    def _create_tables(self) -> None:
        metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    @staticmethod
    def _serialised(conn: Any, name: str) -> None:
        """Until ``conn``'s transaction ends, no other transaction holding ``name`` runs (a PostgreSQL advisory
        lock, whichever process or machine opened the bank); SQLite serves one process, whose writes
        :attr:`_lock` already serialises."""
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(name)})

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Run the block as the only holder of ``name`` in every process using this bank: one thread per process
        waits (a process lock), then holds a transaction with the advisory lock (PostgreSQL) for the block."""
        with _locks_guard:
            lock = _locks.setdefault(f"{self.url}#{name}", threading.RLock())
        with lock, self.engine.begin() as conn:
            self._serialised(conn, name)
            yield

    @_reconnecting
    def take_token(self, key: str, rate: float, burst: int) -> float:
        """Draw one request from ``key``'s token bucket (``rate`` per second, bursts up to ``burst``), kept in
        the database so that every server process draws on the same bucket (the row is locked while it is
        read and updated): 0 when the request may go ahead, else the seconds until a token is free."""
        stamp = time.time()
        with self._lock, self.engine.begin() as conn:
            insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(rates)
            conn.execute(insert.values(key=key, tokens=float(burst), stamp=stamp).on_conflict_do_nothing())
            row = conn.execute(
                sa.select(rates.c.tokens, rates.c.stamp).where(rates.c.key == key).with_for_update()
            ).one()
            tokens = min(float(burst), row.tokens + max(0.0, stamp - row.stamp) * rate)
            allowed = tokens >= 1
            conn.execute(rates.update().where(rates.c.key == key).values(tokens=tokens - allowed, stamp=stamp))
        return 0.0 if allowed else (1 - tokens) / rate
