"""Helpers shared by the llmeval nodes: the question bank of a run and extra model handles."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from nodes.llmeval.bankio import import_file
from runtime.llm import RetryPolicy, RoleLLM
from runtime.models import build_chat_model, model_label
from runtime.services import Services, services_of
from state.config import parse_model_ref
from stores.question_bank import QuestionBank


def bank_location(ctx: Any, svc: Services) -> str:
    """``ctx.bank_db``, else the configured PostgreSQL DSN, else a SQLite file shared by the runs under ``--out``."""
    if getattr(ctx, "bank_db", ""):
        return str(ctx.bank_db)
    if svc.config.stores.postgres_dsn:
        return svc.config.stores.postgres_dsn
    return str(svc.cache_dir / "llmeval_bank.sqlite")


#: The shipped original sample bank (36 questions over 10 disciplines).
SAMPLE_BANK = Path(__file__).resolve().parents[2] / "samples" / "llmeval" / "bank.jsonl"


def bank_of(ctx: Any) -> QuestionBank:
    """The run's :class:`QuestionBank` (opened once per run and location).

    With ``ctx.sample_if_empty`` an empty bank gets the shipped sample (exact-duplicate
    checks only), so the graph also runs on its own, e.g. stepping through a session in
    Studio; ``run.py`` turns it off and imports ``--bank`` (or the sample) itself.
    """
    svc = services_of(ctx)
    location = bank_location(ctx, svc)

    def open_bank() -> QuestionBank:
        bank = QuestionBank(location)
        if getattr(ctx, "sample_if_empty", False) and bank.count(active_only=False) == 0:
            import_file(bank, SAMPLE_BANK)
        return bank

    return svc.cached(f"llmeval:bank:{location}", open_bank)


def chroma_folder(ctx: Any, svc: Services) -> Path:
    """Where the bank's near-duplicate index lives: next to a SQLite bank, else in the run's data folder."""
    location = bank_location(ctx, svc)
    if "://" in location:
        return svc.data_dir / "llmeval_chroma"
    return Path(location).parent / "llmeval_chroma"


def extra_llm(svc: Services, role: str, ref: str) -> RoleLLM:
    """A call layer for a model that is not one of the runtime roles (the reference model of equation 2).

    Logged under ``role`` in the event log like any other call; tests replace it
    through ``chat_overrides[role]``.
    """
    if role in svc.chat_overrides:
        return svc.llm(role)

    def build() -> RoleLLM:
        spec = parse_model_ref(ref, svc.config.models)
        policy = RetryPolicy(max_retries=spec.max_retries)
        if svc.retry_sleep is not None:
            policy.sleep = svc.retry_sleep
        return RoleLLM(role=role, model_label=model_label(spec), chat=build_chat_model(spec), events=svc.events,
                       policy=policy, structured_method=spec.structured_method,
                       slots=threading.BoundedSemaphore(spec.concurrency))

    return svc.cached(f"llmeval:llm:{role}:{ref}", build)


def extra_label(svc: Services, role: str, ref: str) -> str:
    if role in svc.chat_overrides:
        return f"fake:{role}"
    return model_label(parse_model_ref(ref, svc.config.models))
