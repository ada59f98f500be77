"""The llmeval question bank: a real database (SQLite by default, PostgreSQL when a DSN is given).

LLMEval-3 (seed 002) keeps a private bank of questions (section 2.1, appendix A)
and serves each model a freshly sampled, non-repeating exam (section 2.2). This
module holds everything that must live in the database so that the batch graph,
the HTTP exam server and the analyses share one source of truth:

The tables, what each holds, are in :mod:`stores.bank_schema`; how a session is sampled without reading
the bank, in :mod:`stores.bank_places`; the IRT calibration's records, in :mod:`stores.bank_calibration`.

Quota rules (the "inner layer" of section 2.2): a session's questions are
allocated once, delivered strictly in order, one pending at a time; an answer is
accepted only for the pending slot and only once; nothing beyond the allocation
is ever delivered. Delivered payloads are built from a whitelist that never
contains the answer or the explanation.

Writes are serialised by a process-wide lock per database (SQLite allows one
writer) and run inside transactions. What must hold across processes (the exam server's
``--workers``, runs sharing a PostgreSQL bank) is kept by the database itself: an answer is
stored by one conditional update of a pending slot (a second one finds it completed), the
sampling of a model's sessions is serialised by a PostgreSQL advisory lock per model (no
question twice in a cycle), and the request-rate buckets are rows updated under a row lock.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
import unicodedata
import uuid as uuidlib
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from dyneval.stores.bank_calibration import CalibrationStore
from dyneval.stores.bank_places import RANKS_KEY, Pool, Ranked, at_places, ranked, ranked_sizes
from dyneval.stores.bank_schema import (adaptive, examinees, items, meta, metadata, questions, ranks, rates,
                                        sessions)

STATUSES = ("allocated", "pending", "completed")
#: Fields an examinee may ever see (whitelist: no answer, no explanation, no source).
DELIVERED_FIELDS = ("session_id", "position", "question_id", "discipline", "sub_discipline", "qtype", "question")

#: ``llmeval_meta`` key: the questions of the last import batch whose vectors may not be in the near-duplicate
#: index yet (JSON list of UUIDs).
INDEX_PENDING_KEY = "index_pending"
#: ``llmeval_meta`` key under which older versions kept the exam server's signing secret (moved out on start).
LEGACY_SECRET_KEY = "jwt_secret"

_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()


class QuotaError(Exception):
    """An examinee asked for more than its quota or tried to answer out of turn.

    ``kind`` is ``exhausted`` (no questions left: HTTP 429), ``resubmission`` or
    ``out_of_order`` (HTTP 409), ``unknown`` (no such session: HTTP 404), or ``repeat`` (an adaptive
    session's choice was taken by another session of the same model meanwhile; choose again).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def normalize_text(text: str) -> str:
    """Case-, width-, punctuation- and whitespace-insensitive form of a question (for exact-duplicate hashing)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def content_hash(question: str, options: Iterable[str] = ()) -> str:
    """SHA-256 of the normalised question (and options): equal for exact duplicates."""
    key = normalize_text(question) + "\x1f" + "\x1f".join(normalize_text(o) for o in options)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def advisory_key(name: str) -> int:
    """The 64-bit PostgreSQL advisory lock key of ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


def bank_url(location: str | Path) -> str:
    """A SQLAlchemy URL: a PostgreSQL DSN (``postgresql://`` or libpq's ``key=value`` form, :func:`server_dsn`)
    takes the psycopg 3 driver; another URL is kept; anything else is a SQLite file."""
    text = server_dsn(str(location))
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    if "://" in text:
        return text
    Path(text).parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{text}"


def server_dsn(location: str) -> str:
    """``location`` as a URL when it is a libpq ``key=value`` connection string (``host=db dbname=evals``, as
    ``--postgres-dsn`` and the checkpointer take it), so that it is never taken for a file name; else unchanged."""
    keywords = None if "://" in location else _libpq_keywords(location)
    if not keywords:
        return location
    port = keywords.pop("port", None)
    return sa.engine.URL.create(
        "postgresql", username=keywords.pop("user", None), password=keywords.pop("password", None),
        host=keywords.pop("host", None), port=int(port) if port else None, database=keywords.pop("dbname", None),
        query=keywords).render_as_string(hide_password=False)


def _libpq_keywords(text: str) -> dict[str, str] | None:
    """The keywords of a libpq connection string (``host=db dbname=evals``); None for anything else (a file name,
    even one with an ``=``: only libpq's own keywords parse), or without psycopg (no PostgreSQL to reach then)."""
    if "=" not in text:
        return None
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        return {k: str(v) for k, v in conninfo_to_dict(text).items()}
    except ProgrammingError:
        return None


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
            "uuid": self.uuid, "discipline": self.discipline, "sub_discipline": self.sub_discipline,
            "qtype": self.qtype, "question": self.question, "options": json.dumps(self.options or [],
                                                                                   ensure_ascii=False),
            "answer": self.answer, "explanation": self.explanation, "source": self.source,
            "created_at": self.created_at or now(), "content_hash": content_hash(self.question, self.options or []),
            "parent_uuid": self.parent_uuid, "active": True,
        }


def _question(row: Any) -> Question:
    return Question(uuid=row.uuid, discipline=row.discipline, sub_discipline=row.sub_discipline, qtype=row.qtype,
                    question=row.question, answer=row.answer, explanation=row.explanation, source=row.source,
                    options=json.loads(row.options or "[]"), parent_uuid=row.parent_uuid, created_at=row.created_at)


class QuestionBank(CalibrationStore):
    """Questions, exam sessions and their quota in one SQL database (the IRT item parameters fitted from its
    judged answers: :class:`stores.bank_calibration.CalibrationStore`)."""

    def __init__(self, location: str | Path) -> None:
        self.url = bank_url(location)
        kwargs: dict[str, Any] = {"future": True}
        if self.url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 60}
        self.engine: Engine = sa.create_engine(self.url, **kwargs)
        if self.url.startswith("sqlite"):
            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()
        with _locks_guard:
            self._lock = _locks.setdefault(self.url, threading.RLock())
        with self._lock:
            metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- locks across processes ----------------------------------------------------------------
    @staticmethod
    def _serialised(conn: Any, name: str) -> None:
        """Until ``conn``'s transaction ends, no other transaction holding ``name`` runs (a PostgreSQL advisory
        lock, whichever process or machine opened the bank); SQLite serves one process, whose writes
        :attr:`_lock` already serialises."""
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(name)})

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Run the block as the only holder of ``name`` in every process using this bank: one thread per process
        waits (a process lock), then holds a transaction with the advisory lock (PostgreSQL) for the block."""
        with _locks_guard:
            lock = _locks.setdefault(f"{self.url}#{name}", threading.RLock())
        with lock, self.engine.begin() as conn:
            self._serialised(conn, name)
            yield

    def take_token(self, key: str, rate: float, burst: int) -> float:
        """Draw one request from ``key``'s token bucket (``rate`` per second, bursts up to ``burst``), kept in
        the database so that every server process draws on the same bucket (the row is locked while it is
        read and updated): 0 when the request may go ahead, else the seconds until a token is free."""
        stamp = time.time()
        with self._lock, self.engine.begin() as conn:
            insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(rates)
            conn.execute(insert.values(key=key, tokens=float(burst), stamp=stamp).on_conflict_do_nothing())
            row = conn.execute(sa.select(rates.c.tokens, rates.c.stamp).where(rates.c.key == key)
                               .with_for_update()).one()
            tokens = min(float(burst), row.tokens + max(0.0, stamp - row.stamp) * rate)
            allowed = tokens >= 1
            conn.execute(rates.update().where(rates.c.key == key).values(tokens=tokens - allowed, stamp=stamp))
        return 0.0 if allowed else (1 - tokens) / rate

    # -- questions ---------------------------------------------------------------------------
    def add_questions(self, qs: Iterable[Question], *, deactivate: Iterable[str] = (),
                      index_pending: bool = False) -> int:
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
            return dict(conn.execute(sa.select(questions.c.uuid, questions.c.content_hash)
                                     .where(questions.c.uuid.in_(ids))).all())

    def uuids_with_hashes(self, digests: Iterable[str]) -> dict[str, str]:
        """content hash -> the first bank question holding it, for those of ``digests`` the bank holds."""
        keys = list(digests)
        if not keys:
            return {}
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            for digest, uid in conn.execute(sa.select(questions.c.content_hash, questions.c.uuid)
                                            .where(questions.c.content_hash.in_(keys))):
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
        query = (sa.select(questions.c.discipline, sa.func.count()).where(questions.c.active.is_(True))
                 .group_by(questions.c.discipline))
        with self.engine.connect() as conn:
            return {d: int(c) for d, c in conn.execute(query)}

    # -- sessions ----------------------------------------------------------------------------
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
        return sa.select(items.c.question_uuid).where(items.c.session_id.in_(
            sa.select(sessions.c.session_id).where(sessions.c.model == model, sessions.c.cycle == cycle)))

    def _fewshot_seen(self, conn: Any, model: str, cycle: int) -> set[str]:
        seen: set[str] = set()
        for fewshot in conn.scalars(sa.select(sessions.c.fewshot)
                                    .where(sessions.c.model == model, sessions.c.cycle == cycle)):
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
        return int(conn.scalar(sa.select(sa.func.max(sessions.c.cycle))
                               .where(sessions.c.model == model, sessions.c.mirror_of.is_(None))) or 0)

    def create_session(self, session_id: str, *, model: str, n: int, seed: str, paradigm: str = "zero-shot",
                       stratified: bool = False, fewshot_k: int = 0, run_id: str = "",
                       owner: str | None = None) -> dict[str, Any]:
        """Allocate a session's questions (section 2.2, Dynamic Question Sampling); idempotent per id.

        Sampling is seeded by ``seed``, without replacement, and skips every question
        the model met in earlier sessions of its current cycle; when fewer than ``n``
        unseen questions remain, the remaining ones are all taken and a new cycle
        starts (the bank is exhausted for this model). ``stratified`` splits ``n``
        over disciplines in proportion to their size (largest remainder). Few-shot
        examples come from outside the session.

        The bank is never read whole: places in UUID order are drawn and only the drawn questions are looked up
        (:mod:`stores.bank_places`), with the same draws, hence the same questions, as sampling the list of
        every unseen question's UUID.
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
            conn.execute(sessions.insert().values(
                session_id=session_id, model=model, paradigm=paradigm, seed=str(seed), n=len(chosen),
                stratified=stratified, cycle=cycle, fewshot=json.dumps([r.uuid for r in fewshot]), mirror_of=None,
                run_id=run_id, owner=owner, created_at=now()))
            conn.execute(items.insert(), [{"session_id": session_id, "position": i, "question_uuid": r.uuid,
                                           "status": "allocated"} for i, r in enumerate(chosen)])
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
            conn.execute(sessions.insert().values(  # the replayed questions count as met by the reference model
                session_id=session_id, model=model, paradigm=src.paradigm, seed=src.seed, n=src.n,
                stratified=src.stratified, cycle=self._cycle(conn, model), fewshot=src.fewshot, mirror_of=source_id,
                run_id=run_id,
                created_at=now()))
            rows = conn.execute(sa.select(items.c.position, items.c.question_uuid)
                                .where(items.c.session_id == source_id).order_by(items.c.position)).all()
            conn.execute(items.insert(), [{"session_id": session_id, "position": p, "question_uuid": u,
                                           "status": "allocated"} for p, u in rows])
        return self.session(session_id) or {}

    def question_ids(self, session_id: str) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.scalars(sa.select(items.c.question_uuid).where(items.c.session_id == session_id)
                                     .order_by(items.c.position)))

    def quota(self, session_id: str) -> dict[str, int]:
        """Allocated / pending / completed counts of a session (``allocated`` = the whole allocation)."""
        with self.engine.connect() as conn:
            return self._quota(conn, session_id)

    @staticmethod
    def _quota(conn: Any, session_id: str) -> dict[str, int]:
        rows = conn.execute(sa.select(items.c.status, sa.func.count()).where(items.c.session_id == session_id)
                            .group_by(items.c.status)).all()
        counts = {s: 0 for s in STATUSES}
        counts.update({s: int(c) for s, c in rows})
        return {"allocated": sum(counts.values()), "undelivered": counts["allocated"],
                "pending": counts["pending"], "completed": counts["completed"]}

    def next_item(self, session_id: str) -> dict[str, Any]:
        """The next question in the fixed order, stripped of answer and explanation.

        A pending (delivered, unanswered) slot is delivered again rather than a new
        one; :class:`QuotaError` ``exhausted`` when every slot is completed.
        """
        with self._lock, self.engine.begin() as conn:
            if conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first() \
                    is None:
                raise QuotaError("unknown", f"no session {session_id}")
            row = conn.execute(sa.select(items.c.position, items.c.question_uuid, items.c.status)
                               .where(items.c.session_id == session_id, items.c.status != "completed")
                               .order_by(items.c.position).limit(1)).first()
            if row is None:
                raise QuotaError("exhausted", f"session {session_id}: every allocated question is answered")
            if row.status == "allocated":
                conn.execute(items.update().where(items.c.session_id == session_id,
                                                  items.c.position == row.position, items.c.status == "allocated")
                             .values(status="pending", delivered_at=now()))
            q = conn.execute(sa.select(questions).where(questions.c.uuid == row.question_uuid)).one()
        return stripped_payload(session_id, row.position, q)

    def submit(self, session_id: str, position: int, response: str) -> dict[str, int]:
        """Record the answer of the pending slot ``position``; no resubmission, no skipping ahead.

        One conditional update of the slot while it is pending: of concurrent submissions, in any processes, the
        first to commit completes it and the others (their update finds it completed) are refused."""
        with self._lock, self.engine.begin() as conn:
            done = conn.execute(items.update().where(items.c.session_id == session_id, items.c.position == position,
                                                     items.c.status == "pending")
                                .values(status="completed", response=response, answered_at=now()))
            if done.rowcount == 1:
                return self._quota(conn, session_id)
            row = conn.execute(sa.select(items.c.status).where(items.c.session_id == session_id,
                                                               items.c.position == position)).first()
            if row is None:
                if conn.execute(sa.select(sessions.c.session_id)
                                .where(sessions.c.session_id == session_id)).first() is None:
                    raise QuotaError("unknown", f"no session {session_id}")
                raise QuotaError("exhausted", f"session {session_id}: position {position} is beyond the quota")
            if row.status == "completed":
                raise QuotaError("resubmission", f"session {session_id}: position {position} is already answered")
            raise QuotaError("out_of_order", f"session {session_id}: position {position} was not delivered "
                                             "yet; answer the questions in the order they are given")

    # -- judging -----------------------------------------------------------------------------
    def judged_items(self, session_id: str) -> list[dict[str, Any]]:
        """Every slot of a session with its question (answer included: server side only)."""
        query = (sa.select(items, questions.c.discipline, questions.c.sub_discipline, questions.c.qtype,
                           questions.c.question, questions.c.answer, questions.c.explanation)
                 .join(questions, questions.c.uuid == items.c.question_uuid)
                 .where(items.c.session_id == session_id).order_by(items.c.position))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def set_judgement(self, session_id: str, position: int, stars: int | None, reason: str, status: str) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(items.update().where(items.c.session_id == session_id, items.c.position == position)
                         .values(stars=stars, reason=reason, judge_status=status))

    # -- exam-server users ----------------------------------------------------------------------
    def register_examinee(self, name: str, session_id: str) -> None:
        """Make ``name`` the examinee (and owner) of ``session_id``; :class:`ValueError` if the name is taken."""
        try:
            with self._lock, self.engine.begin() as conn:
                conn.execute(examinees.insert().values(name=name, session_id=session_id, created_at=now()))
                conn.execute(sessions.update().where(sessions.c.session_id == session_id).values(owner=name))
        except sa.exc.IntegrityError:
            raise ValueError(f"examinee {name!r} is already registered") from None

    def examinee_session(self, name: str) -> str | None:
        """The session of a registered examinee, ``None`` for an unknown name."""
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(examinees.c.session_id).where(examinees.c.name == name))

    def move_secret(self, keep: Callable[[str], None]) -> None:
        """Hand the exam server's signing secret that older versions kept in ``llmeval_meta`` to ``keep`` (which
        stores it elsewhere), then erase it: a bank may be copied or shared, its signing secret must not travel
        with it (SQLite: the row's bytes zeroed and the write-ahead log emptied)."""
        with self._lock:
            with self.engine.connect() as conn:
                value = conn.scalar(sa.select(meta.c.value).where(meta.c.key == LEGACY_SECRET_KEY))
            if value is None:
                return
            keep(str(value))
            sqlite = self.url.startswith("sqlite")
            with self.engine.begin() as conn:
                if sqlite:
                    conn.exec_driver_sql("PRAGMA secure_delete=ON")
                conn.execute(meta.delete().where(meta.c.key == LEGACY_SECRET_KEY))
            if sqlite:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

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

    def set_scores(self, session_id: str, scores: dict[str, Any]) -> None:
        with self._lock, self.engine.begin() as conn:
            conn.execute(sessions.update().where(sessions.c.session_id == session_id)
                         .values(scores=json.dumps(scores, ensure_ascii=False)))

    def answers_by_model(self) -> dict[str, dict[str, list[int]]]:
        """model -> question uuid -> judged stars (every judged answer of every session: :meth:`responses`)."""
        out: dict[str, dict[str, list[int]]] = {}
        for model, qid, stars, _ in self.responses():
            out.setdefault(model, {}).setdefault(qid, []).append(stars)
        return out

    # -- adaptive sessions (item parameters: stores.bank_calibration) ---------------------------
    def create_adaptive_session(self, session_id: str, *, model: str, paradigm: str, seed: str, irt_model: str,
                                target_se: float, max_items: int, exposure_k: int, run_id: str = "",
                                owner: str | None = None) -> dict[str, Any]:
        """An adaptive session: no slot allocated up front, at most ``max_items``; idempotent per id."""
        with self._lock, self.engine.begin() as conn:
            self._serialised(conn, f"model:{model}")
            if conn.execute(sa.select(sessions.c.session_id).where(sessions.c.session_id == session_id)).first():
                return self.session(session_id) or {}
            conn.execute(sessions.insert().values(
                session_id=session_id, model=model, paradigm=paradigm, seed=str(seed), n=max_items,
                stratified=False, cycle=self._cycle(conn, model), fewshot="[]", mirror_of=None, run_id=run_id,
                owner=owner, created_at=now()))
            conn.execute(adaptive.insert().values(session_id=session_id, irt_model=irt_model, target_se=target_se,
                                                  max_items=max_items, exposure_k=exposure_k, theta=0.0, se=1.0))
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
            row = conn.execute(sa.select(sessions.c.model, sessions.c.cycle)
                               .where(sessions.c.session_id == session_id)).first()
            if row is None:
                raise QuotaError("unknown", f"no session {session_id}")
            return self._seen(conn, row.model, row.cycle)

    def append_item(self, session_id: str, question_uuid: str) -> int:
        """Allocate the next slot of an adaptive session; only when every earlier slot is answered (serial
        delivery), below the session's maximum, and for a question its model has not met in this cycle
        (checked in the same transaction, so concurrent sessions of one model cannot both take it;
        :class:`QuotaError` ``repeat``). Returns its position."""
        with self._lock, self.engine.begin() as conn:
            row = conn.execute(sa.select(sessions.c.n, sessions.c.model, sessions.c.cycle)
                               .where(sessions.c.session_id == session_id)).first()
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
            conn.execute(items.insert().values(session_id=session_id, position=len(rows),
                                               question_uuid=question_uuid, status="allocated"))
        return len(rows)

    def iter_export(self) -> Iterator[Question]:
        yield from self.all_questions()


def stripped_payload(session_id: str, position: int, q: Any) -> dict[str, Any]:
    """What an examinee receives for one question: whitelisted fields only (section 2.2, inner layer).

    Multiple-choice options are part of the question text the examinee must see;
    the answer, explanation and source never are.
    """
    text = question_text(q.question, json.loads(q.options or "[]"))
    payload = {"session_id": session_id, "position": position, "question_id": q.uuid, "discipline": q.discipline,
               "sub_discipline": q.sub_discipline, "qtype": q.qtype, "question": text}
    assert tuple(payload) == DELIVERED_FIELDS
    return payload


def question_text(question: str, options: list[str] | None) -> str:
    """The question as shown to an examinee: its text, then lettered options for multiple choice."""
    if not options:
        return question
    return question + "\n" + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))


def new_uuid() -> str:
    return str(uuidlib.uuid4())
