"""IRT calibration of the question bank from the judged answers of every model and session.

An examinee is a model (its label in the bank); its response to a question is its latest judged
answer there, correct from 2 stars (:data:`nodes.irt.CORRECT_FROM_STARS`, Figure 11 of
seed 002); ungraded answers carry no stars and are no response. Questions with fewer than
``min_responses`` responses stay uncalibrated (normal sessions keep sampling them as before;
adaptive sessions only choose among calibrated ones). A refit is skipped while no response was
added since the last fit, and otherwise warm-starts from the stored parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dyneval.nodes import irt
from dyneval.stores.bank_store import now
from dyneval.stores.question_bank import QuestionBank


@dataclass
class ItemParams:
    """The calibrated active questions of one IRT model, as arrays, with the fit's star means."""

    uuids: list[str]
    a: np.ndarray
    b: np.ndarray
    stars_correct: float
    stars_wrong: float
    fit: dict[str, Any]

    @property
    def index(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.uuids)}


def latest_responses(bank: QuestionBank) -> dict[tuple[str, str], int]:
    """(model, question) -> stars of the model's latest judged answer to it."""
    out: dict[tuple[str, str], int] = {}
    for model, uid, stars, _ in bank.responses():  # ordered by answer time: later answers overwrite
        out[(model, uid)] = stars
    return out


def calibrate_bank(
    bank: QuestionBank, irt_model: str = "2pl", *, min_responses: int = 10, force: bool = False
) -> dict[str, Any]:
    """Fit (or refit) ``irt_model`` on the bank's responses and store it; returns the fit's record.

    ``refit: False`` in the record when nothing changed since the last fit (same responses and
    minimum) and ``force`` is off, or when no question has ``min_responses`` responses (``items: 0``;
    nothing is stored then, so an earlier calibration stays).
    """
    responses = latest_responses(bank)
    last = bank.last_calibration(irt_model)
    if (
        not force
        and last is not None
        and last["responses"] == len(responses)
        and last["details"].get("min_responses") == min_responses
    ):
        return {**last, "refit": False}
    per_item: dict[str, int] = {}
    for _, uid in responses:
        per_item[uid] = per_item.get(uid, 0) + 1
    active = {q.uuid for q in bank.all_questions(active_only=True)}
    uuids = sorted(u for u, n in per_item.items() if n >= min_responses and u in active)
    used = [(m, u, s) for (m, u), s in responses.items() if u in set(uuids)]
    models = sorted({m for m, _, _ in used})
    fit: dict[str, Any] = {"fitted_at": now(), "responses": len(responses), "examinees": len(models), "refit": True}
    if not used:  # nothing to fit: an earlier calibration stays as it was
        return {**fit, "items": 0, "refit": False}
    item_ix = {u: i for i, u in enumerate(uuids)}
    model_ix = {m: i for i, m in enumerate(models)}
    ex = np.array([model_ix[m] for m, _, _ in used])
    it = np.array([item_ix[u] for _, u, _ in used])
    stars = np.array([s for _, _, s in used])
    y = (stars >= irt.CORRECT_FROM_STARS).astype(int)
    stored = bank.item_parameters(irt_model)
    a0 = np.array([stored.get(u, {}).get("a", 1.0) for u in uuids])
    b0 = np.array([stored.get(u, {}).get("b", 0.0) for u in uuids])
    result = irt.calibrate(ex, it, y, len(uuids), model=irt_model, a0=a0, b0=b0)
    fit["details"] = {
        "min_responses": min_responses,
        "fitted_responses": int(y.size),
        "iterations": result.iterations,
        "converged": result.converged,
        "warm_start": bool(stored),
        "stars_correct": float(stars[y == 1].mean()) if y.any() else float(irt.CORRECT_FROM_STARS),
        "stars_wrong": float(stars[y == 0].mean()) if (y == 0).any() else 0.0,
    }
    counts = np.bincount(it, minlength=len(uuids))
    bank.save_calibration(
        irt_model, {u: (float(result.a[i]), float(result.b[i]), int(counts[i])) for i, u in enumerate(uuids)}, fit
    )
    return {**fit, "items": len(uuids)}


def load_params(bank: QuestionBank, irt_model: str) -> ItemParams | None:
    """The stored calibration of ``irt_model`` (``None`` when no question is calibrated)."""
    params = bank.item_parameters(irt_model)
    last = bank.last_calibration(irt_model)
    if not params or last is None:
        return None
    uuids = sorted(params)
    details = last["details"]
    return ItemParams(
        uuids=uuids,
        a=np.array([params[u]["a"] for u in uuids]),
        b=np.array([params[u]["b"] for u in uuids]),
        stars_correct=float(details.get("stars_correct", 3.0)),
        stars_wrong=float(details.get("stars_wrong", 0.0)),
        fit=last,
    )


def ability_of(params: ItemParams, judged: list[tuple[str, int]]) -> irt.Ability:
    """EAP ability from judged ``(question uuid, stars)`` pairs on calibrated questions (others ignored)."""
    index = params.index
    pairs = [(index[u], int(s >= irt.CORRECT_FROM_STARS)) for u, s in judged if u in index]
    ix = [i for i, _ in pairs]
    return irt.eap(params.a[ix], params.b[ix], [y for _, y in pairs])


def expected_scores(params: ItemParams, ability: irt.Ability, z: float = 1.96) -> dict[str, float]:
    """Expected absolute score on the calibrated bank at theta, and at theta -/+ z SE (a monotone map,
    so this is the interval of the score implied by theta's interval)."""

    def at(t: float) -> float:
        return irt.expected_score(t, params.a, params.b, params.stars_correct, params.stars_wrong)

    return {
        "expected_S": at(ability.theta),
        "expected_S_low": at(ability.theta - z * ability.se),
        "expected_S_high": at(ability.theta + z * ability.se),
    }
