"""Evaluation phase of ATAD (section 2.2.3, label g) and the quality review of section 4.4.

One evaluation unit = one model answering (``answer_item``) or reviewing
(``review_item``) one benchmark problem, so evaluation runs through the same
batch runner as generation: concurrent, checkpointed and resumable.

Evaluated models are model references (``local``, a config name, ``MODEL@URL``),
not roles: the run's one model resolver (:meth:`runtime.services.Services.model`)
gives their call layer, logged under the role ``student`` for answers, ``grader``
for reviews, sharing each endpoint's limits with every other user of its spec.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.atad.problems import render_with_answer
from dyneval.nodes.atad.student import solve_problem
from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import services_of
from dyneval.state.atad import TASKS, EvalContext, EvalState, Review
from dyneval.state.errors import ModelError


def answer_item(state: EvalState, runtime: Runtime[EvalContext]) -> dict[str, Any]:
    """The evaluated model solves the problem; correctness is checked in code."""
    llm = services_of(runtime.context).model(state["model"], role="student")
    result = solve_problem(llm, state["task"], state["problem"], step="evaluate:answer")
    return {
        "correct": result["correct"],
        "predicted": result["predicted"],
        "explanation": result["explanation"],
        "parse_error": result["parse_error"],
    }


def review_problem(llm: RoleLLM, task: str, problem: dict[str, Any], *, step: str) -> dict[str, Any]:
    """One reviewer's validity, coherence, fairness (1-5, clamped) and approval of a problem (Table 3);
    ``review`` None with ``parse_error`` when it gave no usable review."""
    spec = TASKS[task]
    messages = load_prompt("atad/reviewer_review").render(
        task_id=spec.id, task_name=spec.name, anomaly=spec.anomaly, problem=render_with_answer(task, problem)
    )
    try:
        r = llm.structured(Review, messages, step=step)
    except ModelError as exc:
        return {"review": None, "parse_error": str(exc)}
    clamp = lambda v: max(1, min(5, int(v)))  # noqa: E731
    return {
        "review": {
            "validity": clamp(r.validity),
            "coherence": clamp(r.coherence),
            "fairness": clamp(r.fairness),
            "approved": bool(r.approved),
        },
        "parse_error": None,
    }


def review_item(state: EvalState, runtime: Runtime[EvalContext]) -> dict[str, Any]:
    """The reviewer scores validity, coherence, fairness (1-5, clamped) and approval (Table 3)."""
    llm = services_of(runtime.context).model(state["model"], role="grader")
    return review_problem(llm, state["task"], state["problem"], step="evaluate:review")
