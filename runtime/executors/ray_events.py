"""A Ray run's exchanges: counted on the unit runner that made them, written in batches to the run's PostgreSQL
database (:mod:`stores.event_batches`), appended to ``events.jsonl`` and counted again by the driver.

A runner writes its batch straight to the database, not through an actor: it used to send each batch to an event
sink actor on the driver's node, one actor call per graph step of a runner, and that actor's process cost the
driver's node about as much CPU per LLM call as the coordinator's.
"""

from __future__ import annotations

import threading
from typing import Any

from dyneval.runtime import stop
from dyneval.runtime.events import EventLog
from dyneval.runtime.pricing import Pricing
from dyneval.state.errors import InfraError
from dyneval.stores.event_batches import EventBatches
from dyneval.stores.files import json_line


class ForwardedLog(EventLog):
    """A worker's event log: an exchange counts here at once (for the unit's record and the budget's tally) and
    goes to the run's database in a batch, written by :meth:`flush`: before each checkpoint write (so a unit
    continued from its checkpoint elsewhere holds no call the log lacks), at the end of each unit and preparation
    item, and on a stop. When the database stays out of reach through the retries (:mod:`stores.postgres`), the
    worker stops, and the unit whose checkpoint write found it so is left to be continued by a resume, which makes
    the calls since its last checkpoint again and logs them."""

    def __init__(self, batches: EventBatches, pricing: Pricing | None, worker: str) -> None:
        super().__init__(path=None, pricing=pricing)
        self.batches, self.worker = batches, worker
        self._sending = threading.Condition()
        self._batch: list[str] = []
        self._logged = self._sent = 0
        self._busy = False
        self._gone: InfraError | None = None

    def log(self, event: dict[str, Any]) -> None:
        event = {**event, "worker": self.worker}
        line = json_line(event)
        with self._lock:
            self._count(event)
        with self._sending:
            self._batch.append(line)
            self._logged += 1

    def flush(self) -> None:
        """Return once every exchange logged before the call is in the database. One batch is on its way at a
        time; the threads that flush meanwhile wait for it and the next one carries all of theirs (a group
        commit), so a runner of many threads writes far fewer batches than exchanges."""
        with self._sending:
            wanted = self._logged
            while self._sent < wanted and self._gone is None:
                if self._busy:
                    self._sending.wait()
                    continue
                batch, self._batch, upto, self._busy = self._batch, [], self._logged, True
                self._sending.release()
                sent = False
                try:
                    self.batches.put(self.worker, "".join(batch))
                    sent = True
                except InfraError as exc:
                    self._gone = exc
                finally:
                    self._sending.acquire()
                    self._busy = False
                    if sent:
                        self._sent = upto
                    elif self._gone is None:  # raised as it came: the batch goes with the next flush
                        self._batch[:0] = batch
                    self._sending.notify_all()
        if self._gone is not None:
            stop.request_stop()
            raise stop.StopRequested(f"the run's exchanges cannot be written: {self._gone}")


class Drain:
    """Appends to the driver's ``events`` and counts what the workers wrote since the last drain (called by one
    thread at a time): taken, appended, then marked appended, so a kill at any point loses and doubles nothing
    (:mod:`stores.event_batches`). A drain's rows are marked by the next drain's take, in its statement: one round
    trip per drain; :meth:`close` marks the last ones."""

    def __init__(self, batches: EventBatches, events: EventLog) -> None:
        self.batches, self.events = batches, events
        self._unmarked: int | None = None  # the offset the last rows appended were taken for, not yet marked

    def __call__(self) -> None:
        offsets: list[int] = []

        def take(offset: int) -> str:
            lines = self.batches.take(offset, appended=self._unmarked)
            self._unmarked = None  # marked by the statement that took these
            offsets.append(offset)
            return lines

        if self.events.append_taken(take):
            # only these: rows a take that raised marked for another offset wait for a resume
            self._unmarked = offsets[0]

    def close(self) -> None:
        """Mark the last drain's rows appended (else a resume would find them in the log and mark them then)."""
        if self._unmarked is not None:
            self.batches.appended(self._unmarked)
            self._unmarked = None


def take_in_left(batches: EventBatches, events: EventLog) -> None:
    """At a session's start, before anything runs: the part of the batches a killed driver took that its log
    lacks (the rest it holds was counted as it was opened), then what the workers wrote after the kill."""
    events.append_taken(lambda _: batches.left(events.path))
    batches.appended()
    drain = Drain(batches, events)
    drain()
    drain.close()
