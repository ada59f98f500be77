"""Scoring node: absolute, per-discipline and relative scores of a session (LLMEval-3 equations 1-2, Table 1)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from nodes.llmeval.common import bank_of
from protocols.llmeval.metrics import absolute_score, discipline_scores, relative_score
from state.llmeval import LLMEvalContext, LLMEvalState
from stores.question_bank import QuestionBank


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
        "judge_status": {k: sum(r["judge_status"] == k for r in rows)
                         for k in sorted({str(r["judge_status"]) for r in rows})},
    }


def score_session(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Score the session (and its reference replay); R = S / S_ref x 100 on the same questions.

    A session (or replay) with no scored answer has no score: nothing is written to the bank for it, so the
    leaderboard never shows a number that was not computed.
    """
    bank = bank_of(runtime.context)
    scores = session_scores(bank, state["session_id"])
    update: dict[str, Any] = {"scores": scores, "relative": None}
    if state.get("reference_session_id"):
        ref = session_scores(bank, state["reference_session_id"])
        update["reference_scores"] = ref
        update["relative"] = relative_score(scores["S"], ref["S"])
        scores = {**scores, "R": update["relative"], "S_ref": ref["S"],
                  "reference_session_id": state["reference_session_id"]}
        if ref["S"] is not None:
            bank.set_scores(state["reference_session_id"], {**ref, "R": 100.0 if ref["S"] else None})
    if scores["S"] is not None:
        bank.set_scores(state["session_id"], scores)
    return update
