"""Examinee nodes: the target (and the reference model) answer the session's questions in order.

Each question reaches the model through :meth:`QuestionBank.next_item`, whose
payload is whitelisted (no answer, no explanation); the reply is stored with
:meth:`QuestionBank.submit`, which accepts exactly one answer for the pending
slot (section 2.2, inner layer). The same two calls back the exam server.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from dyneval.nodes.llmeval.common import bank_of
from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import services_of
from dyneval.state.llmeval import LLMEvalContext, LLMEvalState
from dyneval.stores.bank_sessions import QuotaError, question_text
from dyneval.stores.question_bank import QuestionBank


def fewshot_examples(bank: QuestionBank, session: dict[str, Any]) -> str:
    """Worked examples of the few-shot paradigm (Figure 9): questions from outside the session with answers."""
    blocks = []
    for uid in session.get("fewshot") or []:
        q = bank.get(uid)
        if q is None:
            continue
        shown = question_text(q.question, q.options)
        answer = q.answer + (f". {q.explanation}" if q.explanation else "")
        blocks.append(f"Question: {shown}\nAnswer: {answer}")
    return "\n\n".join(blocks)


def build_messages(payload: dict[str, Any], paradigm: str, examples: str = "") -> list[BaseMessage]:
    """The examinee's prompt for one delivered question under a paradigm (section 3.1, appendix B)."""
    if paradigm == "few-shot":
        return load_prompt("llmeval/examinee_few_shot").render(examples=examples, question=payload["question"])
    if paradigm == "cot":
        return load_prompt("llmeval/examinee_cot").render(question=payload["question"])
    return load_prompt("llmeval/examinee_zero_shot").render(question=payload["question"])


def answer_in_order(bank: QuestionBank, session_id: str, llm: RoleLLM, limit: int) -> int:
    """Deliver up to ``limit`` questions in order to ``llm`` and store its answers; returns how many."""
    session = bank.session(session_id) or {}
    paradigm = session.get("paradigm", "zero-shot")
    examples = fewshot_examples(bank, session) if paradigm == "few-shot" else ""
    done = 0
    for _ in range(limit):
        try:
            item = bank.next_item(session_id)
        except QuotaError as exc:
            if exc.kind == "exhausted":
                break
            raise
        reply = llm.text(build_messages(item, paradigm, examples), step="answer")
        bank.submit(session_id, item["position"], reply)
        done += 1
    return done


def answer_questions(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """The target answers the next ``answer_batch`` questions of its session (fixed order, one at a time)."""
    ctx = runtime.context
    bank = bank_of(ctx)
    answer_in_order(bank, state["session_id"], services_of(ctx).llm("target"), int(ctx.answer_batch))
    return {"answered": bank.quota(state["session_id"])["completed"]}


def answer_reference(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """The reference model replays the same questions in the same order (equation 2's S_ref)."""
    ctx = runtime.context
    bank = bank_of(ctx)
    ref_id = state["reference_session_id"]
    answer_in_order(bank, ref_id, services_of(ctx).model(ctx.reference_model, role="reference"), int(ctx.answer_batch))
    return {"reference_answered": bank.quota(ref_id)["completed"]}
