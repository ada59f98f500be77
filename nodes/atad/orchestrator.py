"""Orchestrator agent (ATAD section 2.1, Appendix D.2): validation and escalation feedback.

``validate`` uses the initial-validation prompt (D.2.1) for base problems and the
difficulty-scaled prompt (D.2.3, lenient by default) for harder variants. An
orchestrator that gives no usable verdict after retries and one repair leaves the
candidate unjudged, neither approved nor rejected: the unit stops there with
``ungraded`` set (the teacher is not sent fake feedback, and the item is neither
finalized nor discarded), and resume re-runs that validation.
``escalate`` turns the student's explanation into feedback for the teacher (D.2.2)
and moves the unit up the difficulty ladder.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.atad.common import ladder, level_name, problem_of
from dyneval.nodes.atad.problems import render_with_answer, structure_text
from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import services_of
from dyneval.state.atad import TASKS, AtadContext, AtadState, EscalationFeedback, Verdict, level_for
from dyneval.state.errors import ModelError

LENIENT = (
    "While keeping quality standards, be lenient: accept problems that are reasonable and solvable, "
    "even with minor imperfections."
)
STRICT = "Apply the same standard as for a base problem."


def judge_problem(
    llm: RoleLLM, task: str, problem: dict[str, Any], *, level: str | None, lenient: bool, step: str
) -> dict[str, Any]:
    """The orchestrator's verdict on one problem: the initial validation (D.2.1) when ``level`` is None, else the
    difficulty-scaled validation (D.2.3) for tier ``level``. ``approved`` is None (with ``error``) when it gave
    no usable verdict; ``llm`` is the orchestrator role's model (or a judge-check jury member)."""
    spec = TASKS[task]
    common = {
        "task_id": spec.id,
        "task_name": spec.name,
        "anomaly": spec.anomaly,
        "structure": structure_text(task),
        "problem": render_with_answer(task, problem),
    }
    if level is not None:
        messages = load_prompt("atad/orchestrator_validate_scaled").render(
            **common, level=level, leniency=LENIENT if lenient else STRICT
        )
    else:
        messages = load_prompt("atad/orchestrator_validate").render(**common)
    try:
        verdict = llm.structured(Verdict, messages, step=step)
    except ModelError as exc:
        return {"approved": None, "feedback": "", "error": str(exc)}
    return {"approved": verdict.approved, "feedback": verdict.feedback.strip(), "error": None}


def validate(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """Approve the candidate or reject it with feedback (labels a and e of Figure 2); ``approved`` is None when
    the orchestrator gave no usable verdict."""
    ctx = runtime.context
    scaled = state.get("phase", "init") == "escalate"
    level = level_name(ctx, state.get("level", 0))
    event = {
        "step": "validate",
        "phase": state.get("phase", "init"),
        "level": level,
        "attempt": state.get("attempts", 0),
        "lenient": scaled and ctx.lenient_escalation,
    }
    out = judge_problem(
        services_of(ctx).llm("orchestrator"),
        state["task"],
        problem_of(state, "candidate"),
        level=level if scaled else None,
        lenient=ctx.lenient_escalation,
        step="orchestrator:validate_scaled" if scaled else "orchestrator:validate",
    )
    if out["approved"] is None:
        why = f"ungraded: the orchestrator gave no usable verdict on the {event['phase']} candidate: {out['error']}"
        return {
            "approved": None,
            "ungraded": why[:600],
            "history": [{**event, "approved": None, "error": out["error"][:600]}],
        }
    approved, feedback = out["approved"], out["feedback"]
    update: dict[str, Any] = {
        "approved": approved,
        "history": [{**event, "approved": approved, "feedback": feedback, "error": None}],
    }
    if not approved:
        update["feedback"] = feedback or "Rejected without a reason; make the anomaly clearer and unambiguous."
    return update


def escalate(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """Feedback for a harder variant from the student's explanation (label c), then the next tier."""
    ctx = runtime.context
    task = state["task"]
    explanation = state.get("last_explanation") or "(no explanation)"
    error = None
    if ctx.no_orchestrator:  # ablation: the teacher sees the student's explanation directly
        feedback = {"analysis": explanation, "suggestions": [], "increase": ""}
    else:
        spec = TASKS[task]
        messages = load_prompt("atad/orchestrator_escalate").render(
            task_id=spec.id,
            task_name=spec.name,
            level=level_name(ctx, state.get("current_level", 0)),
            problem=render_with_answer(task, problem_of(state, "current")),
            explanation=explanation,
        )
        try:
            fb = (
                services_of(ctx)
                .llm("orchestrator")
                .structured(EscalationFeedback, messages, step="orchestrator:escalate")
            )
            feedback = fb.model_dump()
        except ModelError as exc:
            error = str(exc)
            feedback = {"analysis": explanation, "suggestions": [], "increase": ""}
    successes = state.get("successes", 0) + 1
    level = level_for(ladder(ctx), successes)
    return {
        "escalation": feedback,
        "successes": successes,
        "level": level,
        "phase": "escalate",
        "attempts": 0,
        "feedback": "",
        "candidate": None,
        "history": [
            {
                "step": "escalate",
                "from_level": level_name(ctx, state.get("current_level", 0)),
                "to_level": level_name(ctx, level),
                "feedback": feedback,
                "error": error,
            }
        ],
    }
