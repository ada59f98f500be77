"""Session node: allocate the questions of one exam (LLMEval-3 section 2.2, Dynamic Question Sampling)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.llmeval.common import bank_of
from dyneval.runtime.llm import current_unit
from dyneval.runtime.services import services_of
from dyneval.state.llmeval import PARADIGMS, LLMEvalContext, LLMEvalState


def open_session(state: LLMEvalState, runtime: Runtime[LLMEvalContext]) -> dict[str, Any]:
    """Create (or reopen) the session: adaptive (no slot allocated yet, see :mod:`nodes.llmeval.adaptive`) or
    N questions sampled without replacement, seeded by seed + unit id,
    never repeating a question the model met in its earlier sessions until the bank is exhausted, in a
    fixed delivery order; few-shot examples drawn from outside the session. Idempotent per session id."""
    ctx = runtime.context
    svc = services_of(ctx)
    bank = bank_of(ctx)
    unit = current_unit(state.get("session_id") or "session")
    session_id = state.get("session_id") or unit
    paradigm = state.get("paradigm") or ctx.paradigm
    if paradigm not in PARADIGMS:
        raise ValueError(f"unknown paradigm {paradigm!r}; use one of {', '.join(PARADIGMS)}")
    model = state.get("model") or svc.model_label("target")
    if ctx.adaptive or bank.adaptive_state(session_id) is not None:
        session = bank.create_adaptive_session(
            session_id,
            model=model,
            paradigm=paradigm,
            seed=f"{ctx.seed}:{unit}",
            irt_model=ctx.irt_model,
            target_se=float(ctx.target_se),
            max_items=int(ctx.max_items),
            exposure_k=int(ctx.exposure_k),
            run_id=str(ctx.run_dir or ""),
        )
        quota = bank.quota(session_id)
        return {
            "session_id": session_id,
            "model": session["model"],
            "paradigm": session["paradigm"],
            "adaptive": True,
            "allocated": quota["allocated"],
            "answered": quota["completed"],
        }
    session = bank.create_session(
        session_id,
        model=model,
        n=int(ctx.questions),
        seed=f"{ctx.seed}:{unit}",
        paradigm=paradigm,
        stratified=bool(ctx.stratified),
        fewshot_k=int(ctx.fewshot_k) if paradigm == "few-shot" else 0,
        run_id=str(ctx.run_dir or ""),
    )
    update: dict[str, Any] = {
        "session_id": session_id,
        "model": session["model"],
        "paradigm": session["paradigm"],
        "allocated": session["n"],
        "answered": bank.quota(session_id)["completed"],
    }
    if ctx.reference_model:
        ref_id = f"{session_id}#ref"
        bank.create_mirror(
            ref_id, session_id, model=svc.model_label("reference", ctx.reference_model), run_id=str(ctx.run_dir or "")
        )
        update["reference_session_id"] = ref_id
        update["reference_answered"] = bank.quota(ref_id)["completed"]
    return update
