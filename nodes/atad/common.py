"""Helpers shared by the ATAD nodes: prompt variables of a unit and the difficulty ladder."""

from __future__ import annotations

from typing import Any, Literal

from dyneval.nodes.atad.problems import structure_text
from dyneval.state.atad import TASKS, AtadContext, AtadState, parse_ladder


def ladder(ctx: AtadContext) -> list[tuple[str, int]]:
    return parse_ladder(ctx.difficulty_ladder)


def level_name(ctx: AtadContext, index: int) -> str:
    levels = ladder(ctx)
    return levels[min(index, len(levels) - 1)][0]


def challenge_text(challenge: str | None) -> str:
    if challenge:
        return f"Build the anomaly on this challenge factor: {challenge}."
    return "No particular challenge factor is required."


def problem_of(state: AtadState, key: Literal["candidate", "current"]) -> dict[str, Any]:
    """The unit's candidate or current (last validated) problem. The graph sets it before every node that reads it
    (a well-formed candidate before ``validate``, the accepted one before ``solve``, ``escalate`` and a harder
    variant's ``generate``); a thread without it was not left by the graph, and is refused here by name."""
    problem = state.get(key)
    if problem is None:
        raise ValueError(f"the unit's state has no {key} problem (phase {state.get('phase', 'init')!r})")
    return problem


def task_vars(state: AtadState) -> dict[str, str]:
    """Prompt variables describing the unit's task (Tables 6 and 7)."""
    spec = TASKS[state["task"]]
    challenge = challenge_text(state.get("challenge"))
    target = state.get("target_coherent")
    if target is not None:  # T2: the seeded label keeps the benchmark balanced
        challenge += (
            " Present the sentences in a coherent order and set coherent=true."
            if target
            else " Present the sentences in a scrambled, incoherent order and set coherent=false."
        )
    return {
        "style": state.get("style") or "GRE",
        "task_id": spec.id,
        "task_name": spec.name,
        "topic": state.get("topic") or spec.topics[0],
        "anomaly": spec.anomaly,
        "structure": structure_text(spec.id),
        "challenge": challenge,
    }
