"""What a run asks of its agents, checked before anything is created (bad input: exit 2, one line).

* ``--state-check`` names a function that imports (:func:`runtime.agents.state_check.load_check`), and every model
  under test is an agent whose state can be read: a graph (in-process or served). A model keeps no state, and an
  ``app(message, *, thread_id)`` keeps its own out of reach.
* ``--executor ray`` runs units in other processes, which import a ``graph:`` reference by its module or file; an
  agent object handed to the Python API (``app:NAME``) exists only in the process that registered it.
"""

from __future__ import annotations

from dyneval.state.agent import is_agent_ref, parse_agent_ref
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError


def check_agents_of_run(subjects: list[str], config: RunConfig, executor: str) -> None:
    """Refuse what the run's models under test (``subjects``, by reference) cannot do; ``InputError`` naming the
    flag."""
    if executor == "ray":
        for ref in subjects:
            if is_agent_ref(ref) and parse_agent_ref(ref).kind == "app":
                raise InputError(
                    f"the agent {ref} is an object handed to the Python API: it exists in this process only, and "
                    "--executor ray runs units in other processes; name it graph:MODULE:ATTR (or "
                    "graph:path/to/file.py:ATTR) so that every worker imports it",
                    field="--executor",
                )
    if not config.state_check:
        return
    from dyneval.runtime.agents.reference import load_agent
    from dyneval.runtime.agents.state_check import load_check

    try:
        load_check(config.state_check)
    except ValueError as exc:
        raise InputError(str(exc), field="--state-check") from None
    if not subjects:
        raise InputError("--state-check checks an agent target's state: this run evaluates none", field="--state-check")
    for ref in subjects:
        if not is_agent_ref(ref):
            raise InputError(
                f"--state-check reads an agent's final state: {ref} is a model, which keeps none (use it with "
                "graph:MODULE:ATTR or langgraph:URL targets)",
                field="--state-check",
            )
        if not load_agent(ref).keeps_state:
            raise InputError(
                f"--state-check reads an agent's final state: {ref} is an app(message, *, thread_id), whose "
                "state dyneval cannot read (hand it the compiled graph instead)",
                field="--state-check",
            )
