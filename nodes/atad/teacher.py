"""Teacher agent (ATAD section 2.1): writes base problems and harder variants (Appendix D.1).

Three situations, three prompts: the base problem (with the orchestrator's rejection
feedback on a retry), the first harder variant after a student success (with the
orchestrator's escalation feedback), and a retry of a rejected harder variant at
slightly reduced difficulty within the same tier (section 2.2.2).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.atad.common import level_name, problem_of, task_vars
from dyneval.nodes.atad.problems import normalize, render_with_answer
from dyneval.prompts import load_prompt
from dyneval.runtime.services import services_of
from dyneval.state.atad import PROBLEM_SCHEMAS, AtadContext, AtadState
from dyneval.state.errors import ModelError


def _messages(state: AtadState, ctx: AtadContext) -> tuple[str, list]:
    task = state["task"]
    base = task_vars(state)
    level = state.get("level", 0)
    if state.get("phase", "init") == "init":
        return "generate", load_prompt("atad/teacher_generate").render(
            **base, difficulty=level_name(ctx, level), feedback=state.get("feedback") or "(first attempt)"
        )
    previous = render_with_answer(task, problem_of(state, "current"))
    if not state.get("attempts"):
        esc = state.get("escalation") or {}
        suggestions = "; ".join(esc.get("suggestions") or []) or "(none)"
        return "escalate", load_prompt("atad/teacher_escalate").render(
            **base,
            previous=previous,
            from_level=level_name(ctx, state.get("current_level", 0)),
            level=level_name(ctx, level),
            analysis=esc.get("analysis") or "(none)",
            suggestions=suggestions,
            increase=esc.get("increase") or "(none)",
        )
    rejected = state.get("candidate")
    return "retry", load_prompt("atad/teacher_retry").render(
        **base,
        previous=previous,
        level=level_name(ctx, level),
        rejected=render_with_answer(task, rejected)
        if rejected and not state.get("candidate_unusable")
        else "(your reply could not be read as a problem)",
        feedback=state.get("feedback") or "(none)",
    )


def generate(state: AtadState, runtime: Runtime[AtadContext]) -> dict[str, Any]:
    """Write the next candidate problem; an unusable reply is recorded as a rejected attempt."""
    ctx = runtime.context
    kind, messages = _messages(state, ctx)
    schema = PROBLEM_SCHEMAS[state["task"]]
    update: dict[str, Any] = {
        "attempts": state.get("attempts", 0) + 1,
        "teacher_error": None,
        "candidate_unusable": False,
    }
    try:
        problem = services_of(ctx).llm("teacher").structured(schema, messages, step=f"teacher:{kind}")
        update["candidate"] = normalize(state["task"], problem.model_dump())
    except ModelError as exc:
        update.update(candidate=None, candidate_unusable=True, teacher_error=str(exc))
    return update
