"""A Ray run's exchanges on their way from the workers to the driver's ``events.jsonl`` through PostgreSQL
(``stores/event_batches.py``, ``runtime/executors/ray_events.py``), driven here without Ray on the throw-away
server: whatever point a driver is killed at, the resume's log holds and counts every exchange once; runs that
share a database never see each other's batches; a worker's insert tried again after it committed adds nothing.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from dyneval.runtime.events import EventLog
from dyneval.runtime.executors.ray_events import Drain, ForwardedLog, take_in_left
from dyneval.stores.event_batches import EventBatches


class Killed(BaseException):
    """The driver's process ends here (nothing after this point runs)."""


def event(n: int) -> dict[str, Any]:
    return {"unit": f"u{n % 3}", "role": "target", "model": "m", "step": "s", "prompt_tokens": 1, "id": n}


def write(batches: EventBatches, ids: range) -> None:
    """A worker writes one batch of the exchanges ``ids``."""
    batches.put("w", "".join(json.dumps(event(n)) + "\n" for n in ids))


def logged_ids(path: Path) -> list[int]:
    return sorted(json.loads(line)["id"] for line in path.read_text().splitlines() if "id" in json.loads(line))


def resumed(path: Path, dsn: str, run_id: str) -> EventLog:
    """What a resume does with the log: open it (a torn last line dropped), count it, take in what was left."""
    log = EventLog(path)
    log.load_existing()
    with EventBatches(dsn, run_id) as batches:
        take_in_left(batches, log)
    return log


def kill_after_append(drain: Drain) -> None:
    """The driver is killed once its drain appended what it took (marked appended only by the next one)."""
    drain()
    raise Killed


def kill_after_take(drain: Drain) -> None:
    take = drain.batches.take

    def taken(offset: int, appended: int | None = None) -> str:
        take(offset, appended)
        raise Killed

    drain.batches.take = taken  # type: ignore[method-assign]
    drain()


def kill_mid_append(drain: Drain) -> None:
    """The driver is killed while its append is written: only a first part (cut inside a line) reaches the file."""
    take, path = drain.batches.take, drain.events.path
    assert path is not None

    def cut(offset: int, appended: int | None = None) -> str:
        text = take(offset, appended).encode()
        with path.open("ab") as fh:
            fh.write(text[: len(text) // 2 + 3])
        raise Killed

    drain.batches.take = cut  # type: ignore[method-assign]
    drain()


def _killed(*_: object) -> None:
    raise Killed


@pytest.mark.parametrize("kill", [kill_after_append, kill_after_take, kill_mid_append])
def test_a_driver_killed_anywhere_in_a_drain_leaves_a_log_the_resume_completes_with_every_exchange_once(
    fresh_postgres_db: Any, tmp_path: Path, kill: Any
) -> None:
    dsn, run_id = fresh_postgres_db("event_batches_kill"), "run-a"
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    with EventBatches(dsn, run_id) as worker, EventBatches(dsn, run_id) as driver:
        drain = Drain(driver, log)
        write(worker, range(0, 3))
        drain()  # a drain that went through
        write(worker, range(3, 10))
        drain()  # and another, which marked the first one's rows appended
        write(worker, range(10, 12))
        with pytest.raises(Killed):
            kill(drain)
        write(worker, range(12, 15))  # the worker logs on after the driver died
    resumed_log = EventLog(path)
    resumed_log.load_existing()
    resumed_log.log({"unit": "-", "role": "target", "model": "m", "step": "ping"})  # the resume's pre-flight
    with EventBatches(dsn, run_id) as batches:
        take_in_left(batches, resumed_log)
        assert batches.take(0) == ""  # nothing is left waiting
    assert logged_ids(path) == list(range(15))  # each exchange once: none lost, none doubled
    assert resumed_log.total().calls == 15 + 1  # and counted once (the pre-flight's ping too)
    again = resumed(path, dsn, run_id)  # a second resume finds nothing more to take in
    assert logged_ids(path) == list(range(15)) and again.total().calls == 16


def test_rows_a_take_that_raised_marked_are_neither_lost_by_later_drains_nor_appended_twice(
    fresh_postgres_db: Any, tmp_path: Path
) -> None:
    dsn, run_id, path = fresh_postgres_db("event_batches_raised"), "run-a", tmp_path / "events.jsonl"
    log = EventLog(path)
    with EventBatches(dsn, run_id) as worker, EventBatches(dsn, run_id) as driver:
        write(worker, range(0, 3))
        driver.take(0)  # its update committed, then the database stayed out of reach: the drain raised
        log.log({"unit": "-", "role": "target", "model": "m", "step": "ping"})  # the log grew meanwhile
        write(worker, range(3, 5))
        Drain(driver, log)()  # the session went on (its stop drains): these rows, taken for the new end
        assert logged_ids(path) == [3, 4]
    resumed_log = resumed(path, dsn, run_id)
    assert logged_ids(path) == list(range(5)) and resumed_log.total().calls == 5 + 1


def test_runs_sharing_a_database_never_see_each_others_batches(fresh_postgres_db: Any, tmp_path: Path) -> None:
    dsn = fresh_postgres_db("event_batches_runs")
    logs = {run: EventLog(tmp_path / f"{run}.jsonl") for run in ("run-a", "run-b")}
    with EventBatches(dsn, "run-a") as a, EventBatches(dsn, "run-b") as b:
        write(a, range(0, 4))
        write(b, range(100, 102))
        Drain(a, logs["run-a"])()
        write(b, range(102, 103))
        with pytest.raises(Killed):  # run-b's driver is killed holding taken batches: run-a's resume leaves them
            kill_after_append(Drain(b, logs["run-b"]))
        write(b, range(103, 105))
    resumed(tmp_path / "run-a.jsonl", dsn, "run-a")
    assert logged_ids(tmp_path / "run-a.jsonl") == [0, 1, 2, 3]
    resumed(tmp_path / "run-b.jsonl", dsn, "run-b")
    assert logged_ids(tmp_path / "run-b.jsonl") == list(range(100, 105))


def test_a_workers_insert_tried_again_after_it_committed_adds_nothing_even_once_taken(
    fresh_postgres_db: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    dsn, path = fresh_postgres_db("event_batches_retry"), tmp_path / "events.jsonl"
    log = EventLog(path)
    same = uuid.uuid4()
    monkeypatch.setattr(uuid, "uuid4", lambda: same)  # each put below is one batch's attempt: same batch id
    with EventBatches(dsn, "run-a") as batches:
        drain = Drain(batches, log)
        write(batches, range(0, 2))
        write(batches, range(0, 2))  # tried again while the batch waits
        drain()
        write(batches, range(0, 2))  # tried again after the driver appended it
        drain()
        drain.close()
        write(batches, range(0, 2))  # and after its row was marked appended
        drain()
    assert logged_ids(path) == [0, 1] and log.total().calls == 2


def test_a_runners_threads_write_every_exchange_once_in_far_fewer_batches_than_exchanges(
    fresh_postgres_db: Any, tmp_path: Path
) -> None:
    dsn, path = fresh_postgres_db("event_batches_group"), tmp_path / "events.jsonl"
    with EventBatches(dsn, "run-a") as batches:
        runner_log = ForwardedLog(batches, None, "w")
        written = 0
        put = batches.put

        def counted(worker: str, lines: str) -> None:
            nonlocal written
            written += 1
            put(worker, lines)

        batches.put = counted  # type: ignore[method-assign]

        def work(thread: int) -> None:
            for i in range(50):
                runner_log.log({**event(1000 * thread + i), "unit": f"u{thread}"})
            runner_log.flush()

        pool = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        log = EventLog(path)
        Drain(batches, log)()
    assert logged_ids(path) == sorted(1000 * t + i for t in range(8) for i in range(50))
    assert all(json.loads(line)["worker"] == "w" for line in path.read_text().splitlines())
    assert written <= 2 * 8  # a flush writes at most the batch it waited for and its own; not one per exchange


def test_a_drain_is_one_statement_that_also_marks_the_previous_drains_rows_and_close_marks_the_last(
    fresh_postgres_db: Any, tmp_path: Path
) -> None:
    import psycopg

    dsn = fresh_postgres_db("event_batches_marks")

    def with_text() -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM dyneval_event_batches WHERE events IS NOT NULL").fetchone()
        return row[0] if row else -1

    with EventBatches(dsn, "run-a") as batches:
        drain = Drain(batches, EventLog(tmp_path / "events.jsonl"))
        write(batches, range(0, 3))
        write(batches, range(3, 4))
        statements = 0
        run = batches._run

        def counted(what: str, *args: Any) -> Any:
            nonlocal statements
            statements += what != "write a batch"  # the driver's, not the worker's
            return run(what, *args)

        batches._run = counted  # type: ignore[method-assign]
        drain()
        assert with_text() == 2  # taken, appended, not yet marked
        write(batches, range(4, 6))
        drain()
        assert with_text() == 1 and statements == 2  # the first drain's two rows marked by the second's take
        drain.close()
        assert with_text() == 0
    assert logged_ids(tmp_path / "events.jsonl") == list(range(6))
