"""Adaptive sessions of the llmeval question bank: no slot allocated up front, each appended once every earlier
one is answered, under LLMEval-3's session rules (seed 002, section 2.2: serial delivery, no question its model met
in its current cycle). The session's settings and running ability estimate are :data:`stores.bank_schema.adaptive`;
the item parameters, :class:`stores.bank_calibration.CalibrationStore`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dyneval.stores.bank_schema import adaptive, items, sessions
from dyneval.stores.bank_sessions import QuotaError, SessionStore
from dyneval.stores.bank_store import now


class AdaptiveStore(SessionStore):
    """Adaptive sessions: created, their state read and updated, their slots appended one at a time."""

    def create_adaptive_session(
        self,
        session_id: str,
        *,
        model: str,
        paradigm: str,
        seed: str,
        irt_model: str,
        target_se: float,
        max_items: int,
        exposure_k: int,
        run_id: str = "",
        owner: str | None = None,
    ) -> dict[str, Any]:
        """An adaptive session: no slot allocated up front, at most ``max_items``; idempotent per id."""
        with self._lock, self.engine.begin() as conn:
            self._serialised(conn, f"model:{model}")
            if conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first():
                return self.session(session_id) or {}
            conn.execute(
                sessions.insert().values(
                    session_id=session_id,
                    model=model,
                    paradigm=paradigm,
                    seed=str(seed),
                    n=max_items,
                    stratified=False,
                    cycle=self._cycle(conn, model),
                    fewshot="[]",
                    mirror_of=None,
                    run_id=run_id,
                    owner=owner,
                    created_at=now(),
                )
            )
            conn.execute(
                adaptive.insert().values(
                    session_id=session_id,
                    irt_model=irt_model,
                    target_se=target_se,
                    max_items=max_items,
                    exposure_k=exposure_k,
                    theta=0.0,
                    se=1.0,
                )
            )
        return self.session(session_id) or {}

    def adaptive_state(self, session_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(adaptive).where(adaptive.c.session_id == session_id)).first()
        return dict(row._mapping) if row else None

    def update_adaptive(self, session_id: str, **values: Any) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(adaptive.update().where(adaptive.c.session_id == session_id).values(**values))

    def unavailable_for(self, session_id: str) -> set[str]:
        """Questions an adaptive session may not ask: those its model met in its current cycle (this
        session's included) - the no-repeat rule of section 2.2."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(sessions.c.model, sessions.c.cycle).where(sessions.c.session_id == session_id)
            ).first()
            if row is None:
                raise QuotaError("unknown", f"no session {session_id}")
            return self._seen(conn, row.model, row.cycle)

    def append_item(self, session_id: str, question_uuid: str) -> int:
        """Allocate the next slot of an adaptive session; only when every earlier slot is answered (serial
        delivery), below the session's maximum, and for a question its model has not met in this cycle
        (checked in the same transaction, so concurrent sessions of one model cannot both take it;
        :class:`QuotaError` ``repeat``). Returns its position."""
        with self._lock, self.engine.begin() as conn:
            row = conn.execute(
                sa.select(sessions.c.n, sessions.c.model, sessions.c.cycle).where(sessions.c.session_id == session_id)
            ).first()
            if row is None:
                raise QuotaError("unknown", f"no session {session_id}")
            n = row.n
            self._serialised(conn, f"model:{row.model}")
            if question_uuid in self._seen(conn, row.model, row.cycle):  # another session of the model took it
                raise QuotaError("repeat", f"session {session_id}: {question_uuid} was met by {row.model}")
            rows = conn.execute(sa.select(items.c.status).where(items.c.session_id == session_id)).all()
            if any(r.status != "completed" for r in rows):
                raise QuotaError("out_of_order", f"session {session_id}: the previous question is not answered")
            if len(rows) >= n:
                raise QuotaError("exhausted", f"session {session_id}: all {n} questions are used")
            conn.execute(
                items.insert().values(
                    session_id=session_id, position=len(rows), question_uuid=question_uuid, status="allocated"
                )
            )
        return len(rows)
