"""LLMEval-3 exam graph (seed 002): one thread = one exam session of one model.

check_input -> open_session -> answer_questions (loops until every allocated question is answered, in order)
-> [answer_reference (loops; only with a reference model)] -> judge_answers -> score_session.

Adaptive sessions (``--adaptive``, IRT): open_session -> select_question -> answer_questions -> judge_answers
-> select_question ... until select_question stops the session -> score_session.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.entry import check_input
from dyneval.nodes.llmeval.adaptive import select_question
from dyneval.nodes.llmeval.examinee import answer_questions, answer_reference
from dyneval.nodes.llmeval.judge import judge_answers
from dyneval.nodes.llmeval.scoring import score_session
from dyneval.nodes.llmeval.session import open_session
from dyneval.state.llmeval import LLMEvalContext, LLMEvalInput, LLMEvalOutput, LLMEvalState


def after_target(
    state: LLMEvalState, runtime: Runtime[LLMEvalContext]
) -> Literal["answer_questions", "answer_reference", "judge_answers"]:
    """Keep answering until the quota is used up; then the reference replay (if any), then the judge."""
    if state.get("answered", 0) < state.get("allocated", 0):
        return "answer_questions"
    if state.get("reference_session_id") and state.get("reference_answered", 0) < state.get("allocated", 0):
        return "answer_reference"
    return "judge_answers"


def after_open(
    state: LLMEvalState, runtime: Runtime[LLMEvalContext]
) -> Literal["select_question", "answer_questions", "answer_reference", "judge_answers"]:
    """An adaptive session first chooses its question; a fixed one answers its allocation."""
    if state.get("adaptive"):
        return "select_question"
    return after_target(state, runtime)


def after_select(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> Literal["answer_questions", "score_session"]:
    """The chosen question is answered; a stopped adaptive session is scored."""
    return "score_session" if state.get("stopped") else "answer_questions"


def after_judge(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> Literal["select_question", "score_session"]:
    """An adaptive session updates its ability and chooses again; a fixed one is scored."""
    return "select_question" if state.get("adaptive") else "score_session"


def after_reference(
    state: LLMEvalState, runtime: Runtime[LLMEvalContext]
) -> Literal["answer_reference", "judge_answers"]:
    """The reference model answers the same questions until its quota is used up; then the judge."""
    if state.get("reference_answered", 0) < state.get("allocated", 0):
        return "answer_reference"
    return "judge_answers"


def build_graph() -> StateGraph[LLMEvalState, LLMEvalContext, LLMEvalInput, LLMEvalOutput]:
    """A new, uncompiled llmeval graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(
        LLMEvalState, context_schema=LLMEvalContext, input_schema=LLMEvalInput, output_schema=LLMEvalOutput
    )
    builder.add_node("check_input", check_input(LLMEvalInput))
    builder.add_node("open_session", open_session)
    builder.add_node("answer_questions", answer_questions)
    builder.add_node("answer_reference", answer_reference)
    builder.add_node("select_question", select_question)
    builder.add_node("judge_answers", judge_answers)
    builder.add_node("score_session", score_session)
    builder.add_edge(START, "check_input")
    builder.add_edge("check_input", "open_session")
    builder.add_conditional_edges("open_session", after_open)
    builder.add_conditional_edges("select_question", after_select)
    builder.add_conditional_edges("answer_questions", after_target)
    builder.add_conditional_edges("answer_reference", after_reference)
    builder.add_conditional_edges("judge_answers", after_judge)
    builder.add_edge("score_session", END)
    return builder


builder = build_graph()
graph = builder.compile(name="llmeval")
