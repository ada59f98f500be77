"""A two-node protocol used to test the runtime (runner, resume, events) in isolation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from runtime.protocol import Protocol, Run, Unit
from runtime.report import Table
from runtime.services import services_of
from state.context import BaseContext, described


@dataclass(kw_only=True)
class ToyContext(BaseContext):
    units: int = described(3, "how many questions")


class ToyState(TypedDict, total=False):
    question: str
    answer: str
    verdict: bool


class Verdict(BaseModel):
    correct: bool


def ask(state: ToyState, runtime: Runtime[ToyContext]) -> dict[str, Any]:
    llm = services_of(runtime.context).llm("target")
    return {"answer": llm.text([HumanMessage(state["question"])], step="answer")}


def judge(state: ToyState, runtime: Runtime[ToyContext]) -> dict[str, Any]:
    llm = services_of(runtime.context).llm("evaluator")
    v = llm.structured(Verdict, [HumanMessage(f"{state['question']} -> {state['answer']}")], step="judge")
    return {"verdict": v.correct}


builder = StateGraph(ToyState, context_schema=ToyContext)
builder.add_node("ask", ask)
builder.add_node("judge", judge)
builder.add_edge(START, "ask")
builder.add_edge("ask", "judge")
builder.add_edge("judge", END)


class ToyProtocol(Protocol):
    name = "toy"
    description = "Toy protocol for runtime tests"
    context_cls = ToyContext

    def builder(self) -> StateGraph:
        return builder

    def plan(self, run: Run) -> list[Unit]:
        n = int(run.params.get("units", 3))
        return [Unit(id=f"q{i}", input={"question": f"question {i}"}, meta={"i": i}) for i in range(n)]

    def expected_calls(self, run: Run) -> str:
        return "2"

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": state["answer"], "verdict": state["verdict"]}

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ok = [r for r in records if r["status"] == "ok"]
        return {"accuracy": sum(r["verdict"] for r in ok) / len(ok) if ok else None}

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list:
        return [Table(["unit", "verdict"], [[r["unit_id"], r.get("verdict")] for r in records])]
