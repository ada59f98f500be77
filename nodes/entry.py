"""The first node of every protocol graph: the graph's input checked before any other node runs.

LangGraph does not validate a run's input against the graph's ``input_schema``: its start step keeps the schema's
keys and passes their values on as they are, so a wrong value reached the nodes, which failed with an exception
naming no field (``'int' object has no attribute 'get'``) or ran and spent calls on it. (A node given a pydantic
``input_schema`` of its own is validated while LangGraph prepares the step, outside the task: the error is not
saved with the thread, and every later read of the thread's state raises it again.)

The node made by :func:`check_input` validates the input with the graph's :class:`~state.graph_io.GraphInput`
model inside its task, refuses a wrong one with one :class:`GraphInputError` naming every wrong field by its path
(``seed.question``), and writes the validated values back (a nested record's defaults filled in), so the nodes
read typed values. An input the batch runner planned is already valid and is written back unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dyneval.state.errors import GraphInputError
from dyneval.state.graph_io import GraphInput
from dyneval.stores.inputs import value_kind

#: Error types whose message says all there is: nothing was given, a field that is not the model's, a problem that
#: does not have its task's fields (the message names the one that is wrong).
_NO_VALUE = frozenset({"missing", "extra_forbidden", "problem_fields"})


def _problem(error: ErrorDetails) -> str:
    """One refused field: its path, pydantic's reason and what was given instead."""
    path, value = ".".join(str(part) for part in error["loc"]), error["input"]
    if error["type"] in _NO_VALUE:
        return f"field {path!r}: {error['msg']}"
    return f"field {path!r}: {error['msg']}, got {json.dumps(value) if isinstance(value, str) else value_kind(value)}"


class EntryNode(Protocol):
    """A node LangGraph calls with the graph's state, by the parameter name ``state`` (which a ``Callable`` type
    does not promise, so LangGraph's ``add_node`` would refuse it). The state is typed ``Any``: the node reads any
    protocol's TypedDict state as a dict, and LangGraph's node types admit a TypedDict, dataclass or pydantic
    model, not a dict."""

    def __call__(self, state: Any) -> dict[str, Any]: ...


def check_input(schema: type[GraphInput]) -> EntryNode:
    """The entry node of a graph whose input is ``schema``."""

    def check_input(state: dict[str, Any]) -> dict[str, Any]:
        """The input validated with the graph's input model, or a GraphInputError naming each wrong field."""
        try:
            given = schema.model_validate({name: state[name] for name in schema.model_fields if name in state})
        except ValidationError as exc:
            raise GraphInputError("; ".join(_problem(error) for error in exc.errors())) from None
        values = given.model_dump()
        return {name: values[name] for name in given.model_fields_set}

    return check_input
