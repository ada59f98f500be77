"""Augmentation node function: LLM rewrite of a material-analysis question into true/false statements
(LLMEval-3 section 2.1 and appendix A.2). Format checks of the output are done in code."""

from __future__ import annotations

import uuid as uuidlib

from prompts import load_prompt
from runtime.errors import ModelError
from runtime.services import Services
from state.llmeval import TFStatements
from stores.question_bank import Question

_NS = uuidlib.UUID("0b7e1d52-8a61-4c3f-b2f4-5d8e1a9c7e23")


def rewrite_material(svc: Services, q: Question) -> tuple[list[Question], str | None]:
    """``(true/false variants, problem)``: the teacher decomposes ``q``; counts and texts are checked in code."""
    messages = load_prompt("llmeval/teacher_rewrite").render(question=q.question, answer=q.answer)
    try:
        out = svc.llm("teacher").structured(TFStatements, messages, step="rewrite")
    except ModelError as exc:
        return [], f"rewrite failed: {exc}"
    if len(out.statements) != len(out.truths):
        return [], f"{len(out.statements)} statements but {len(out.truths)} truth values"
    texts = [s.strip() for s in out.statements]
    if not 2 <= len(texts) <= 5 or any(len(t) < 10 for t in texts) or len(set(texts)) != len(texts):
        return [], "need 2-5 distinct statements of at least 10 characters"
    variants = [Question(uuid=str(uuidlib.uuid5(_NS, f"{q.uuid}:{t}")), discipline=q.discipline,
                         sub_discipline=q.sub_discipline, qtype="true_false",
                         question=f"True or false? {t} Give your reason.", answer="true" if truth else "false",
                         explanation=f"Derived from the material-analysis question {q.uuid}.", source=q.source,
                         parent_uuid=q.uuid) for t, truth in zip(texts, out.truths)]
    return variants, None
