"""Judge-check graph: one human-labelled item per thread.

check_input -> judge (every judge model x repeat x order) -> vote (jury majority, when there is a jury) -> END.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.nodes.entry import check_input
from dyneval.nodes.judgecheck.verdicts import judge, vote
from dyneval.state.judgecheck import JudgeCheckContext, JudgeCheckInput, JudgeCheckOutput, JudgeCheckState


def after_judge(state: JudgeCheckState, runtime: Runtime[JudgeCheckContext]) -> Literal["vote", "__end__"]:
    """A jury of two or more judge models votes; a single judge's verdicts stand as they are."""
    if len(runtime.context.jury or []) > 1:
        return "vote"
    return END  # type: ignore[return-value]  # langgraph types END as str, its value is "__end__"


def build_graph() -> StateGraph[JudgeCheckState, JudgeCheckContext, JudgeCheckInput, JudgeCheckOutput]:
    """A new, uncompiled judgecheck graph: compile it with your own checkpointer, or extend it first."""
    builder = StateGraph(
        JudgeCheckState, context_schema=JudgeCheckContext, input_schema=JudgeCheckInput, output_schema=JudgeCheckOutput
    )
    builder.add_node("check_input", check_input(JudgeCheckInput))
    builder.add_node("judge", judge)
    builder.add_node("vote", vote)
    builder.add_edge(START, "check_input")
    builder.add_edge("check_input", "judge")
    builder.add_conditional_edges("judge", after_judge)
    builder.add_edge("vote", END)
    return builder


builder = build_graph()
graph = builder.compile(name="judgecheck")
