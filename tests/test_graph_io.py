"""A graph's output (what ``invoke`` returns and Studio's end-of-run panel shows) is its unit's result: every field
the unit's record is made of, without the progress fields the whole state keeps in the thread. Each protocol's
graph runs a few units against the stand-in endpoint, and its record made from the output alone must equal the
record made from the thread's whole state. (Judge-check and LLMEval-3 keep no progress fields in their state, only
the item or the session's ids, counts and scores: their output is their state.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from dyneval.protocols import protocol_class
from dyneval.protocols.atad.benchmark import item_record
from dyneval.protocols.atad.evaluation import AtadEvalProtocol
from dyneval.runtime.protocol import Protocol, Unit
from dyneval.state.atad import DEFAULT_LADDER, parse_ladder
from tests import golden_runs
from tests.standin_endpoint import StandIn
from tests.test_fault_verdicts import (
    ATAD_ROLES,
    INTERVIEW_PARAMS,
    INTERVIEW_ROLES,
    JUDGE_ROLES,
    _atad_units,
    garbage_for,
    interview_units,
    judgeagent_params,
    judgeagent_units,
    services,
)
from tests.test_judgeagent_support import write_kb

GENERATION_ROLES = {"target": "student", "evaluator": "orchestrator", "teacher": "teacher"}


def _generation_units() -> list[Unit]:
    common = {"topic": "science", "challenge": None, "style": "GRE"}
    return [
        Unit(id="T1-0000", input={**common, "task": "T1", "target_coherent": None}),
        Unit(id="T2-0000", input={**common, "task": "T2", "target_coherent": True}),
    ]


#: protocol -> (its protocol, roles, (units, context parameters) made in a folder, the stand-in's own replies); the
#: evaluation's reviewer never answers usably, so its review unit is recorded ungraded
CASES: dict[str, tuple[Callable[[], Protocol], dict[str, str], Callable[[Path], tuple[list[Unit], dict]], Any]] = {
    "interview": (
        protocol_class("interview"),
        INTERVIEW_ROLES,
        lambda tmp: (interview_units()[:2], INTERVIEW_PARAMS),
        None,
    ),
    "atad": (
        protocol_class("atad"),
        GENERATION_ROLES,
        lambda tmp: (_generation_units(), {"max_student_loops": 2}),
        golden_runs.respond,
    ),
    "atad_eval": (AtadEvalProtocol, ATAD_ROLES, lambda tmp: (_atad_units()[:2], {}), garbage_for("reviewer")),
    "judgeagent": (
        protocol_class("judgeagent"),
        JUDGE_ROLES,
        lambda tmp: (judgeagent_units(tmp)[:1], judgeagent_params(write_kb(tmp / "kb"))),
        golden_runs.respond,
    ),
}


def _record(name: str, protocol: Protocol, unit: Unit, values: dict[str, Any]) -> dict[str, Any]:
    """What the run keeps of a finished unit: its verdict count and its record (ATAD: its benchmark item)."""
    made = (
        item_record(unit.id, values, levels=parse_ladder(DEFAULT_LADDER), orchestrator=True, generator={})
        if name == "atad"
        else protocol.result(unit, values)
    )
    return {"ungraded": protocol.ungraded(values), "record": made}


@pytest.mark.parametrize("name", list(CASES))
def test_a_graphs_output_is_its_units_result_without_the_progress_fields(name, tmp_path):
    make, roles, setup, respond = CASES[name]
    protocol = make()
    units, params = setup(tmp_path)
    with StandIn(respond=respond) as standin:
        svc = services(tmp_path, standin, name, roles)
        graph = protocol.builder().compile(checkpointer=InMemorySaver())
        context = protocol.context_cls(services=svc, **params)
        for unit in units:
            config = {"configurable": {"thread_id": unit.id}}
            output = graph.invoke(unit.input, config, context=context)
            state = dict(graph.get_state(config).values)
            assert set(output) < set(state), f"{unit.id}: the output is the whole state"
            assert _record(name, protocol, unit, output) == _record(name, protocol, unit, state), unit.id
