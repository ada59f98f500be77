"""JudgeAgent (seed 000, Algorithm 1): one batch of base questions per thread.

grade_benchmark (section 3.1) -> [extract_question_entities (Alg. 4 l.3-7)] -> rounds x (sample_knowledge
(Alg. 4) -> generate_question (Table 12) -> ask_target -> estimate_capability (running score, next
difficulty)) -> feedback (Table 13) -> validate (Algorithm 2, Table 14).
"""

from langgraph.graph import END, START, StateGraph

from nodes.judgeagent.extension import (ask_target, estimate_capability, generate_question, route_after_grading,
                                        route_after_round)
from nodes.judgeagent.feedback import feedback
from nodes.judgeagent.grading import grade_benchmark
from nodes.judgeagent.knowledge import extract_question_entities, sample_knowledge
from nodes.judgeagent.validation import route_after_feedback, validate
from state.judgeagent import JudgeAgentContext, JudgeAgentState

builder = StateGraph(JudgeAgentState, context_schema=JudgeAgentContext)
builder.add_node("grade_benchmark", grade_benchmark)
builder.add_node("extract_question_entities", extract_question_entities)
builder.add_node("sample_knowledge", sample_knowledge)
builder.add_node("generate_question", generate_question)
builder.add_node("ask_target", ask_target)
builder.add_node("estimate_capability", estimate_capability)
builder.add_node("feedback", feedback)
builder.add_node("validate", validate)
builder.add_edge(START, "grade_benchmark")
builder.add_conditional_edges("grade_benchmark", route_after_grading)
builder.add_edge("extract_question_entities", "sample_knowledge")
builder.add_edge("sample_knowledge", "generate_question")
builder.add_edge("generate_question", "ask_target")
builder.add_edge("ask_target", "estimate_capability")
builder.add_conditional_edges("estimate_capability", route_after_round)
builder.add_conditional_edges("feedback", route_after_feedback)
builder.add_edge("validate", END)

graph = builder.compile(name="judgeagent")
