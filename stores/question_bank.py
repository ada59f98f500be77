"""The llmeval question bank: a real database (SQLite by default, PostgreSQL when a DSN is given).

LLMEval-3 (seed 002) keeps a private bank of questions (section 2.1, appendix A)
and serves each model a freshly sampled, non-repeating exam (section 2.2). This
module holds the questions themselves (import batches, content hashes, the near-duplicate index's
bookkeeping, export) and composes the bank from its parts, so that the batch graph, the HTTP exam server and
the analyses share one source of truth:

* the database, its locks and the request-rate buckets: :mod:`stores.bank_store` (where it is:
  :mod:`stores.bank_location`); the tables, what each holds: :mod:`stores.bank_schema`;
* exam sessions and their quota: :mod:`stores.bank_sessions` (sampled without reading the bank:
  :mod:`stores.bank_places`); adaptive sessions: :mod:`stores.bank_adaptive`;
* the exam server's examinees: :mod:`stores.bank_examinees`; the IRT calibration's records:
  :mod:`stores.bank_calibration`.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import uuid as uuidlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dyneval.stores.bank_adaptive import AdaptiveStore
from dyneval.stores.bank_calibration import CalibrationStore
from dyneval.stores.bank_examinees import ExamineeStore
from dyneval.stores.bank_places import RANKS_KEY
from dyneval.stores.bank_schema import meta, questions
from dyneval.stores.bank_store import now

#: ``llmeval_meta`` key: the questions of the last import batch whose vectors may not be in the near-duplicate
#: index yet (JSON list of UUIDs).
INDEX_PENDING_KEY = "index_pending"


def normalize_text(text: str) -> str:
    """Case-, width-, punctuation- and whitespace-insensitive form of a question (for exact-duplicate hashing)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def content_hash(question: str, options: Iterable[str] = ()) -> str:
    """SHA-256 of the normalised question (and options): equal for exact duplicates."""
    key = normalize_text(question) + "\x1f" + "\x1f".join(normalize_text(o) for o in options)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


#: Namespace of the UUIDs derived from a question's content (:func:`content_uuid`).
_CONTENT_NS = uuidlib.UUID("3d2f8a61-5c4e-4b7a-9e1d-7a6c0b8f2e45")


def content_uuid(question: str, options: Iterable[str] = ()) -> str:
    """The UUID of a question whose file gives none: derived from its content (:func:`content_hash`), so one file
    gets the same ids on every import, in any folder or process, and sessions drawn in UUID order with one seed
    (LLMEval-3, section 2.2) are the same exam. A bank admits one question per content hash, so no two collide."""
    return str(uuidlib.uuid5(_CONTENT_NS, content_hash(question, options)))


@dataclass
class Question:
    uuid: str
    discipline: str
    sub_discipline: str
    qtype: str
    question: str
    answer: str
    explanation: str = ""
    source: str = ""
    options: list[str] | None = None
    parent_uuid: str | None = None
    created_at: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "discipline": self.discipline,
            "sub_discipline": self.sub_discipline,
            "qtype": self.qtype,
            "question": self.question,
            "options": json.dumps(self.options or [], ensure_ascii=False),
            "answer": self.answer,
            "explanation": self.explanation,
            "source": self.source,
            "created_at": self.created_at or now(),
            "content_hash": content_hash(self.question, self.options or []),
            "parent_uuid": self.parent_uuid,
            "active": True,
        }


def _question(row: Any) -> Question:
    return Question(
        uuid=row.uuid,
        discipline=row.discipline,
        sub_discipline=row.sub_discipline,
        qtype=row.qtype,
        question=row.question,
        answer=row.answer,
        explanation=row.explanation,
        source=row.source,
        options=json.loads(row.options or "[]"),
        parent_uuid=row.parent_uuid,
        created_at=row.created_at,
    )


class QuestionBank(AdaptiveStore, ExamineeStore, CalibrationStore):
    """Questions, exam sessions (adaptive ones too) and their quota, examinees and the IRT item parameters fitted
    from the judged answers, in one SQL database."""

    # -- questions ---------------------------------------------------------------------------
    def add_questions(
        self, qs: Iterable[Question], *, deactivate: Iterable[str] = (), index_pending: bool = False
    ) -> int:
        """Insert ``qs`` and deactivate the questions ``deactivate`` in one transaction (a killed import leaves a
        batch wholly in or wholly out); ``index_pending`` records their UUIDs as not yet in the near-duplicate
        index until :meth:`index_done` (see :meth:`index_pending`)."""
        rows = [q.row() for q in qs]
        off = list(deactivate)
        if not rows and not off:
            return 0
        with self._lock, self.engine.begin() as conn:
            if rows:
                conn.execute(questions.insert(), rows)
            if off:
                conn.execute(questions.update().where(questions.c.uuid.in_(off)).values(active=False))
            conn.execute(meta.delete().where(meta.c.key == RANKS_KEY))
            if index_pending:  # added to those still waiting (a deferred import's batches)
                waiting = conn.scalar(sa.select(meta.c.value).where(meta.c.key == INDEX_PENDING_KEY))
                ids = [*json.loads(waiting or "[]"), *(r["uuid"] for r in rows)]
                conn.execute(meta.delete().where(meta.c.key == INDEX_PENDING_KEY))
                conn.execute(meta.insert().values(key=INDEX_PENDING_KEY, value=json.dumps(ids)))
        return len(rows)

    def set_active(self, uuids: Iterable[str], active: bool) -> None:
        ids = list(uuids)
        if not ids:
            return
        with self._lock, self.engine.begin() as conn:
            conn.execute(questions.update().where(questions.c.uuid.in_(ids)).values(active=active))
            conn.execute(meta.delete().where(meta.c.key == RANKS_KEY))

    def index_pending(self) -> list[Question]:
        """The questions of an import batch written to the bank whose vectors were never confirmed in the
        near-duplicate index (the import was killed in between): the next import adds them first."""
        with self.engine.connect() as conn:
            value = conn.scalar(sa.select(meta.c.value).where(meta.c.key == INDEX_PENDING_KEY))
            ids = json.loads(value) if value else []
            rows = conn.execute(sa.select(questions).where(questions.c.uuid.in_(ids))).all() if ids else []
        return [_question(r) for r in rows]

    def index_done(self) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(meta.delete().where(meta.c.key == INDEX_PENDING_KEY))

    def existing_uuids(self, uids: Iterable[str]) -> set[str]:
        """Which of ``uids`` name a question of the bank (one query)."""
        return set(self.hashes_of(uids))

    def hashes_of(self, uids: Iterable[str]) -> dict[str, str]:
        """uuid -> content hash of those of ``uids`` the bank holds (one query)."""
        ids = list(uids)
        if not ids:
            return {}
        with self.engine.connect() as conn:
            return dict(
                conn.execute(
                    sa.select(questions.c.uuid, questions.c.content_hash).where(questions.c.uuid.in_(ids))
                ).all()
            )

    def uuids_with_hashes(self, digests: Iterable[str]) -> dict[str, str]:
        """content hash -> the first bank question holding it, for those of ``digests`` the bank holds."""
        keys = list(digests)
        if not keys:
            return {}
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            for digest, uid in conn.execute(
                sa.select(questions.c.content_hash, questions.c.uuid).where(questions.c.content_hash.in_(keys))
            ):
                found.setdefault(digest, uid)
        return found

    def get(self, uid: str) -> Question | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(questions).where(questions.c.uuid == uid)).first()
        return _question(row) if row else None

    def all_questions(self, *, active_only: bool = False) -> list[Question]:
        query = sa.select(questions).order_by(questions.c.uuid)
        if active_only:
            query = query.where(questions.c.active.is_(True))
        with self.engine.connect() as conn:
            return [_question(r) for r in conn.execute(query)]

    def count(self, *, active_only: bool = True) -> int:
        query = sa.select(sa.func.count()).select_from(questions)
        if active_only:
            query = query.where(questions.c.active.is_(True))
        with self.engine.connect() as conn:
            return int(conn.scalar(query) or 0)

    def disciplines(self) -> dict[str, int]:
        query = (
            sa.select(questions.c.discipline, sa.func.count())
            .where(questions.c.active.is_(True))
            .group_by(questions.c.discipline)
        )
        with self.engine.connect() as conn:
            return {d: int(c) for d, c in conn.execute(query)}

    def bank_id(self) -> str:
        """This bank's identity (a new database = a new id): what its near-duplicate index is named after."""
        return self._meta("bank_id", lambda: uuidlib.uuid4().hex)

    def _meta(self, key: str, make: Any) -> str:
        """The value under ``key`` in ``llmeval_meta``, created with ``make()`` on first use."""
        select = sa.select(meta.c.value).where(meta.c.key == key)
        with self._lock:
            with self.engine.connect() as conn:
                value = conn.scalar(select)
            if value is not None:
                return str(value)
            try:
                with self.engine.begin() as conn:
                    conn.execute(meta.insert().values(key=key, value=make()))
            except sa.exc.IntegrityError:  # another process created it first
                pass
            with self.engine.connect() as conn:
                return str(conn.scalar(select))

    def answers_by_model(self) -> dict[str, dict[str, list[int]]]:
        """model -> question uuid -> judged stars (every judged answer of every session: :meth:`responses`)."""
        out: dict[str, dict[str, list[int]]] = {}
        for model, qid, stars, _ in self.responses():
            out.setdefault(model, {}).setdefault(qid, []).append(stars)
        return out

    def iter_export(self) -> Iterator[Question]:
        yield from self.all_questions()
