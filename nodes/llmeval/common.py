"""Helpers shared by the llmeval nodes: the question bank of a run, where its index and its exam server's
signing secret live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dyneval.nodes.llmeval.bankio import import_file
from dyneval.runtime.driver_folder import local_path
from dyneval.runtime.services import Services, services_of
from dyneval.samples import sample
from dyneval.stores.bank_location import server_dsn, sqlite_file_from
from dyneval.stores.question_bank import QuestionBank


def bank_location(ctx: Any, svc: Services) -> str:
    """``ctx.bank_db``, else the configured PostgreSQL DSN, else a SQLite file shared by the runs under ``--out``; a
    DSN in libpq's ``key=value`` form as its URL, so every check of "a server or a file" reads it as a server; a
    relative SQLite file (a path or a ``sqlite:///`` URL) is the driver's on a Ray worker."""
    if getattr(ctx, "bank_db", ""):
        return sqlite_file_from(server_dsn(str(ctx.bank_db)), local_path)
    if svc.config.stores.postgres_dsn:
        return server_dsn(svc.config.stores.postgres_dsn)
    return str(svc.cache_dir / "llmeval_bank.sqlite")


#: The shipped original sample bank (36 questions over 10 disciplines).
SAMPLE_BANK = sample("llmeval", "bank.jsonl")


def bank_of(ctx: Any) -> QuestionBank:
    """The run's :class:`QuestionBank` (opened once per run and location).

    With ``ctx.sample_if_empty`` an empty bank gets the shipped sample (exact-duplicate
    checks only), so the graph also runs on its own, e.g. stepping through a session in
    Studio; the command line turns it off and imports ``--bank`` (or the sample) itself.
    """
    svc = services_of(ctx)
    location = bank_location(ctx, svc)

    def open_bank() -> QuestionBank:
        bank = QuestionBank(location)
        if getattr(ctx, "sample_if_empty", False) and bank.count(active_only=False) == 0:
            import_file(bank, SAMPLE_BANK, defer_index=True)
        return bank

    return svc.cached(f"llmeval:bank:{location}", open_bank)


def chroma_folder(ctx: Any, svc: Services) -> Path:
    """Where the bank's near-duplicate index lives: next to a SQLite bank, else in the run's data folder."""
    location = bank_location(ctx, svc)
    if "://" in location:
        return svc.data_dir / "llmeval_chroma"
    return Path(location).parent / "llmeval_chroma"


def secret_file(ctx: Any, svc: Services) -> Path:
    """Where the exam server's token signing secret lives, never inside the bank (which may be copied or shared):
    beside a SQLite bank (``BANK.secret``), else in the cache folder under the bank's id."""
    location = bank_location(ctx, svc)
    if "://" in location:
        return svc.cache_dir / f"llmeval_exam_{bank_of(ctx).bank_id()}.secret"
    return Path(location).with_name(Path(location).name + ".secret")
