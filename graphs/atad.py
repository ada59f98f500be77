"""ATAD (seed 003, section 2.2, Figure 2): one problem per thread.

generate (teacher) -> check_structure (code, Table 6) -> validate (orchestrator) -> accept -> solve (student)
-> escalate (orchestrator feedback, next difficulty tier) -> generate ... until the student fails, the
student loop cap is reached, or harder variants keep being rejected (finalize); a base problem that never
passes within max_init_loops is discarded.
"""

from langgraph.graph import END, START, StateGraph

from nodes.atad.orchestrator import escalate, validate
from nodes.atad.outcome import accept, check_structure, discard, finalize
from nodes.atad.student import solve
from nodes.atad.teacher import generate
from state.atad import AtadContext, AtadState

builder = StateGraph(AtadState, context_schema=AtadContext)
builder.add_node("generate", generate)
builder.add_node("check_structure", check_structure)
builder.add_node("validate", validate)
builder.add_node("accept", accept)
builder.add_node("solve", solve)
builder.add_node("escalate", escalate)
builder.add_node("finalize", finalize)
builder.add_node("discard", discard)
builder.add_edge(START, "generate")
builder.add_edge("generate", "check_structure")
builder.add_edge("accept", "solve")
builder.add_edge("escalate", "generate")
builder.add_edge("finalize", END)
builder.add_edge("discard", END)

graph = builder.compile(name="atad")
