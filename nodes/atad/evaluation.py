"""Evaluation phase of ATAD (section 2.2.3, label g) and the quality review of section 4.4.

One evaluation unit = one model answering (``answer_item``) or reviewing
(``review_item``) one benchmark problem, so evaluation runs through the same
batch runner as generation: concurrent, checkpointed and resumable.

Evaluated models are model references (``local``, a config name, ``MODEL@URL``),
not roles: :func:`model_llm` builds one :class:`RoleLLM` per reference (logged
under the role ``student`` for answers, ``grader`` for reviews). A chat model in
``services.chat_overrides`` under the reference itself replaces it (tests).
"""

from __future__ import annotations

import threading
from typing import Any

from langgraph.runtime import Runtime

from nodes.atad.problems import render_with_answer
from nodes.atad.student import solve_problem
from prompts import load_prompt
from runtime.llm import RetryPolicy, RoleLLM
from runtime.models import build_chat_model, model_label
from runtime.services import Services, services_of
from state.atad import TASKS, EvalContext, EvalState, Review
from state.config import parse_model_ref
from state.errors import ModelError


def model_llm(svc: Services, ref: str, role: str = "student") -> RoleLLM:
    """The call layer for the model named ``ref`` (built once per run and role)."""

    def build() -> RoleLLM:
        spec = parse_model_ref(ref, svc.config.models)
        chat = svc.chat_overrides.get(ref)
        label = f"fake:{ref}" if chat is not None else model_label(spec)
        if chat is None:
            chat = build_chat_model(spec)
        policy = RetryPolicy(max_retries=spec.max_retries)
        if svc.retry_sleep is not None:
            policy.sleep = svc.retry_sleep
        return RoleLLM(role=role, model_label=label, chat=chat, events=svc.events, policy=policy,
                       structured_method=spec.structured_method,
                       slots=threading.BoundedSemaphore(spec.concurrency))

    return svc.cached(f"atad-model:{role}:{ref}", build)


def answer_item(state: EvalState, runtime: Runtime[EvalContext]) -> dict[str, Any]:
    """The evaluated model solves the problem; correctness is checked in code."""
    llm = model_llm(services_of(runtime.context), state["model"])
    result = solve_problem(llm, state["task"], state["problem"], step="evaluate:answer")
    return {"correct": result["correct"], "predicted": result["predicted"], "explanation": result["explanation"],
            "parse_error": result["parse_error"]}


def review_item(state: EvalState, runtime: Runtime[EvalContext]) -> dict[str, Any]:
    """The reviewer scores validity, coherence, fairness (1-5, clamped) and approval (Table 3)."""
    llm = model_llm(services_of(runtime.context), state["model"], role="grader")
    spec = TASKS[state["task"]]
    messages = load_prompt("atad/reviewer_review").render(
        task_id=spec.id, task_name=spec.name, anomaly=spec.anomaly,
        problem=render_with_answer(state["task"], state["problem"]))
    try:
        r = llm.structured(Review, messages, step="evaluate:review")
    except ModelError as exc:
        return {"review": None, "parse_error": str(exc)}
    clamp = lambda v: max(1, min(5, int(v)))  # noqa: E731
    return {"review": {"validity": clamp(r.validity), "coherence": clamp(r.coherence),
                       "fairness": clamp(r.fairness), "approved": bool(r.approved)}, "parse_error": None}
