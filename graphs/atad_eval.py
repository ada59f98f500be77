"""ATAD evaluation phase (seed 003, section 2.2.3; Table 3 review): one model x one benchmark problem per thread.

check_input -> answer_item (the model solves the problem) or review_item (it scores the problem) -> END.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.atad.evaluation import answer_item, review_item
from dyneval.nodes.entry import check_input
from dyneval.state.atad import EvalContext, EvalInput, EvalOutput, EvalState


def route_kind(state: EvalState, runtime: Runtime[EvalContext]) -> Literal["answer_item", "review_item"]:
    """Evaluation units either answer or review their problem."""
    return "review_item" if state.get("kind") == "review" else "answer_item"


def build_graph() -> StateGraph[EvalState, EvalContext, EvalInput, EvalOutput]:
    """A new, uncompiled atad_eval graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(EvalState, context_schema=EvalContext, input_schema=EvalInput, output_schema=EvalOutput)
    builder.add_node("check_input", check_input(EvalInput))
    builder.add_node("answer_item", answer_item)
    builder.add_node("review_item", review_item)
    builder.add_edge(START, "check_input")
    builder.add_conditional_edges("check_input", route_kind)
    builder.add_edge("answer_item", END)
    builder.add_edge("review_item", END)
    return builder


builder = build_graph()
graph = builder.compile(name="atad_eval")
