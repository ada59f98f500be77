"""LLM-as-an-Interviewer graph (seed 004, Figure 2, Algorithm 1): one seed question per thread.

single_turn_judge -> modify_question -> answer -> grade -> (give_feedback -> answer)* ->
(ask_followup -> answer -> grade ...)* -> summarize_session.
"""

from langgraph.graph import END, START, StateGraph

from nodes.interview.grader import grade, single_turn_judge
from nodes.interview.interviewee import answer
from nodes.interview.interviewer import ask_followup, give_feedback, modify_question, summarize_session
from nodes.interview.routing import after_followup, after_grade
from state.interview import InterviewContext, InterviewState

builder = StateGraph(InterviewState, context_schema=InterviewContext)
builder.add_node("single_turn_judge", single_turn_judge)
builder.add_node("modify_question", modify_question)
builder.add_node("answer", answer)
builder.add_node("grade", grade)
builder.add_node("give_feedback", give_feedback)
builder.add_node("ask_followup", ask_followup)
builder.add_node("summarize_session", summarize_session)
builder.add_edge(START, "single_turn_judge")
builder.add_edge("single_turn_judge", "modify_question")
builder.add_edge("modify_question", "answer")
builder.add_edge("answer", "grade")
builder.add_conditional_edges("grade", after_grade)
builder.add_edge("give_feedback", "answer")
builder.add_conditional_edges("ask_followup", after_followup)
builder.add_edge("summarize_session", END)

graph = builder.compile(name="interview")
