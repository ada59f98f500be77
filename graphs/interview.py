"""LLM-as-an-Interviewer graph (seed 004, Figure 2, Algorithm 1): one seed question per thread.

check_input -> single_turn_judge -> modify_question -> answer -> grade -> (give_feedback -> answer)* ->
(ask_followup -> answer -> grade ...)* -> summarize_session; an ungraded answer ends the session at END.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.entry import check_input
from dyneval.nodes.interview.grader import grade, single_turn_judge
from dyneval.nodes.interview.interviewee import answer
from dyneval.nodes.interview.interviewer import ask_followup, give_feedback, modify_question, summarize_session
from dyneval.state.interview import InterviewContext, InterviewInput, InterviewOutput, InterviewState
from dyneval.state.verdicts import is_ungraded


def after_grade(
    state: InterviewState, runtime: Runtime[InterviewContext]
) -> Literal["give_feedback", "ask_followup", "summarize_session", "__end__"]:
    """Wrong and retries left -> feedback (lines 17-23); else a follow-up while questions remain (25-28); else end.

    ``attempt`` is 1-based, so ``attempt <= max_retries`` means a retry is still allowed.
    Follow-up questions get retries only with ``retry_followups``.

    An ungraded answer ends the session at once, without feedback, follow-up or summary: Algorithm 1 branches
    on the verdict (feedback on a wrong answer, the follow-up type by outcome, Table 1), so nothing after it
    would be sound. The unit is recorded as ``ungraded`` and resume re-judges that answer and goes on.
    """
    ctx = runtime.context
    cur, grade = state["current"], state["last_grade"]
    if is_ungraded(grade):
        return END  # type: ignore[return-value]  # langgraph types END as str, its value is "__end__"
    retries = ctx.max_retries if (cur["kind"] == "seed" or ctx.retry_followups) else 0
    if not grade["correct"] and cur["attempt"] <= retries:
        return "give_feedback"
    if ctx.followups and cur["q"] + 1 < ctx.max_questions:
        return "ask_followup"
    return "summarize_session"


def after_followup(state: InterviewState, runtime: Runtime[InterviewContext]) -> Literal["answer", "summarize_session"]:
    """Ask the new follow-up, or end the session when none could be generated."""
    followups = state.get("followups", [])
    return "answer" if followups and followups[-1].get("status") == "asked" else "summarize_session"


def build_graph() -> StateGraph[InterviewState, InterviewContext, InterviewInput, InterviewOutput]:
    """A new, uncompiled interview graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(
        InterviewState, context_schema=InterviewContext, input_schema=InterviewInput, output_schema=InterviewOutput
    )
    builder.add_node("check_input", check_input(InterviewInput))
    builder.add_node("single_turn_judge", single_turn_judge)
    builder.add_node("modify_question", modify_question)
    builder.add_node("answer", answer)
    builder.add_node("grade", grade)
    builder.add_node("give_feedback", give_feedback)
    builder.add_node("ask_followup", ask_followup)
    builder.add_node("summarize_session", summarize_session)
    builder.add_edge(START, "check_input")
    builder.add_edge("check_input", "single_turn_judge")
    builder.add_edge("single_turn_judge", "modify_question")
    builder.add_edge("modify_question", "answer")
    builder.add_edge("answer", "grade")
    builder.add_conditional_edges("grade", after_grade)
    builder.add_edge("give_feedback", "answer")
    builder.add_conditional_edges("ask_followup", after_followup)
    builder.add_edge("summarize_session", END)
    return builder


builder = build_graph()
graph = builder.compile(name="interview")
