"""Where the llmeval question bank lives: a SQLite file by default, a PostgreSQL server when a DSN is given
(``postgresql://`` URL or libpq's ``key=value`` form), as the SQLAlchemy URL that
:class:`stores.bank_store.BankStore` opens.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from dyneval.state.errors import InputError
from dyneval.stores.private_files import private_file


def bank_url(location: str | Path) -> str:
    """A SQLAlchemy URL: a PostgreSQL server (:func:`bank_server`) takes the psycopg 3 driver, a ``sqlite://`` URL
    is kept, anything else is a SQLite file, made owner-only (0600, in folders made 0700) before SQLite creates
    it."""
    server = bank_server(str(location))
    if server:
        return "postgresql+psycopg://" + server.split("://", 1)[1]
    text = str(location)
    if "://" in text:
        return text
    private_file(Path(text))  # the reference answers: SQLite gives its journal files the database file's mode
    return f"sqlite:///{text}"


def bank_server(location: str) -> str | None:
    """The ``postgresql://`` DSN of a bank on a PostgreSQL server (a ``postgresql://``, ``postgres://`` or
    ``postgresql+psycopg://`` URL, or libpq's ``key=value`` form, :func:`server_dsn`); ``None`` for a SQLite file or
    ``sqlite://`` URL. Any other ``scheme://`` is :class:`InputError`."""
    text = server_dsn(location)
    if "://" not in text:
        return None
    scheme, rest = text.split("://", 1)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return "postgresql://" + rest
    if scheme == "sqlite":
        return None
    raise InputError(
        f"a question bank is a SQLite file or a PostgreSQL server (postgresql://USER@HOST/DB), not a "
        f"{scheme}:// address"
    )


def sqlite_file_from(location: str, local: Callable[[str], str]) -> str:
    """``location`` with its SQLite file (a path, or the path of a ``sqlite:///`` URL) as ``local`` maps it; a
    server's DSN, an in-memory database and any other URL unchanged."""
    if "://" not in location:
        return local(location)
    prefix = "sqlite:///"
    if location.startswith(prefix) and location[len(prefix) :] not in ("", ":memory:"):
        return prefix + local(location[len(prefix) :])
    return location


def server_dsn(location: str) -> str:
    """``location`` as a URL when it is a libpq ``key=value`` connection string (``host=db dbname=evals``, as
    ``--postgres-dsn`` and the checkpointer take it), so that it is never taken for a file name; else unchanged."""
    keywords = None if "://" in location else _libpq_keywords(location)
    if not keywords:
        return location
    port = keywords.pop("port", None)
    return sa.engine.URL.create(
        "postgresql",
        username=keywords.pop("user", None),
        password=keywords.pop("password", None),
        host=keywords.pop("host", None),
        port=int(port) if port else None,
        database=keywords.pop("dbname", None),
        query=keywords,
    ).render_as_string(hide_password=False)


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
