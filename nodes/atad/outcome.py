"""Bookkeeping nodes of the ATAD loop: structure check, acceptance, finalization, discard.

``check_structure`` is the code check of Table 6 that runs before any orchestrator
call. Where a rejected candidate leads (another teacher attempt, discard, finalize)
is decided in :mod:`graphs.atad`.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.atad.common import level_name
from dyneval.nodes.atad.problems import structure_errors
from dyneval.state.atad import AtadContext, AtadState


def check_structure(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """Check the candidate's structure in code; malformed candidates never reach the orchestrator."""
    ctx = runtime.context
    task = state["task"]
    candidate = state.get("candidate")
    if state.get("candidate_unusable") or candidate is None:
        errors = [f"teacher_output: {state.get('teacher_error') or 'no problem returned'}"]
    else:
        errors = structure_errors(task, candidate, target_coherent=state.get("target_coherent"))
    event = {
        "step": "generate",
        "phase": state.get("phase", "init"),
        "level": level_name(ctx, state.get("level", 0)),
        "attempt": state.get("attempts", 0),
        "problem": candidate,
        "structure_errors": errors,
    }
    update: dict[str, Any] = {"candidate_errors": errors, "history": [event]}
    if errors:
        update["feedback"] = "The problem is malformed: " + "; ".join(e.split(": ", 1)[-1] for e in errors)
    return update


def accept(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """The validated candidate replaces the current problem (and becomes the base problem at init)."""
    update: dict[str, Any] = {
        "current": state["candidate"],
        "current_level": state.get("level", 0),
        "feedback": "",
        "history": [{"step": "accept", "level": level_name(runtime.context, state.get("level", 0))}],
    }
    if state.get("phase", "init") == "init":
        update["base"] = state["candidate"]
    return update


def acceptance_of(state: AtadState, ctx: AtadContext) -> str:
    """Why an item was finalized (stored on every finalized benchmark item)."""
    if state.get("last_correct") is False:
        return "student_failed"
    if state.get("student_loops", 0) >= ctx.max_student_loops:
        return "student_loop_cap"
    return "escalation_rejected"


def finalize(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """Adopt the last validated problem as the benchmark item (section 2.2.2, label d)."""
    ctx = runtime.context
    acceptance = acceptance_of(state, ctx)
    return {
        "status": "finalized",
        "acceptance": acceptance,
        "history": [
            {"step": "finalize", "acceptance": acceptance, "level": level_name(ctx, state.get("current_level", 0))}
        ],
    }


def discard(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """No base problem passed within ``max_init_loops``: the item is discarded with its history."""
    last = "; ".join(state.get("candidate_errors") or []) or state.get("feedback") or "rejected by the orchestrator"
    reason = f"no valid base problem after {state.get('attempts', 0)} attempt(s); last: {last}"
    return {
        "status": "discarded",
        "acceptance": None,
        "discard_reason": reason,
        "history": [{"step": "discard", "reason": reason}],
    }
