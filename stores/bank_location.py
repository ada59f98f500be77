"""Where the llmeval question bank lives: a SQLite file by default, a PostgreSQL server when a DSN is given
(``postgresql://`` URL or libpq's ``key=value`` form), as the SQLAlchemy URL that
:class:`stores.bank_store.BankStore` opens.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from dyneval.stores.private_files import private_file


def bank_url(location: str | Path) -> str:
    """A SQLAlchemy URL: a PostgreSQL DSN (``postgresql://`` or libpq's ``key=value`` form, :func:`server_dsn`)
    takes the psycopg 3 driver; another URL is kept; anything else is a SQLite file, made owner-only (0600, in
    folders made 0700) before SQLite creates it."""
    text = server_dsn(str(location))
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    if "://" in text:
        return text
    private_file(Path(text))  # the reference answers: SQLite gives its journal files the database file's mode
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
