"""JudgeAgent (seed 000, Algorithm 1): one batch of base questions per thread.

check_input -> grade_benchmark (section 3.1), or with calibrated questions (--irt-runs) select_base -> ask_base -> ...
-> close_grading (issue 17: base questions chosen by IRT information) -> [extract_question_entities (Alg. 4
l.3-7)] -> rounds x (sample_knowledge (Alg. 4) -> generate_question (Table 12) -> ask_target ->
estimate_capability (running score, next difficulty)) -> feedback (Table 13) -> validate (Algorithm 2, Table 14).
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.entry import check_input
from dyneval.nodes.judgeagent.adaptive import ask_base, close_grading, select_base
from dyneval.nodes.judgeagent.extension import ask_target, estimate_capability, generate_question
from dyneval.nodes.judgeagent.feedback import feedback
from dyneval.nodes.judgeagent.grading import grade_benchmark
from dyneval.nodes.judgeagent.knowledge import extract_question_entities, sample_knowledge
from dyneval.nodes.judgeagent.validation import validate
from dyneval.state.judgeagent import JudgeAgentContext, JudgeAgentInput, JudgeAgentOutput, JudgeAgentState


def grading_mode(state: JudgeAgentState) -> Literal["grade_benchmark", "select_base"]:
    """Adaptive grading when the batch comes with item parameters (a pool to choose from), else every question."""
    return "select_base" if state.get("irt") else "grade_benchmark"


def after_select(state: JudgeAgentState) -> Literal["ask_base", "close_grading"]:
    """Ask the chosen question; with none chosen, grading is over."""
    return "ask_base" if state.get("pick") else "close_grading"


def after_grading(
    state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]
) -> Literal["extract_question_entities", "sample_knowledge", "feedback"]:
    """Extension rounds unless disabled; the base questions' entities seed the graph paths, except in the
    no-context-graph ablation (random knowledge-base chunks)."""
    ctx = runtime.context
    if ctx.no_extension or ctx.rounds <= 0:
        return "feedback"
    return "sample_knowledge" if ctx.no_context_graph else "extract_question_entities"


def after_round(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> Literal["sample_knowledge", "feedback"]:
    """Another extension round until ``rounds`` are done, then feedback."""
    return "sample_knowledge" if len(state.get("rounds", [])) < runtime.context.rounds else "feedback"


def after_feedback(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> Literal["validate", "__end__"]:
    """Validate the suggestions; a batch whose feedback failed or came back empty ends unvalidated."""
    fb = state.get("feedback") or {}
    if runtime.context.no_validation or fb.get("status") != "ok":
        return END  # type: ignore[return-value]  # langgraph types END as str, its value is "__end__"
    return "validate"


def build_graph() -> StateGraph[JudgeAgentState, JudgeAgentContext, JudgeAgentInput, JudgeAgentOutput]:
    """A new, uncompiled judgeagent graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(
        JudgeAgentState, context_schema=JudgeAgentContext, input_schema=JudgeAgentInput, output_schema=JudgeAgentOutput
    )
    builder.add_node("check_input", check_input(JudgeAgentInput))
    builder.add_node("grade_benchmark", grade_benchmark)
    builder.add_node("select_base", select_base)
    builder.add_node("ask_base", ask_base)
    builder.add_node("close_grading", close_grading)
    builder.add_node("extract_question_entities", extract_question_entities)
    builder.add_node("sample_knowledge", sample_knowledge)
    builder.add_node("generate_question", generate_question)
    builder.add_node("ask_target", ask_target)
    builder.add_node("estimate_capability", estimate_capability)
    builder.add_node("feedback", feedback)
    builder.add_node("validate", validate)
    builder.add_edge(START, "check_input")
    builder.add_conditional_edges("check_input", grading_mode)
    builder.add_conditional_edges("select_base", after_select)
    builder.add_edge("ask_base", "select_base")
    builder.add_conditional_edges("grade_benchmark", after_grading)
    builder.add_conditional_edges("close_grading", after_grading)
    builder.add_edge("extract_question_entities", "sample_knowledge")
    builder.add_edge("sample_knowledge", "generate_question")
    builder.add_edge("generate_question", "ask_target")
    builder.add_edge("ask_target", "estimate_capability")
    builder.add_conditional_edges("estimate_capability", after_round)
    builder.add_conditional_edges("feedback", after_feedback)
    builder.add_edge("validate", END)
    return builder


builder = build_graph()
graph = builder.compile(name="judgeagent")
