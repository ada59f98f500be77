"""Executors: where a run's units work. The runner (``runtime.runner``) plans the units, hands the unfinished
ones to an executor, shows the records it hands back as units end, and asks it to stop on Ctrl-C, SIGTERM or a
spent budget; the run directory, summary and report stay the runner's.

``threads`` (:mod:`.threads`) runs the units on threads of this process, at most ``--concurrency`` at once;
``ray`` (:mod:`.ray`) runs them on unit runners (Ray actors) on the nodes of a cluster (``--executor ray``), which
also take the protocol's heavy preparation (:mod:`runtime.spread`).
Whatever the executor, a unit is one graph thread run by :func:`runtime.unit.run_unit`, and its record is in
``results.jsonl`` before the executor hands it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph

    # annotations only: runtime.protocol's Run carries an ExecutorChoice (runtime.executors.choice)
    from dyneval.runtime.protocol import Protocol as EvalProtocol
    from dyneval.runtime.protocol import Run, Unit
    from dyneval.stores.results import ResultStore


class Executor(Protocol):
    """Runs submitted units and hands their records back as they end."""

    def submit(self, units: list[Unit]) -> None:
        """Start the units, at most ``run.config.concurrency`` working at once, in the order given."""

    def ended(self) -> Iterator[dict[str, Any]]:
        """The record of every submitted unit as it ends (status ``interrupted`` for a unit the stop cut short:
        not saved, resume continues it); raises what ended the run instead (a failed background build, an
        exception no unit record holds, ``StopRequested`` once no unit is left working after the stop)."""

    def stop(self, grace_s: float) -> Iterator[dict[str, Any]]:
        """Start no unit any more; the records of the units that end within ``grace_s`` seconds (the stop flag,
        already up, refuses their next request)."""

    def working(self) -> bool:
        """Whether a unit still works (after :meth:`stop`, one whose request is still blocked)."""


class Session(Protocol):
    """Where a session's work runs, open from before the protocol's preparation until the units are done."""

    def units(self, builder: StateGraph, context: Any, results: ResultStore) -> AbstractContextManager[Executor]:
        """The executor of the units, open while they run; it appends each unit's record to ``results``."""


class _ThreadSession:
    """Threads of this process: preparation runs here (the run's own ``services.spread``)."""

    def __init__(self, protocol: EvalProtocol, run: Run) -> None:
        self.protocol, self.run = protocol, run

    def units(self, builder: StateGraph, context: Any, results: ResultStore) -> AbstractContextManager[Executor]:
        from dyneval.runtime.executors.threads import open_threads

        return open_threads(self.protocol, self.run, builder, context, results)


@contextmanager
def open_session(protocol: EvalProtocol, run: Run) -> Iterator[Session]:
    """The session ``run.executor`` names. Threads compile the graph with the run's checkpointer and run the
    units with the context the runner made; on Ray, the run's workers map the preparation's heavy work
    (``run.services.spread`` is theirs meanwhile) and build graph and context themselves.

    A resumed run with a PostgreSQL database first appends to its ``events.jsonl`` the exchanges its Ray workers
    wrote there that no driver appended (:mod:`.ray_events`: its driver was killed), whichever executor resumes."""
    dsn = run.config.stores.postgres_dsn
    if run.resumed and dsn:
        from dyneval.runtime.executors.ray_events import take_in_left
        from dyneval.stores.event_batches import EventBatches

        with EventBatches(dsn, run.run_dir.name) as batches:
            take_in_left(batches, run.services.events)
    if run.executor.name == "ray":
        from dyneval.runtime.executors.ray import open_ray  # Ray is loaded for --executor ray only

        with open_ray(protocol, run, run.executor.ray_address) as session:
            yield session
        return
    yield _ThreadSession(protocol, run)
