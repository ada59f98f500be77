"""Shared helpers of the JudgeAgent nodes: seeded randomness, question rendering."""

from __future__ import annotations

from typing import Any

from dyneval.runtime.llm import current_unit
from dyneval.state.judgeagent import BaseQuestion
from dyneval.stores.choices import LETTERS


def seed_for(seed: int, *parts: Any) -> str:
    """``f"{seed}:{unit_id}:..."``: a random seed reproducible per unit and step."""
    return ":".join(str(p) for p in (seed, current_unit(), *parts))


def options_block(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {opt}" for i, opt in enumerate(options))


def question_text(q: BaseQuestion) -> str:
    """The question as the target sees it (options lettered)."""
    return f"{q.question}\n{options_block(q.options)}" if q.options else q.question


def clip(text: str, limit: int) -> str:
    text = str(text or "").strip()
    return text if len(text) <= limit else text[: limit - 7] + " (...)"
