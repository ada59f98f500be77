"""Student agent (ATAD section 2.2.2, label b): solves the current problem; correctness is checked in code.

An unparseable answer is a wrong answer (the student failed to give one); endpoint
faults (``InfraError``) propagate so the runner retries the unit instead, and so does an
agent target's failure (``AgentModelError``: the unit fails). An agent student solves
each problem on a fresh thread (docs/agents.md).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.atad.common import level_name, problem_of
from dyneval.nodes.atad.problems import answer_format, is_correct, question_text, render
from dyneval.prompts import load_prompt
from dyneval.runtime.agents.chat import independent_item
from dyneval.runtime.agents.errors import AgentModelError
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import services_of
from dyneval.state.atad import TASKS, AtadContext, AtadState, IndexAnswer, OrderAnswer
from dyneval.state.errors import ModelError


def solve_problem(llm: RoleLLM, task: str, problem: dict[str, Any], *, step: str) -> dict[str, Any]:
    """Ask ``llm`` to solve ``problem``: ``{predicted, explanation, correct, parse_error}``."""
    spec = TASKS[task]
    messages = load_prompt("atad/student_solve").render(
        task_name=spec.name,
        question=question_text(task),
        problem=render(task, problem),
        answer_format=answer_format(task),
    )
    predicted: bool | int
    try:
        if spec.kind == "order":
            order = llm.structured(OrderAnswer, messages, step=step)
            predicted, explanation = order.coherent, order.explanation
        else:
            index = llm.structured(IndexAnswer, messages, step=step)
            predicted, explanation = index.answer, index.explanation
    except AgentModelError:
        raise  # an agent target that failed: the unit fails, never a wrong answer (runtime.agents.errors)
    except ModelError as exc:
        return {"predicted": None, "explanation": "", "correct": False, "parse_error": str(exc)}
    return {
        "predicted": predicted,
        "explanation": explanation.strip(),
        "correct": is_correct(task, problem, predicted),
        "parse_error": None,
    }


def solve(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """One student attempt, checked in code; the graph finalizes on failure or the loop cap, else escalates."""
    ctx = runtime.context
    loops = state.get("student_loops", 0) + 1
    with independent_item(f"solve{loops}"):  # an agent student solves each problem on a fresh thread
        result = solve_problem(
            services_of(ctx).llm("student"), state["task"], problem_of(state, "current"), step="student:solve"
        )
    return {
        "student_loops": loops,
        "last_correct": result["correct"],
        "last_explanation": result["explanation"],
        "history": [{"step": "solve", "level": level_name(ctx, state.get("current_level", 0)), **result}],
    }
