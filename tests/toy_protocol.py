"""A two-node protocol used to test the runtime (runner, resume, events) in isolation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel

from dyneval.runtime.protocol import Protocol, Run, Unit
from dyneval.runtime.services import services_of
from dyneval.state.blocks import Table
from dyneval.state.context import BaseContext, described
from dyneval.state.errors import InputError, ModelError


@dataclass(kw_only=True)
class ToyContext(BaseContext):
    units: int = described(3, "how many questions")
    ungraded_on_judge_failure: bool = described(False, "a judge that fails leaves the verdict ungraded (None)")


class ToyState(TypedDict, total=False):
    question: str
    answer: str
    verdict: bool | None
    judge_error: str
    tallied: bool


class Verdict(BaseModel):
    correct: bool


def ask(state: ToyState, runtime: Runtime[ToyContext]) -> dict[str, Any]:
    llm = services_of(runtime.context).llm("target")
    return {"answer": llm.text([HumanMessage(state["question"])], step="answer")}


def judge(state: ToyState, runtime: Runtime[ToyContext]) -> dict[str, Any]:
    llm = services_of(runtime.context).llm("evaluator")
    try:
        v = llm.structured(Verdict, [HumanMessage(f"{state['question']} -> {state['answer']}")], step="judge")
    except ModelError as exc:
        if not runtime.context.ungraded_on_judge_failure:
            raise
        return {"verdict": None, "judge_error": str(exc)}
    return {"verdict": v.correct}


def tally(state: ToyState) -> dict[str, Any]:
    """A last step after the verdict, so the verdict's checkpoint is not the final one."""
    return {"tallied": True}


builder = StateGraph(ToyState, context_schema=ToyContext)
builder.add_node("ask", ask)
builder.add_node("judge", judge)
builder.add_node("tally", tally)
builder.add_edge(START, "ask")
builder.add_edge("ask", "judge")
builder.add_edge("judge", "tally")
builder.add_edge("tally", END)


class ToyProtocol(Protocol):
    name = "toy"
    description = "Toy protocol for runtime tests"
    context_cls = ToyContext

    def builder(self) -> StateGraph:
        return builder

    def plan(self, run: Run) -> list[Unit]:
        n = int(run.params.get("units", 3))
        if n < 1:
            raise InputError("must be at least 1", field="--units")
        return [Unit(id=f"q{i}", input={"question": f"question {i}"}, meta={"i": i}) for i in range(n)]

    def expected_calls(self, run: Run) -> str:
        return "2"

    def ungraded(self, state: dict[str, Any]) -> int:
        return int("verdict" in state and state["verdict"] is None)

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": state.get("answer"), "verdict": state.get("verdict"), "tallied": state.get("tallied")}

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ok = [r for r in records if r["status"] == "ok"]  # ungraded units hold no verdict to count
        return {"accuracy": sum(r["verdict"] for r in ok) / len(ok) if ok else None}

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list:
        return [Table(["unit", "verdict"], [[r["unit_id"], r.get("verdict")] for r in records])]
