"""IRT calibration records of the llmeval question bank: the judged answers a calibration fits, the item
parameters it stores per IRT model, and the log of fits (:data:`stores.bank_schema.item_params`,
:data:`stores.bank_schema.calibrations`). Mixed into :class:`stores.question_bank.QuestionBank`, whose engine and
write lock they use.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dyneval.stores.bank_schema import calibrations, item_params, items, questions, sessions


class CalibrationStore:
    """The bank's IRT calibration records (``engine`` and ``_lock`` are the bank's)."""

    engine: Engine
    _lock: threading.RLock

    def responses(self) -> list[tuple[str, str, int, str]]:
        """Every judged answer as ``(model, question uuid, stars, answered_at)`` (ungraded ones have no stars)."""
        query = (
            sa.select(sessions.c.model, items.c.question_uuid, items.c.stars, items.c.answered_at)
            .join(sessions, sessions.c.session_id == items.c.session_id)
            .where(items.c.stars.is_not(None))
            .order_by(items.c.answered_at)
        )
        with self.engine.connect() as conn:
            return [(m, q, int(s), a or "") for m, q, s, a in conn.execute(query)]

    def save_calibration(
        self, irt_model: str, params: dict[str, tuple[float, float, int]], fit: dict[str, Any]
    ) -> None:
        """Replace ``irt_model``'s item parameters (uuid -> (a, b, responses)) and log the fit."""
        stamp = fit["fitted_at"]
        with self._lock, self.engine.begin() as conn:
            conn.execute(item_params.delete().where(item_params.c.irt_model == irt_model))
            if params:
                conn.execute(
                    item_params.insert(),
                    [
                        {
                            "question_uuid": u,
                            "irt_model": irt_model,
                            "a": a,
                            "b": b,
                            "n_responses": n,
                            "fitted_at": stamp,
                        }
                        for u, (a, b, n) in params.items()
                    ],
                )
            conn.execute(
                calibrations.insert().values(
                    irt_model=irt_model,
                    fitted_at=stamp,
                    responses=fit["responses"],
                    examinees=fit["examinees"],
                    items=len(params),
                    details=json.dumps(fit.get("details", {})),
                )
            )

    def item_parameters(self, irt_model: str) -> dict[str, dict[str, Any]]:
        """uuid -> {a, b, n_responses, fitted_at} of the calibrated active questions."""
        query = (
            sa.select(item_params)
            .join(questions, questions.c.uuid == item_params.c.question_uuid)
            .where(item_params.c.irt_model == irt_model, questions.c.active.is_(True))
        )
        with self.engine.connect() as conn:
            return {
                r.question_uuid: {"a": r.a, "b": r.b, "n_responses": r.n_responses, "fitted_at": r.fitted_at}
                for r in conn.execute(query)
            }

    def last_calibration(self, irt_model: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(calibrations)
                .where(calibrations.c.irt_model == irt_model)
                .order_by(calibrations.c.fitted_at.desc())
                .limit(1)
            ).first()
        if row is None:
            return None
        return {**dict(row._mapping), "details": json.loads(row.details or "{}")}
