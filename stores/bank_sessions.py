"""Exam sessions of the llmeval question bank and their quota (LLMEval-3, seed 002, section 2.2).

A session's questions are sampled once, without repeating a question its model met in its current cycle
(Dynamic Question Sampling; how places are drawn without reading the bank: :mod:`stores.bank_places`). Quota rules
(the "inner layer" of section 2.2): the allocation is delivered strictly in order, one pending at a time; an answer
is accepted only for the pending slot and only once (one conditional update of the slot, so a second one, in any
process, finds it completed); nothing beyond the allocation is ever delivered. Delivered payloads are built from a
whitelist that never contains the answer or the explanation. The judge's stars and the session's scores are
stored with the session.
"""

from __future__ import annotations

import json
import random
from typing import Any

import sqlalchemy as sa

from dyneval.stores.bank_places import Pool, Ranked, at_places, ranked, ranked_sizes
from dyneval.stores.bank_schema import items, questions, ranks, sessions
from dyneval.stores.bank_store import BankStore, now

STATUSES = ("allocated", "pending", "completed")
#: Fields an examinee may ever see (whitelist: no answer, no explanation, no source).
DELIVERED_FIELDS = ("session_id", "position", "question_id", "discipline", "sub_discipline", "qtype", "question")


class QuotaError(Exception):
    """An examinee asked for more than its quota or tried to answer out of turn.

    ``kind`` is ``exhausted`` (no questions left: HTTP 429), ``resubmission`` or
    ``out_of_order`` (HTTP 409), ``unknown`` (no such session: HTTP 404), or ``repeat`` (an adaptive
    session's choice was taken by another session of the same model meanwhile; choose again).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SessionStore(BankStore):
    """Exam sessions: sampling, mirrors for reference models, quota-checked delivery and answers, judgements."""

    def session(self, session_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).first()
        if row is None:
            return None
        out = dict(row._mapping)
        out["fewshot"] = json.loads(out["fewshot"] or "[]")
        out["scores"] = json.loads(out["scores"]) if out["scores"] else None
        return out

    def sessions_of(self, model: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(sessions.c.session_id).order_by(sessions.c.created_at, sessions.c.session_id)
        if model is not None:
            query = query.where(sessions.c.model == model)
        with self.engine.connect() as conn:
            ids = list(conn.scalars(query))
        return [s for s in (self.session(i) for i in ids) if s]

    def _met(self, model: str, cycle: int) -> Any:
        """The query of the questions the model's sessions of ``cycle`` allocated."""
        return sa.select(items.c.question_uuid).where(
            items.c.session_id.in_(
                sa.select(sessions.c.session_id).where(sessions.c.model == model, sessions.c.cycle == cycle)
            )
        )

    def _fewshot_seen(self, conn: Any, model: str, cycle: int) -> set[str]:
        seen: set[str] = set()
        for fewshot in conn.scalars(
            sa.select(sessions.c.fewshot).where(sessions.c.model == model, sessions.c.cycle == cycle)
        ):
            seen.update(json.loads(fewshot or "[]"))
        return seen

    def _seen(self, conn: Any, model: str, cycle: int) -> set[str]:
        """Questions a model has met in its current cycle (session items, reference replays, few-shot examples)."""
        seen = self._fewshot_seen(conn, model, cycle)
        seen.update(conn.scalars(self._met(model, cycle)))
        return seen

    def _seen_ranked(self, conn: Any, model: str, cycle: int) -> list[Ranked]:
        """The active questions among :meth:`_seen`, with their places (the join stays in the database)."""
        met = ranks.c.uuid.in_(self._met(model, cycle))
        fewshot = self._fewshot_seen(conn, model, cycle)
        where = sa.or_(met, ranks.c.uuid.in_(fewshot)) if fewshot else met
        return ranked(conn, where)

    def refresh_ranks(self) -> None:
        """Rebuild the sampling places now if questions changed (else the next session does it)."""
        with self._lock, self.engine.begin() as conn:
            ranked_sizes(conn)

    def _cycle(self, conn: Any, model: str) -> int:
        return int(
            conn.scalar(
                sa.select(sa.func.max(sessions.c.cycle)).where(
                    sessions.c.model == model, sessions.c.mirror_of.is_(None)
                )
            )
            or 0
        )

    def create_session(
        self,
        session_id: str,
        *,
        model: str,
        n: int,
        seed: str,
        paradigm: str = "zero-shot",
        stratified: bool = False,
        fewshot_k: int = 0,
        run_id: str = "",
        owner: str | None = None,
    ) -> dict[str, Any]:
        """Allocate a session's questions (section 2.2, Dynamic Question Sampling); idempotent per id.

        Sampling is seeded by ``seed``, without replacement, and skips every question
        the model met in earlier sessions of its current cycle; when fewer than ``n``
        unseen questions remain, the remaining ones are all taken and a new cycle
        starts (the bank is exhausted for this model). ``stratified`` splits ``n``
        over disciplines in proportion to their size (largest remainder). Few-shot
        examples come from outside the session.

        The bank is never read whole: places in UUID order are drawn and only the drawn questions are looked up
        (:mod:`stores.bank_places`), with the same draws, hence the same questions, as sampling the list of
        every unseen question's UUID. A UUID is the file's or derived from the question's content
        (:func:`stores.question_bank.content_uuid`), so the exam depends only on ``seed`` and the bank's content.
        """
        if n < 1:
            raise ValueError("a session needs at least one question")
        with self._lock, self.engine.begin() as conn:
            self._serialised(conn, f"model:{model}")  # the model's sessions sample one after another
            existing = conn.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).first()
            if existing is not None:
                return self.session(session_id) or {}
            rng = random.Random(seed)
            sizes = ranked_sizes(conn)
            total = sum(sizes.values())
            if not total:
                raise ValueError("the question bank is empty")
            cycle = self._cycle(conn, model)
            seen = self._seen_ranked(conn, model, cycle)
            fresh = Pool(sizes, seen)
            n = min(n, total)
            if len(fresh) >= n:
                chosen = at_places(conn, fresh.sample(rng, n, stratified))
            else:  # bank exhausted for this model: take what is left, then start a new cycle
                chosen = at_places(conn, fresh.places(range(len(fresh))))
                rng.shuffle(chosen)
                cycle += 1
                chosen += at_places(conn, Pool(sizes, chosen).sample(rng, n - len(chosen), stratified))
            rng.shuffle(chosen)  # the fixed delivery order
            # few-shot examples: outside the session, preferably questions the model has already met
            # (an example shown with its answer is "seen", so fresh questions are only spent when needed)
            taken = {r.rank for r in chosen}
            met = [r for r in fresh.excluded if r.rank not in taken]
            fewshot = rng.sample(met, min(fewshot_k, len(met)))
            fewshot += at_places(conn, Pool(sizes, [*seen, *chosen]).sample(rng, fewshot_k - len(fewshot), False))
            conn.execute(
                sessions.insert().values(
                    session_id=session_id,
                    model=model,
                    paradigm=paradigm,
                    seed=str(seed),
                    n=len(chosen),
                    stratified=stratified,
                    cycle=cycle,
                    fewshot=json.dumps([r.uuid for r in fewshot]),
                    mirror_of=None,
                    run_id=run_id,
                    owner=owner,
                    created_at=now(),
                )
            )
            conn.execute(
                items.insert(),
                [
                    {"session_id": session_id, "position": i, "question_uuid": r.uuid, "status": "allocated"}
                    for i, r in enumerate(chosen)
                ],
            )
        return self.session(session_id) or {}

    def create_mirror(self, session_id: str, source_id: str, *, model: str, run_id: str = "") -> dict[str, Any]:
        """A replay of ``source_id``'s exact questions, order and few-shot examples for a reference model
        (equation 2 compares with the reference model "on the same question set"); idempotent."""
        with self._lock, self.engine.begin() as conn:
            self._serialised(conn, f"model:{model}")
            if conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first():
                return self.session(session_id) or {}
            src = conn.execute(sa.select(sessions).where(sessions.c.session_id == source_id)).first()
            if src is None:
                raise QuotaError("unknown", f"no session {source_id}")
            conn.execute(
                sessions.insert().values(  # the replayed questions count as met by the reference model
                    session_id=session_id,
                    model=model,
                    paradigm=src.paradigm,
                    seed=src.seed,
                    n=src.n,
                    stratified=src.stratified,
                    cycle=self._cycle(conn, model),
                    fewshot=src.fewshot,
                    mirror_of=source_id,
                    run_id=run_id,
                    created_at=now(),
                )
            )
            rows = conn.execute(
                sa.select(items.c.position, items.c.question_uuid)
                .where(items.c.session_id == source_id)
                .order_by(items.c.position)
            ).all()
            conn.execute(
                items.insert(),
                [{"session_id": session_id, "position": p, "question_uuid": u, "status": "allocated"} for p, u in rows],
            )
        return self.session(session_id) or {}

    def question_ids(self, session_id: str) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.scalars(
                    sa.select(items.c.question_uuid).where(items.c.session_id == session_id).order_by(items.c.position)
                )
            )

    def quota(self, session_id: str) -> dict[str, int]:
        """Allocated / pending / completed counts of a session (``allocated`` = the whole allocation)."""
        with self.engine.connect() as conn:
            return self._quota(conn, session_id)

    @staticmethod
    def _quota(conn: Any, session_id: str) -> dict[str, int]:
        rows = conn.execute(
            sa.select(items.c.status, sa.func.count()).where(items.c.session_id == session_id).group_by(items.c.status)
        ).all()
        counts = {s: 0 for s in STATUSES}
        counts.update({s: int(c) for s, c in rows})
        return {
            "allocated": sum(counts.values()),
            "undelivered": counts["allocated"],
            "pending": counts["pending"],
            "completed": counts["completed"],
        }

    def next_item(self, session_id: str) -> dict[str, Any]:
        """The next question in the fixed order, stripped of answer and explanation.

        A pending (delivered, unanswered) slot is delivered again rather than a new
        one; :class:`QuotaError` ``exhausted`` when every slot is completed.
        """
        with self._lock, self.engine.begin() as conn:
            if (
                conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first()
                is None
            ):
                raise QuotaError("unknown", f"no session {session_id}")
            row = conn.execute(
                sa.select(items.c.position, items.c.question_uuid, items.c.status)
                .where(items.c.session_id == session_id, items.c.status != "completed")
                .order_by(items.c.position)
                .limit(1)
            ).first()
            if row is None:
                raise QuotaError("exhausted", f"session {session_id}: every allocated question is answered")
            if row.status == "allocated":
                conn.execute(
                    items.update()
                    .where(
                        items.c.session_id == session_id,
                        items.c.position == row.position,
                        items.c.status == "allocated",
                    )
                    .values(status="pending", delivered_at=now())
                )
            q = conn.execute(sa.select(questions).where(questions.c.uuid == row.question_uuid)).one()
        return stripped_payload(session_id, row.position, q)

    def submit(self, session_id: str, position: int, response: str) -> dict[str, int]:
        """Record the answer of the pending slot ``position``; no resubmission, no skipping ahead.

        One conditional update of the slot while it is pending: of concurrent submissions, in any processes, the
        first to commit completes it and the others (their update finds it completed) are refused."""
        with self._lock, self.engine.begin() as conn:
            done = conn.execute(
                items.update()
                .where(items.c.session_id == session_id, items.c.position == position, items.c.status == "pending")
                .values(status="completed", response=response, answered_at=now())
            )
            if done.rowcount == 1:
                return self._quota(conn, session_id)
            row = conn.execute(
                sa.select(items.c.status).where(items.c.session_id == session_id, items.c.position == position)
            ).first()
            if row is None:
                if (
                    conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first()
                    is None
                ):
                    raise QuotaError("unknown", f"no session {session_id}")
                raise QuotaError("exhausted", f"session {session_id}: position {position} is beyond the quota")
            if row.status == "completed":
                raise QuotaError("resubmission", f"session {session_id}: position {position} is already answered")
            raise QuotaError(
                "out_of_order",
                f"session {session_id}: position {position} was not delivered "
                "yet; answer the questions in the order they are given",
            )

    # -- judging -----------------------------------------------------------------------------
    def judged_items(self, session_id: str) -> list[dict[str, Any]]:
        """Every slot of a session with its question (answer included: server side only)."""
        query = (
            sa.select(
                items,
                questions.c.discipline,
                questions.c.sub_discipline,
                questions.c.qtype,
                questions.c.question,
                questions.c.options,
                questions.c.answer,
                questions.c.explanation,
            )
            .join(questions, questions.c.uuid == items.c.question_uuid)
            .where(items.c.session_id == session_id)
            .order_by(items.c.position)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def set_judgement(self, session_id: str, position: int, stars: int | None, reason: str, status: str) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(
                items.update()
                .where(items.c.session_id == session_id, items.c.position == position)
                .values(stars=stars, reason=reason, judge_status=status)
            )

    def set_scores(self, session_id: str, scores: dict[str, Any]) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(
                sessions.update()
                .where(sessions.c.session_id == session_id)
                .values(scores=json.dumps(scores, ensure_ascii=False))
            )


def stripped_payload(session_id: str, position: int, q: Any) -> dict[str, Any]:
    """What an examinee receives for one question: whitelisted fields only (section 2.2, inner layer).

    Multiple-choice options are part of the question text the examinee must see;
    the answer, explanation and source never are.
    """
    text = question_text(q.question, json.loads(q.options or "[]"))
    payload = {
        "session_id": session_id,
        "position": position,
        "question_id": q.uuid,
        "discipline": q.discipline,
        "sub_discipline": q.sub_discipline,
        "qtype": q.qtype,
        "question": text,
    }
    assert tuple(payload) == DELIVERED_FIELDS
    return payload


def question_text(question: str, options: list[str] | None) -> str:
    """The question as shown to an examinee: its text, then lettered options for multiple choice."""
    if not options:
        return question
    return question + "\n" + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))
