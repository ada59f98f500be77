"""One unit run to END on its own graph thread: start, continue from the last checkpoint, or re-judge.

A unit is final only when its graph reached END (no task pending in its latest
checkpoint: ``snapshot.next`` is not enough, LangGraph leaves out of it a task
whose writes are saved while the step's next checkpoint is not) and its record
says ``ok`` or ``model_error``. Every other unit continues from its last
checkpoint (or starts, if it never checkpointed), so infrastructure errors are
tried again. A unit that reached END with ungraded verdicts
(``Protocol.ungraded``) is recorded as ``ungraded`` and re-judged from the
checkpoint just before its first ungraded verdict: :func:`run_unit` walks the
thread's checkpoint lineage (``get_state_history``), finds the earliest checkpoint
whose values hold an ungraded verdict and invokes the graph from that checkpoint's
parent, so LangGraph forks the thread there: the judging node runs again,
everything before it is kept. Every executor (``runtime.executors``) runs units
with this function, whichever process or machine it runs them on.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from dyneval.runtime import stop
from dyneval.runtime.agents.state_check import agent_fields
from dyneval.runtime.llm import is_endpoint_fault
from dyneval.runtime.protocol import DIVERGED, RESULT_STATUSES, Protocol, Run, Unit
from dyneval.state.agent import is_agent_ref
from dyneval.state.errors import InfraError, ModelError, ReplayMissing


def _reached_end(snapshot: Any) -> bool:
    """The thread has a checkpoint and no task pending in it (finished, or saved but not yet committed)."""
    return snapshot.metadata is not None and not snapshot.tasks


def _before_first_ungraded(protocol: Protocol, graph: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint config to fork from to re-judge: the parent of the earliest ungraded checkpoint.

    Walks the thread's current lineage only (head, then parents), not the
    branches earlier re-judgements left behind.
    """
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in graph.get_state_history(config)}
    snapshot, earliest = graph.get_state(config), None
    while snapshot is not None:
        if protocol.ungraded(dict(snapshot.values)) > 0:
            earliest = snapshot
        parent = snapshot.parent_config
        snapshot = by_id.get(parent["configurable"]["checkpoint_id"]) if parent else None
    return earliest.parent_config if earliest is not None else None


_DONE = object()


def thread_id(run: Run, unit: Unit, graph: Any) -> str:
    """The checkpoint thread of ``unit`` in ``run``: ``RUN_ID/UNIT_ID``, so runs sharing one PostgreSQL database (or
    one SQLite file) never continue each other's threads. A run directory made before run-scoped threads keeps
    its units' threads under their bare unit ids in its own SQLite file: a resume continues those (read, never
    migrated); a database shared with other runs is never searched for bare ids."""
    scoped = f"{run.run_dir.name}/{unit.id}"
    if (
        run.resumed
        and not run.config.stores.postgres_dsn
        and graph.get_state({"configurable": {"thread_id": scoped}}).metadata is None
        and graph.get_state({"configurable": {"thread_id": unit.id}}).metadata is not None
    ):
        return unit.id
    return scoped


def run_unit(protocol: Protocol, run: Run, graph: Any, unit: Unit, context: Any) -> dict[str, Any]:
    """Run (continue, or re-judge) one unit to END and return its record (status ``interrupted`` after Ctrl-C)."""
    started = time.perf_counter()
    record: dict[str, Any] = {"unit_id": unit.id, "meta": unit.meta}
    earlier = False  # an agent's unit going on from a checkpoint made before: its threads may have turns there
    try:
        # the event log files each call under the unit id, not the thread id (runtime.llm.current_unit)
        config: dict[str, Any] = {
            "configurable": {"thread_id": thread_id(run, unit, graph), "unit_id": unit.id},
            "recursion_limit": 200,
        }
        snapshot = graph.get_state(config)
        start = config
        earlier = snapshot.metadata is not None and any(is_agent_ref(s) for s in protocol.subjects(run))
        if snapshot.metadata is None:
            payload: Any = unit.input  # never checkpointed
        elif not _reached_end(snapshot):
            payload = None  # continue from the last checkpoint, with the writes already saved in it
        elif protocol.ungraded(dict(snapshot.values)) and (fork := _before_first_ungraded(protocol, graph, config)):
            # the fork's checkpoint config names the thread and checkpoint only: the unit id goes with it, or its
            # calls would be filed under the thread id (runtime.llm.current_unit), missing from the unit's record
            payload, start = None, {**config, "configurable": {**fork["configurable"], "unit_id": unit.id}}
        else:
            payload = _DONE  # reached END earlier; only its record was missing
        while payload is not _DONE:
            # "updates": the node's own writes, nothing to build; the state is read back with get_state. Not "custom"
            # (or "messages"): with either, LangGraph runs even a step's single node on a pool thread with a
            # waiter future, never in this thread (fewer threads; no calls/s gain measured, `bench.revisions`)
            graph.invoke(payload, start, context=context, stream_mode="updates")
            start = config  # after a fork the thread's head is the new branch
            snapshot = graph.get_state(config)
            pending = [i for task in snapshot.tasks for i in task.interrupts]
            if not pending:
                break
            from langgraph.types import Command  # langgraph is loaded with the graph, not for `dyneval --help`

            payload = Command(resume=protocol.on_interrupt(run, unit, pending[0].value))
        snapshot = graph.get_state(config)
        if not _reached_end(snapshot):
            raise RuntimeError(f"the graph stopped before END (next: {snapshot.next})")
        values = dict(snapshot.values)
        ungraded = protocol.ungraded(values)
        record.update(
            status="ungraded" if ungraded else "ok", ungraded_verdicts=ungraded, **protocol.result(unit, values)
        )
    except stop.StopRequested:
        record.update(status="interrupted")
    except ReplayMissing as exc:
        record.update(status=DIVERGED, error=str(exc))
    except ModelError as exc:
        record.update(status="model_error", error=str(exc))
    except InfraError as exc:
        record.update(status="infra_error", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a failed unit is recorded and the run goes on
        status = "infra_error" if is_endpoint_fault(exc) else "error"
        record.update(status=status, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=6))
    if run.config.rescored_from:  # the agent's turns were replayed: its final states and their checks are the source's
        record.update(run.services.source_agent_fields(unit.id))
    elif agent_states := run.services.agent_states(unit.id, earlier=earlier):  # an agent's final state per thread
        check = run.config.state_check if record["status"] in RESULT_STATUSES else None  # on results only
        record.update(agent_fields(agent_states, unit.input, check))
    record["wall_s"] = round(time.perf_counter() - started, 3)
    record["usage"] = run.services.events.usage(unit.id).as_dict()
    return record
