"""ATAD (seed 003, section 2.2, Figure 2): one problem per thread.

check_input -> generate (teacher) -> check_structure (code, Table 6) -> validate (orchestrator) -> accept
-> solve (student) -> escalate (orchestrator feedback, next difficulty tier) -> generate ... until the student
fails, the student loop cap is reached, or harder variants keep being rejected (finalize); a base problem that never
passes within max_init_loops is discarded. An orchestrator with no usable verdict stops the unit at END,
unjudged (``ungraded``), and resume re-runs that validation.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.atad.orchestrator import escalate, validate
from dyneval.nodes.atad.outcome import accept, check_structure, discard, finalize
from dyneval.nodes.atad.student import solve
from dyneval.nodes.atad.teacher import generate
from dyneval.nodes.entry import check_input
from dyneval.state.atad import AtadContext, AtadInput, AtadOutput, AtadState


def after_rejection(state: AtadState, runtime: Runtime[AtadContext]) -> Literal["generate", "discard", "finalize"]:
    """A rejected candidate: another teacher attempt while the phase allows one, else the item is discarded
    (no base problem within max_init_loops, section 2.2.1) or the last validated problem is kept
    (no harder variant within max_level_attempts, section 2.2.2)."""
    ctx, init = runtime.context, state.get("phase", "init") == "init"
    if state.get("attempts", 0) < (ctx.max_init_loops if init else ctx.max_level_attempts):
        return "generate"
    return "discard" if init else "finalize"


def after_check(
    state: AtadState, runtime: Runtime[AtadContext]
) -> Literal["validate", "accept", "generate", "discard", "finalize"]:
    """A malformed candidate is rejected in code; a well-formed one goes to the orchestrator (or, in the
    no-orchestrator ablation, straight to acceptance)."""
    if state.get("candidate_errors"):
        return after_rejection(state, runtime)
    return "accept" if runtime.context.no_orchestrator else "validate"


def after_validate(
    state: AtadState, runtime: Runtime[AtadContext]
) -> Literal["accept", "generate", "discard", "finalize", "__end__"]:
    """Approved -> accept (label a); rejected -> after_rejection (label e); no usable verdict -> END."""
    approved = state.get("approved")
    if approved is None:
        return END  # type: ignore[return-value]  # langgraph types END as str, its value is "__end__"
    return "accept" if approved else after_rejection(state, runtime)


def after_solve(state: AtadState, runtime: Runtime[AtadContext]) -> Literal["escalate", "finalize"]:
    """The student's failure or the loop cap finalizes the item; a success escalates (labels c, d)."""
    if not state.get("last_correct") or state.get("student_loops", 0) >= runtime.context.max_student_loops:
        return "finalize"
    return "escalate"


def build_graph() -> StateGraph[AtadState, AtadContext, AtadInput, AtadOutput]:
    """A new, uncompiled atad graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(AtadState, context_schema=AtadContext, input_schema=AtadInput, output_schema=AtadOutput)
    builder.add_node("check_input", check_input(AtadInput))
    builder.add_node("generate", generate)
    builder.add_node("check_structure", check_structure)
    builder.add_node("validate", validate)
    builder.add_node("accept", accept)
    builder.add_node("solve", solve)
    builder.add_node("escalate", escalate)
    builder.add_node("finalize", finalize)
    builder.add_node("discard", discard)
    builder.add_edge(START, "check_input")
    builder.add_edge("check_input", "generate")
    builder.add_edge("generate", "check_structure")
    builder.add_conditional_edges("check_structure", after_check)
    builder.add_conditional_edges("validate", after_validate)
    builder.add_edge("accept", "solve")
    builder.add_conditional_edges("solve", after_solve)
    builder.add_edge("escalate", "generate")
    builder.add_edge("finalize", END)
    builder.add_edge("discard", END)
    return builder


builder = build_graph()
graph = builder.compile(name="atad")
