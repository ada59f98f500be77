"""A protocol of one's own, defined in this module and registered as a user registers one
(``DYNEVAL_PROTOCOLS="quiz=tests.test_plugin_protocol:QuizProtocol"``, docs/plugins.md), gets what the built-in
protocols get from their declarations: its headline metric with an interval dyneval computes, ``--fail-under`` on
it, its own small table in the console summary, a leaderboard column and its own sections in the viewer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from dyneval.runtime.protocol import REGISTRY, Protocol, Run, Unit
from dyneval.runtime.services import services_of
from dyneval.state.blocks import Table
from dyneval.state.context import BaseContext
from dyneval.state.viewer import Adapter, Metric
from tests.golden_runs import REPO
from tests.standin_endpoint import StandIn

QUESTIONS = {"q1": ("2 + 2?", "4"), "q2": ("3 + 1?", "4"), "q3": ("2 + 3?", "5"), "q4": ("1 + 1?", "2")}


class QuizState(TypedDict, total=False):
    question: str
    answer: str


def ask(state: QuizState, runtime: Runtime[BaseContext]) -> dict[str, Any]:
    llm = services_of(runtime.context).llm("target")
    return {"answer": llm.text([HumanMessage(state["question"])], step="answer")}


builder = StateGraph(QuizState, context_schema=BaseContext)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
builder.add_edge("ask", END)


@dataclass(frozen=True)
class _Shown:
    """The drill-down section of a quiz unit: the question, the key and the answer side by side."""

    def __call__(self, record: dict[str, Any], unit_input: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "title": "Question, key and answer",
                "headers": ["question", "key", "answer"],
                "rows": [[unit_input.get("question"), record.get("key"), record.get("answer")]],
            }
        ]


def _graded_table(metrics: dict[str, Any]) -> list[Table]:
    """The console summary's table of the quiz: how many units were graded."""
    return [Table(["units", "graded"], [["all", metrics.get("graded")]], "Quiz units graded")]


class QuizProtocol(Protocol):
    name = "quiz"
    description = "A four-question arithmetic quiz, graded by exact match"
    roles = ("target",)
    viewer = Adapter(
        metrics=(
            Metric(
                "accuracy",
                "Accuracy",
                "share of questions answered with exactly the key",
                n="graded",
                interval="proportion",
                outcome="correct",
            ),
        ),
        outcomes={"correct": lambda r: float(r["correct"]) if "correct" in r else None},
        columns={"correct": lambda r: r.get("correct")},
        sections=_Shown(),
        tables=_graded_table,
    )

    def builder(self) -> StateGraph:
        return builder

    def plan(self, run: Run) -> list[Unit]:
        return [Unit(id=k, input={"question": q}, meta={"key": a}) for k, (q, a) in QUESTIONS.items()]

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        answer = str(state.get("answer", "")).strip()
        return {"answer": answer, "key": unit.meta["key"], "correct": answer == unit.meta["key"]}

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"graded": sum("correct" in r for r in records)}


def _answer_four(body: dict[str, Any]) -> dict[str, Any]:
    """A target that answers 4 to every question: right on q1 and q2 of the four."""
    return {"role": "assistant", "content": "4"}


def _run(out: Any, standin: StandIn, *extra: str) -> subprocess.CompletedProcess[str]:
    """``python run.py --protocol quiz`` as a user starts it, the protocol registered by the documented variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNEVAL_", "OPENAI_"))}
    env["DYNEVAL_PROTOCOLS"] = "quiz=tests.test_plugin_protocol:QuizProtocol"
    argv = ["--protocol", "quiz", "--target", f"quizzer@{standin.url}", "--out", str(out), *extra]
    return subprocess.run(
        [sys.executable, "run.py", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_registered_protocol_gets_its_headline_interval_fail_under_leaderboard_and_viewer_sections(
    tmp_path, monkeypatch
):
    out = tmp_path / "runs"
    with StandIn(respond=_answer_four) as standin:
        refused = _run(out, standin, "--fail-under", "precision=0.5")
        failed = _run(out, standin, "--fail-under", "accuracy=0.9")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        "'precision' is not a headline metric of quiz (one of: accuracy, trials.*.pass^*, state_check.share)"
        in refused.stderr
    )
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert "accuracy = 0.5" in failed.stdout + failed.stderr  # the miss names the value

    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    metrics = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["metrics"]
    interval = metrics["intervals"]["accuracy"]
    assert metrics["accuracy"] == 0.5 and interval["method"] == "clopper-pearson" and interval["n"] == 4
    assert 0 < interval["low"] < 0.5 < interval["high"] < 1
    assert "Accuracy" in failed.stdout and "[0.0676, 0.932]" in failed.stdout  # the console's headline table
    assert "Quiz units graded" in failed.stdout and re.search(r"│ all +│ 4 +│", failed.stdout)  # its declared table

    monkeypatch.setitem(REGISTRY, "quiz", "tests.test_plugin_protocol:QuizProtocol")  # this process reads it too
    from dyneval.results.leaderboard import boards
    from dyneval.results.view.data import run_payload
    from dyneval.stores.rundir import runs_under

    (board,) = boards(runs_under(out))
    assert [m.heading for m in board.metrics] == ["Accuracy"]
    assert board.cells()["quizzer"]["accuracy"].value == 0.5  # the row is the model's name
    payload = run_payload(run_dir)
    unit = next(u for u in payload["units"] if u["id"] == "q3")
    assert unit["sections"][0] == {
        "title": "Question, key and answer",
        "headers": ["question", "key", "answer"],
        "rows": [["2 + 3?", "5", "4"]],
    }
    assert [h["name"] for h in payload["headline"]] == ["Accuracy"]
