"""The thread-pool executor: the units of a run on threads of this process, at most ``--concurrency`` working at
once, their checkpoints in the run's SQLite file or in PostgreSQL.

A unit waiting for a background build gives its slot back, so another unit starts meanwhile (:class:`_Slots`).
Workers take the next unit only while the stop flag is down, so Ctrl-C (or any exception reaching the runner's
loop) launches nothing more. Workers are daemon threads: a request still blocked after the stop's grace does not
hold up the process exit. A worker appends its unit's record to ``results.jsonl`` itself, not the main thread,
where a Ctrl-C could drop it unsaved.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from dyneval.runtime import stop
from dyneval.runtime.protocol import Protocol, Run, Unit
from dyneval.runtime.services import Background
from dyneval.runtime.unit import run_unit
from dyneval.stores.checkpoints import open_checkpointer
from dyneval.stores.results import ResultStore


class _Queued:
    """The submitted units that wait for a slot, each held pickled and compressed until it starts (526 bytes for
    an ATAD answer, against 2.2 kB as objects: a 20,000-answer evaluation held 45 MB of waiting units)."""

    def __init__(self) -> None:
        self._units: queue.SimpleQueue[bytes | Unit] = queue.SimpleQueue()

    def put(self, unit: Unit) -> None:
        try:
            self._units.put(zlib.compress(pickle.dumps(unit, pickle.HIGHEST_PROTOCOL), 1))
        except (pickle.PicklingError, TypeError, AttributeError):  # an input pickle cannot write: held as it is
            self._units.put(unit)

    def get_nowait(self) -> Unit:
        """The next unit; ``queue.Empty`` when none waits."""
        item = self._units.get_nowait()
        unit: Unit = pickle.loads(zlib.decompress(item)) if isinstance(item, bytes) else item
        return unit


class _Slots:
    """The ``limit`` worker slots of a :class:`ThreadExecutor`: at most ``limit`` units work at once.

    A unit waiting for a background build gives its slot back (:class:`_UnitSlot`). A free slot goes first to a
    unit whose build is done and that waits to go on (:meth:`take`), else to a new worker thread with the next
    queued unit (``spawn``), so threads are made on demand: at most ``limit`` plus the units waiting.
    """

    def __init__(self, limit: int, queued: _Queued, spawn: Callable[[Unit], None]) -> None:
        self._cond = threading.Condition()
        self._free = limit
        self._resuming = 0  # units whose build is done, in take()
        self._queued, self._spawn = queued, spawn

    def start(self) -> None:
        with self._cond:
            self._hand_out()

    def _hand_out(self) -> None:
        """Wake the resuming units for the free slots; start the next units on those left (lock held). No unit
        starts after the stop."""
        self._cond.notify_all()
        while self._free > self._resuming and not stop.stopped():
            try:
                unit = self._queued.get_nowait()
            except queue.Empty:
                return
            self._free -= 1
            self._spawn(unit)

    def give_back(self) -> None:
        with self._cond:
            self._free += 1
            self._hand_out()

    def next_unit(self) -> Unit | None:
        """The next unit for a worker whose unit ended; ``None`` (its slot given back) after the stop, when a
        resuming unit needs the slot, or when no unit is left."""
        with self._cond:
            if not stop.stopped() and self._resuming <= self._free:
                try:
                    return self._queued.get_nowait()
                except queue.Empty:
                    pass
            self._free += 1
            self._hand_out()
            return None

    def take(self) -> None:
        """A slot again for a unit whose build is done; raises ``StopRequested`` within 0.2 s of the stop."""
        with self._cond:
            self._resuming += 1
            try:
                while True:
                    stop.raise_if_stopped()
                    if self._free:
                        self._free -= 1
                        return
                    self._cond.wait(0.2)
            finally:
                self._resuming -= 1


class _UnitSlot:
    """One unit's slot, given back while the unit waits for a background build (``Background.idle``) and taken
    again before it goes on; threads of the unit waiting at once share the one slot."""

    def __init__(self, slots: _Slots) -> None:
        self.slots = slots
        self.held = True  # False once the stop came while the unit waited for a slot again
        self._waits = 0
        self._lock = threading.Lock()

    @contextmanager
    def idle(self) -> Iterator[None]:
        with self._lock:
            self._waits += 1
            if self._waits == 1 and self.held:
                self.held = False
                self.slots.give_back()
        try:
            yield
        finally:
            with self._lock:
                self._waits -= 1
                if not self.held:
                    self.slots.take()
                    self.held = True


class ThreadExecutor:
    """The :class:`runtime.executors.Executor` of threads: a worker thread per slot, spawned on demand."""

    def __init__(self, protocol: Protocol, run: Run, graph: Any, context: Any, results: ResultStore) -> None:
        self.protocol, self.run, self.graph, self.context, self.results = protocol, run, graph, context, results
        self._queued = _Queued()
        self._ended: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._slots = _Slots(run.config.concurrency, self._queued, self._spawn)
        self._submitted = 0
        for job in run.services.background():
            job.future.add_done_callback(self._build_ended)

    def _build_ended(self, future: Future[Any]) -> None:
        """A failed background build (prepare()'s) ends the run with its error, as when prepare() built it."""
        if future.exception() is not None:
            self._ended.put(future.exception())

    def submit(self, units: list[Unit]) -> None:
        """Queue ``units``, taking them over (the list is left empty, each unit let go as it is queued: the plan
        is never held both as objects and queued)."""
        self._submitted += len(units)
        units.reverse()
        while units:
            self._queued.put(units.pop())
        self._slots.start()

    def ended(self) -> Iterator[dict[str, Any]]:
        for _ in range(self._submitted):
            item = self._ended.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self, grace_s: float) -> Iterator[dict[str, Any]]:
        deadline = time.monotonic() + grace_s
        # records already queued are handed back too: a worker may end before the main thread took its last one
        while (self.working() or not self._ended.empty()) and time.monotonic() < deadline:
            try:
                item = self._ended.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(item, dict):
                yield item

    def working(self) -> bool:
        return any(w.is_alive() for w in list(self._workers))

    def _work(self, first: Unit) -> None:
        unit: Unit | None = first
        while unit is not None:
            slot = _UnitSlot(self._slots)
            token = Background.idle.set(slot.idle)
            try:
                record = run_unit(self.protocol, self.run, self.graph, unit, self.context)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which re-raises it
                self._ended.put(exc)
                return
            finally:
                Background.idle.reset(token)
            if record["status"] != "interrupted":  # stopped mid-unit: no record, resume continues it
                self.results.append(record)
            self.run.services.events.release(unit.id)
            self._ended.put(record)
            unit = self._slots.next_unit() if slot.held else None
        if stop.stopped():
            self._ended.put(stop.StopRequested("no unit is started after the stop"))  # the main thread stops waiting

    def _spawn(self, unit: Unit) -> None:
        worker = threading.Thread(target=self._work, args=(unit,), name=f"unit-{len(self._workers)}", daemon=True)
        self._workers.append(worker)
        worker.start()


@contextmanager
def open_threads(
    protocol: Protocol, run: Run, builder: Any, context: Any, results: ResultStore
) -> Iterator[ThreadExecutor]:
    """The thread executor, with the run's checkpointer (SQLite in the run directory, or PostgreSQL) open and the
    graph compiled with it, while the units run."""
    with open_checkpointer(run.run_dir, run.config.stores.postgres_dsn) as saver, long_lived_heap():
        yield ThreadExecutor(protocol, run, builder.compile(checkpointer=saver, name=protocol.name), context, results)


@contextmanager
def long_lived_heap() -> Iterator[None]:
    """While the units run, the cyclic collector leaves alone what is loaded by then (modules, classes, clients,
    the graph), which lives until the process ends (``gc.freeze``): six full collections over it took 0.5 s of a
    6-second, 1150-call ATAD run at zero latency. With the command's collection threshold, ATAD at zero latency 175 ->
    199 calls/s, CPU per call 5.8 -> 5.1 ms (``python -m bench.revisions``, median of 3). Undone after the units
    (garbage frozen meanwhile is collected later)."""
    import gc

    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
