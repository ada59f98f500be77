"""Adaptive Benchmark Grading (issue 17): base questions chosen near the target's ability by item response theory.

Algorithm 1 of seed 000 (lines 11-19) grades every question of a batch. With ``--irt-runs`` the unit's batch
is a *pool* of base questions, ``irt`` holds the item parameters fitted on earlier runs of other targets
(:mod:`protocols.judgeagent.irt`, the shared EM of :mod:`nodes.irt`), and grading asks them one at a time::

    select_base -> ask_base -> select_base -> ... -> close_grading

* :func:`select_base` - the EAP ability (N(0, 1) prior) from the graded answers so far; the next question has
  the most Fisher information ``a^2 P (1 - P)`` at it among the pool's calibrated questions not asked yet, drawn
  among the ``irt_exposure_k`` best by a generator fixed by the seed, the unit and the position (a resumed unit
  makes the same choice). Grading ends after ``irt_items`` questions or when none is left; an uncalibrated
  question is never chosen.
* :func:`ask_base` - the target answers the chosen question, judged as in :func:`grading.grade_question`.
  An ungraded answer is no response (it counts neither way, as in ``sc_B``) and resume re-judges it.
* :func:`close_grading` - the asked questions become the batch that extension, feedback and validation use
  (Algorithm 1 lines 20-31 and Algorithm 2 unchanged); ``sc_B`` and ``RND_total`` stay the observed ones; the
  first extension difficulty comes from the ability (:func:`expected_average`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langgraph.runtime import Runtime

from dyneval.nodes import irt
from dyneval.nodes.judgeagent.common import seed_for
from dyneval.nodes.judgeagent.grading import base_totals, grade_question, next_difficulty
from dyneval.nodes.judgeagent.judging import answer_format
from dyneval.state.judgeagent import BaseQuestion, DifficultyControl, JudgeAgentContext, JudgeAgentState
from dyneval.state.verdicts import is_ungraded


def _params(items: dict[str, list[float]], ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The discriminations ``a`` and difficulties ``b`` of the questions ``ids``, in their order."""
    return np.array([items[i][0] for i in ids], float), np.array([items[i][1] for i in ids], float)


def ability(state: JudgeAgentState) -> irt.Ability:
    """EAP ability from the graded base answers on calibrated questions (ungraded answers are no response)."""
    items = state.get("irt") or {}
    graded = [b for b in state.get("base", []) if b["id"] in items and not is_ungraded(b)]
    return irt.eap(
        [items[b["id"]][0] for b in graded],
        [items[b["id"]][1] for b in graded],
        [int(bool(b["correct"])) for b in graded],
    )


def expected_average(
    control: DifficultyControl, theta: float, questions: list[BaseQuestion], items: dict[str, list[float]]
) -> tuple[float, int]:
    """``(sum c(d_i) P_i(theta), n)``: the Appendix B score sum and count the target is expected to reach on
    ``questions`` (the pool's calibrated ones), to go into ``DECIDE_DIFFICULTY`` in place of ``sc_B``.

    Why not the observed ``sc_B`` average: maximum-information choice asks each question where the target's
    ``P`` is near 1/2 (for 2PL exactly 1/2 at ``b = theta``), so the accuracy on the asked questions tends to
    1/2 whatever the ability and would put almost every target at the same level. The ability predicts instead
    what grading the whole pool would have given: each question's gain (``c2`` when unlabeled, rule R2) times
    its probability of a correct answer. For an unlabeled pool the average is ``c2`` times the expected
    accuracy, and the thresholds ``t12 = c2/3``, ``t23 = 2 c2/3`` cut that accuracy into equal thirds, the equal
    ranges rule R1 asks for; the gains and thresholds are the checked ones of Eq. 4, unchanged.
    """
    a, b = _params(items, [q.id for q in questions])
    gains = np.array([control.gain(q.difficulty) for q in questions])
    return float(gains @ irt.probability(theta, a, b)), len(questions)


def select_base(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """Choose the next base question (``pick``), or none when ``irt_items`` were asked or the pool is spent."""
    ctx = runtime.context
    items = state.get("irt") or {}
    asked = {b["id"] for b in state.get("base", [])}
    now = ability(state)
    entry: dict[str, Any] = {"step": len(asked), "theta": now.theta, "se": now.se, "responses": now.n}
    pick = None
    if len(asked) < ctx.irt_items:
        ids = [q["id"] for q in state["batch"] if q["id"] in items]
        a, b = _params(items, ids)
        rng = irt.seeded_rng(seed_for(ctx.seed, "irt", len(asked)))
        k = irt.select_item(now.theta, a, b, np.array([i not in asked for i in ids], bool), rng, k=ctx.irt_exposure_k)
        if k is not None:
            pick = ids[k]
            entry.update(chose=pick, information=float(irt.information(now.theta, a[k : k + 1], b[k : k + 1])[0]))
    return {"pick": pick, "irt_trace": [*state.get("irt_trace", []), entry]}


def ask_base(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """The target answers the chosen question; its verdict joins ``base``."""
    ctx = runtime.context
    pool = [BaseQuestion(**q) for q in state["batch"]]
    fmt = answer_format(ctx.answer_format, pool)
    q = next(q for q in pool if q.id == state["pick"])
    return {"answer_format": fmt, "base": [*state.get("base", []), grade_question(ctx, q, fmt)], "pick": None}


def close_grading(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """The asked questions become the batch; ``sc_B``, ``RND_total``; the first difficulty from the ability.

    The level is ``DECIDE_DIFFICULTY`` of :func:`expected_average` at theta, and, as its uncertainty, at
    theta -/+ 1.96 SE (the average rises with theta, so these bound it). With no graded answer the level is
    the neutral one, as in :func:`grading.next_difficulty`; the ablation's fixed level holds as well.
    """
    ctx = runtime.context
    control = ctx.control()
    items = state.get("irt") or {}
    pool = {q["id"]: BaseQuestion(**q) for q in state["batch"]}
    base = state.get("base", [])
    score, answered = base_totals(base)
    now = ability(state)
    calibrated = [q for q in pool.values() if q.id in items]

    def level(total: float, n: int) -> str:
        return next_difficulty(ctx, total, n) if now.n else next_difficulty(ctx, 0.0, 0)

    def level_at(theta: float) -> str:
        return level(*expected_average(control, theta, calibrated, items))

    exp_total, n_cal = expected_average(control, now.theta, calibrated, items)
    a, b = _params(items, [q.id for q in calibrated])
    nxt = level(exp_total, n_cal)
    summary = {
        "theta": now.theta,
        "se": now.se,
        "responses": now.n,
        "asked": [x["id"] for x in base],
        "pool": len(pool),
        "calibrated": n_cal,
        "not_asked": len(pool) - len(base),
        "observed_avg": score / answered if answered else None,
        "expected_avg": exp_total / n_cal if n_cal else None,
        "expected_accuracy": float(irt.probability(now.theta, a, b).mean()) if n_cal else None,
        "first_difficulty": nxt,
        "difficulty_interval": [level_at(now.theta - irt.Z95 * now.se), level_at(now.theta + irt.Z95 * now.se)],
    }
    return {
        "batch": [pool[x["id"]].model_dump() for x in base],
        "score": score,
        "answered": answered,
        "difficulty": nxt,
        "ability": summary,
        "trajectory": [
            {
                "after": "base",
                "avg": summary["observed_avg"],
                "next": nxt,
                "ungraded": len(base) - answered,
                "irt_avg": summary["expected_avg"],
            }
        ],
    }
