"""PostgreSQL restarted under a run, and opened by several processes at once: the checkpointer, the unit claims
and llmeval's question bank (``stores.postgres``) reconnect and retry, so a run goes on with no unit lost or
repeated; the checkpoint tables are made by one process at a time."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dyneval import cli
from dyneval.state.errors import RetryPolicy
from dyneval.stores.checkpoints import open_checkpointer
from dyneval.stores.postgres import open_pool, retried
from dyneval.stores.unit_claims import UnitClaims
from tests.golden_runs import REPO, ROLES, respond
from tests.pg_server import PgServer
from tests.standin_endpoint import StandIn


@pytest.fixture
def pg() -> Iterator[PgServer]:
    """A server of this test's own, which it may restart."""
    server = PgServer()
    yield server
    server.close()


def _fresh_database(server: PgServer, name: str) -> str:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn(name)


def _open_checkpointers(dsn: str, trials: int, start: Any, done: Any, failures: Any) -> None:
    """One process: at each trial, once the tables are gone, open the checkpointer with the other process at once."""
    for _ in range(trials):
        start.wait()
        try:
            with open_checkpointer(Path("."), dsn):
                pass
        except Exception as exc:  # noqa: BLE001 - counted by the test
            failures.put(f"{type(exc).__name__}: {exc}")
        done.wait()


def test_two_processes_opening_the_checkpointer_on_a_fresh_database_at_once_never_collide(pg: PgServer) -> None:
    """Two runs resuming together on a database neither made: ``PostgresSaver.setup`` at once failed 4 of 5 times
    (``UniqueViolation`` on ``checkpoint_migrations_pkey``). 20 trials, the tables dropped before each."""
    dsn, trials = _fresh_database(pg, "fresh"), 20
    spawn = multiprocessing.get_context("spawn")
    start, done, failures = spawn.Barrier(3), spawn.Barrier(3), spawn.Queue()
    workers = [spawn.Process(target=_open_checkpointers, args=(dsn, trials, start, done, failures)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for _ in range(trials):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations")
        start.wait(timeout=120)
        done.wait(timeout=120)
    for worker in workers:
        worker.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0]
    seen = []
    while not failures.empty():
        seen.append(failures.get())
    assert seen == []
    with psycopg.connect(dsn) as conn:  # and the tables are whole
        assert conn.execute("SELECT max(v) FROM checkpoint_migrations").fetchone()[0] > 0


def test_the_unit_claims_and_the_checkpointer_go_on_after_a_server_restart(pg: PgServer) -> None:
    """Each holds connections opened before the restart (which ends them); the next operations reconnect."""
    dsn = _fresh_database(pg, "restarted")
    config = {"configurable": {"thread_id": "run/u1", "checkpoint_ns": ""}}
    with UnitClaims(dsn) as claims, open_checkpointer(Path("."), dsn) as saver:
        lease = claims.claim("run", "u1", "w1", lease_s=60).lease
        assert lease is not None and saver.get_tuple(config) is None
        pg.restart()
        assert claims.heartbeat(lease)
        assert saver.get_tuple(config) is None and list(saver.list(config)) == []
        assert claims.finish(lease, {"unit_id": "u1"}, {"calls": 1})
        pg.restart()
        assert list(claims.final_records("run")) == ["u1"]


def test_after_a_restart_the_second_attempt_gets_a_working_connection_however_many_idle_ones_broke(
    pg: PgServer,
) -> None:
    """Connections are not checked as they are handed out: the first operation after a restart meets a broken one,
    and the pool then checks its idle ones, so the next attempt does not meet the other broken ones in turn."""
    dsn = _fresh_database(pg, "idle")
    pool = open_pool(dsn, psycopg.Connection, 6, autocommit=True)
    try:
        held = [pool.getconn() for _ in range(6)]
        for conn in held:
            pool.putconn(conn)  # six idle connections, each broken by the restart
        pg.restart()
        attempts: list[int] = []

        def select(n: int) -> int:
            attempts.append(n)
            with pool.connection() as conn:
                return conn.execute("SELECT 1").fetchone()[0]

        assert retried("test", "select", select, RetryPolicy(max_retries=1, base_delay_s=0.5), pool=pool) == 1
        assert attempts == [1, 2]
    finally:
        pool.close()


class _CutAfterCommit:
    """A connection whose first statement matching ``cut`` is carried out (and committed: autocommit) before it
    raises as if the server had gone away, the way a restart can cut the answer to a committed write."""

    def __init__(self, conn: Any, cut: str, state: dict[str, bool]) -> None:
        self._conn, self._cut, self._state = conn, cut, state

    def execute(self, query: str, *args: Any) -> Any:
        result = self._conn.execute(query, *args)
        if self._cut in query and not self._state["cut"]:
            self._state["cut"] = True
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize("cut", ["INSERT INTO dyneval_unit_claims", "INSERT INTO dyneval_unit_finals"])
def test_a_claim_or_final_write_whose_answer_a_restart_cut_is_recognised_as_done_when_tried_again(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """The write was committed, then its answer lost: tried again it must neither lose the unit (a claim the worker
    holds reported as held by someone) nor refuse the worker's own final record."""
    dsn = _fresh_database(pg, "cut_answers")
    with UnitClaims(dsn) as claims:
        pool, state = claims._pool, {"cut": False}
        real = pool.connection

        @contextlib.contextmanager
        def cutting(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with real(*args, **kwargs) as conn:
                yield _CutAfterCommit(conn, cut, state)

        monkeypatch.setattr(pool, "connection", cutting)
        claim = claims.claim("run", "u1", "w1", lease_s=60)
        assert claim.status == "claimed" and claim.lease is not None and claim.lease.token == 1
        assert claims.finish(claim.lease, {"unit_id": "u1"}, {"calls": 1})
        assert state["cut"]
        assert claims.claim("run", "u1", "w2", lease_s=60).status == "final"
        assert list(claims.final_records("run")) == ["u1"]


def _run(argv: list[str], standin: StandIn, out: Path) -> int:
    argv = [*argv, *[x for role in ROLES for x in (f"--{role}", standin.spec(role))], "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()) as console, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    if code != 0:
        print(console.getvalue()[-3000:], err.getvalue()[-3000:])
    return code


def _records(out: Path) -> list[dict[str, Any]]:
    [run_dir] = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    "argv",
    [
        ["--protocol", "interview", "--limit", "6", "--concurrency", "3"],
        # sessions never repeat a question met in an earlier one: one at a time, so both runs ask the same questions
        [
            "--protocol",
            "llmeval",
            "--bank",
            str(REPO / "samples" / "llmeval" / "bank.jsonl"),
            "--questions",
            "4",
            "--sessions",
            "2",
            "--concurrency",
            "1",
        ],
    ],
    ids=["interview", "llmeval-bank"],
)
def test_a_run_on_threads_goes_on_through_a_postgresql_restart_with_no_unit_lost_or_repeated(
    pg: PgServer, tmp_path: Path, argv: list[str]
) -> None:
    """The server stops (``pg_ctl stop -m fast``) while the units work and starts again 2 s later: the run
    reconnects and ends with exit 0, every unit ``ok`` once, and the endpoint got exactly the requests of a run
    without a restart (none repeated from a checkpoint, none lost). llmeval keeps its question bank in the same
    database."""
    with StandIn(respond=respond, latency_s=0.02) as standin:
        assert _run([*argv, "--postgres-dsn", _fresh_database(pg, "calm")], standin, tmp_path / "calm") == 0
        expected = Counter((r.model, r.key) for r in standin.ok_requests())
    calls, lock, back = iter(range(1, 10**6)), threading.Lock(), threading.Timer(2.0, pg.start)

    def down_midway(body: dict[str, Any]) -> dict[str, Any] | None:
        with lock:
            if next(calls) == len(expected) // 3:  # down when this reply leaves, back 2 s later: units go on meanwhile
                pg.stop()
                back.start()
        return respond(body)

    with StandIn(respond=down_midway, latency_s=0.02) as standin:
        code = _run([*argv, "--postgres-dsn", _fresh_database(pg, "restarted")], standin, tmp_path / "restarted")
        got = Counter((r.model, r.key) for r in standin.ok_requests())
    assert back.ident is not None, "the run ended before the server was stopped"
    back.join()
    assert code == 0
    records = _records(tmp_path / "restarted")
    assert sorted(r["unit_id"] for r in records) == sorted(r["unit_id"] for r in _records(tmp_path / "calm"))
    assert {r["status"] for r in records} == {"ok"}
    assert got == expected


@pytest.fixture
def cluster() -> Iterator[Any]:
    from tests.ray_cluster import cluster_or_skip

    yield from cluster_or_skip(workers=2, cpus_per_worker=1)


def test_a_ray_run_goes_on_through_a_postgresql_restart_with_no_unit_lost_or_repeated(
    pg: PgServer, cluster: Any, tmp_path: Path
) -> None:
    """As on threads, with the units on a two-node Ray cluster: the runners' checkpointers and unit claims (leases,
    heartbeats, final records) ride the restart out, every unit ends ``ok`` once, and the endpoint got exactly the
    requests of the same run on threads without a restart."""
    argv = ["--protocol", "interview", "--limit", "6", "--concurrency", "3"]
    with StandIn(respond=respond, latency_s=0.02) as standin:
        assert _run([*argv, "--postgres-dsn", _fresh_database(pg, "calm")], standin, tmp_path / "calm") == 0
        expected = Counter((r.model, r.key) for r in standin.ok_requests())
    calls, lock, back = iter(range(1, 10**6)), threading.Lock(), threading.Timer(2.0, pg.start)

    def down_midway(body: dict[str, Any]) -> dict[str, Any] | None:
        with lock:
            if next(calls) == len(expected) // 3:
                pg.stop()
                back.start()
        return respond(body)

    with StandIn(respond=down_midway, latency_s=0.02) as standin:
        code = _run(
            [
                *argv,
                "--postgres-dsn",
                _fresh_database(pg, "restarted"),
                "--executor",
                "ray",
                "--ray-address",
                cluster.address,
            ],
            standin,
            tmp_path / "restarted",
        )
        got = Counter((r.model, r.key) for r in standin.ok_requests())
    assert back.ident is not None, "the run ended before the server was stopped"
    back.join()
    assert code == 0
    records = _records(tmp_path / "restarted")
    assert sorted(r["unit_id"] for r in records) == sorted(r["unit_id"] for r in _records(tmp_path / "calm"))
    assert {r["status"] for r in records} == {"ok"}
    assert got == expected
