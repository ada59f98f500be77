"""The exam server's examinees in the llmeval question bank (the outer layer of LLMEval-3's anti-cheating
architecture, seed 002, section 2.2: each examinee owns one session, no cross-session access), and the JWT
signing secret (appendix F) that older versions kept in the bank, moved out of it.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from dyneval.stores.bank_schema import examinees, meta, sessions
from dyneval.stores.bank_store import BankStore, now

#: ``llmeval_meta`` key under which older versions kept the exam server's signing secret (moved out on start).
LEGACY_SECRET_KEY = "jwt_secret"


class ExamineeStore(BankStore):
    """Registered examinees (name -> session) and the move of a legacy signing secret out of the bank."""

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
