"""Scoring node: absolute, per-discipline and relative scores of a session (LLMEval-3 equations 1-2, Table 1).

The formulas live here, below the protocol layer, which uses them too (leaderboard, stability):

* :func:`absolute_score` - equation 1: S = sum(s_i) / (N * s_max) * 100.
* :func:`discipline_scores` - subject-level scores on a 10-point scale (Table 1).
* :func:`relative_score` - equation 2: R = S_model / S_ref * 100.
* :func:`adaptive_scores` - an adaptive session's ability (IRT) and expected absolute score on the bank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.llmeval.common import bank_of
from dyneval.state.llmeval import S_MAX, LLMEvalContext, LLMEvalState
from dyneval.stores.question_bank import QuestionBank


def absolute_score(stars: Sequence[float], s_max: int = S_MAX) -> float | None:
    """Equation 1 (0-100) over the scored answers; None when there is none (no number we did not compute)."""
    if not stars:
        return None
    return _score(stars, s_max)


def _score(stars: Sequence[float], s_max: int) -> float:
    """Equation 1 (0-100) over ``stars``, at least one."""
    return sum(stars) / (len(stars) * s_max) * 100


def discipline_scores(pairs: Iterable[tuple[str, int]], s_max: int = S_MAX) -> dict[str, float]:
    """Per-discipline score on the 10-point scale of Table 1 (= equation 1 within the discipline / 10)."""
    by: dict[str, list[int]] = {}
    for discipline, stars in pairs:
        by.setdefault(discipline, []).append(stars)
    return {d: _score(v, s_max) / 10 for d, v in sorted(by.items())}  # each discipline has a scored answer


def relative_score(s_model: float | None, s_ref: float | None) -> float | None:
    """Equation 2: the model's absolute score relative to the reference (SOTA) model's on the same questions."""
    if s_model is None or not s_ref:
        return None
    return s_model / s_ref * 100


def session_scores(bank: QuestionBank, session_id: str) -> dict[str, Any]:
    """S over the scored answers (N = answers with stars; None when there is none), per-discipline 10-point
    scores, star histogram; ``ungraded`` = answers the judge could not rate (in no score)."""
    rows = bank.judged_items(session_id)
    scored = [r for r in rows if r["stars"] is not None]
    return {
        "S": absolute_score([r["stars"] for r in scored]),
        "N": len(scored),
        "allocated": len(rows),
        "unscored": len(rows) - len(scored),
        "ungraded": sum(r["judge_status"] == "ungraded" for r in rows),
        "disciplines": discipline_scores((r["discipline"], r["stars"]) for r in scored),
        "stars": {str(s): sum(r["stars"] == s for r in scored) for s in range(4)},
        "judge_status": {
            k: sum(r["judge_status"] == k for r in rows) for k in sorted({str(r["judge_status"]) for r in rows})
        },
    }


def adaptive_scores(bank: QuestionBank, session_id: str, scores: dict[str, Any]) -> dict[str, Any]:
    """An adaptive session's result: theta +/- SE (EAP), the expected absolute score on the calibrated bank
    with its interval, and why it stopped. Equation 1 over the asked questions is kept as ``S_asked`` only:
    adaptively chosen questions are no random sample, so it is no S (and not in the leaderboard's S)."""
    from dyneval.nodes.llmeval.calibration import ability_of, expected_scores, load_params  # scipy: only when adaptive

    conf = bank.adaptive_state(session_id) or {}
    params = load_params(bank, conf.get("irt_model", "2pl"))
    rows = [r for r in bank.judged_items(session_id) if r["stars"] is not None]
    out = {k: v for k, v in scores.items() if k != "S"}
    out.update(
        {"S_asked": scores["S"], "irt_model": conf.get("irt_model"), "stopped": conf.get("stopped"), "items": len(rows)}
    )
    if params is not None:
        ability = ability_of(params, [(r["question_uuid"], r["stars"]) for r in rows])
        out.update(
            {
                "theta": ability.theta,
                "se": ability.se,
                "irt_responses": ability.n,
                **expected_scores(params, ability),
                "calibrated_items": len(params.uuids),
                "calibrated_at": params.fit["fitted_at"],
            }
        )
    return out


def score_session(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Score the session (and its reference replay); R = S / S_ref x 100 on the same questions.

    A session (or replay) with no scored answer has no score: nothing is written to the bank for it, so the
    leaderboard never shows a number that was not computed.
    """
    bank = bank_of(runtime.context)
    scores = session_scores(bank, state["session_id"])
    if state.get("adaptive"):
        scores = adaptive_scores(bank, state["session_id"], scores)
        bank.set_scores(state["session_id"], scores)
        return {"scores": scores, "relative": None}
    update: dict[str, Any] = {"scores": scores, "relative": None}
    if state.get("reference_session_id"):
        ref = session_scores(bank, state["reference_session_id"])
        update["reference_scores"] = ref
        update["relative"] = relative_score(scores["S"], ref["S"])
        scores = {
            **scores,
            "R": update["relative"],
            "S_ref": ref["S"],
            "reference_session_id": state["reference_session_id"],
        }
        if ref["S"] is not None:
            bank.set_scores(state["reference_session_id"], {**ref, "R": 100.0 if ref["S"] else None})
    if scores["S"] is not None:
        bank.set_scores(state["session_id"], scores)
    return update
