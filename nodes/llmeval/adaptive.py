"""Adaptive session node: update the ability, then stop or choose the next question (computerized adaptive
testing on the calibrated bank, :mod:`nodes.llmeval.calibration`).

LLMEval-3's session rules (seed 002, section 2.2) hold: the next question is allocated only once every
earlier one is answered (serial delivery), never one the model met in its current cycle (no repeats), and it
reaches the examinee through the same whitelisted payload (answers never sent). The choice: maximum Fisher
information at the current EAP ability among those questions, drawn at random among the ``exposure_k`` best
(randomesque exposure control). Stop at ``se <= target_se``, at ``max_items`` answers, or when no calibrated
question is left. Used by the graph and, after every answer, by the exam server.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langgraph.runtime import Runtime

from dyneval.nodes import irt
from dyneval.nodes.llmeval.calibration import ItemParams, ability_of, load_params
from dyneval.nodes.llmeval.common import bank_of
from dyneval.runtime.services import services_of
from dyneval.state.llmeval import LLMEvalContext, LLMEvalState
from dyneval.stores.bank_sessions import QuotaError
from dyneval.stores.question_bank import QuestionBank


def _rng(seed: str, position: int) -> np.random.Generator:
    """A generator fixed by the session seed and slot, so a resumed session makes the same choice."""
    return irt.seeded_rng(f"{seed}:{position}")


def adaptive_step(bank: QuestionBank, session_id: str, params: ItemParams | None = None) -> dict[str, Any]:
    """Update the session's ability from its judged answers; then stop it or allocate its next question."""
    conf = bank.adaptive_state(session_id)
    session = bank.session(session_id)
    if conf is None or session is None:
        raise ValueError(f"{session_id} is not an adaptive session")
    params = params or load_params(bank, conf["irt_model"])
    if params is None:
        raise ValueError(f"no calibrated question for {conf['irt_model']}: calibrate the bank first")
    rows = bank.judged_items(session_id)
    ability = ability_of(params, [(r["question_uuid"], r["stars"]) for r in rows if r["stars"] is not None])
    out: dict[str, Any] = {
        "theta": ability.theta,
        "se": ability.se,
        "allocated": len(rows),
        "answered": sum(r["status"] == "completed" for r in rows),
    }
    if conf["stopped"]:
        return {**out, "stopped": conf["stopped"]}
    if any(r["status"] != "completed" for r in rows):  # a slot is open (e.g. re-entered on resume)
        bank.update_adaptive(session_id, theta=ability.theta, se=ability.se)
        return {**out, "stopped": ""}
    stopped = ""
    if ability.n and ability.se <= conf["target_se"]:
        stopped = "target_se"
    elif len(rows) >= conf["max_items"]:
        stopped = "max_items"
    else:
        unavailable = bank.unavailable_for(session_id)
        eligible = np.array([u not in unavailable for u in params.uuids])
        rng = _rng(session["seed"], len(rows))
        while True:
            pick = irt.select_item(ability.theta, params.a, params.b, eligible, rng, k=int(conf["exposure_k"]))
            if pick is None:
                stopped = "bank"
                break
            try:
                bank.append_item(session_id, params.uuids[pick])
            except QuotaError as exc:
                if exc.kind != "repeat":
                    raise
                eligible[pick] = False  # a concurrent session of the same model took it: choose again
                continue
            out["allocated"] += 1
            break
    bank.update_adaptive(session_id, theta=ability.theta, se=ability.se, stopped=stopped or None)
    return {**out, "stopped": stopped}


def run_params(ctx: Any, bank: QuestionBank, session_id: str) -> ItemParams | None:
    """The calibration an adaptive session uses, loaded once per run and fit (a large bank is not re-read
    at every question)."""
    conf = bank.adaptive_state(session_id)
    if not conf:
        return None
    irt_model: str = conf["irt_model"]
    last = bank.last_calibration(irt_model)
    if last is None:
        return None
    key = f"llmeval:irt:{bank.url}:{irt_model}:{last['fitted_at']}"
    return services_of(ctx).cached(key, lambda: load_params(bank, irt_model))


def select_question(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Graph node: :func:`adaptive_step` on the thread's session."""
    bank = bank_of(runtime.context)
    return adaptive_step(bank, state["session_id"], run_params(runtime.context, bank, state["session_id"]))
