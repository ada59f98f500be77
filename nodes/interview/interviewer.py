"""The interviewer's duties (seed 004, section 3.1): question modification, feedback, follow-ups, summaries.

Each duty can be switched off in the context (``modify``, ``feedback``,
``followups``, ``summarize``): the roles are modular and pluggable (section 3.1).
The interviewer is the ``evaluator`` role.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.interview import checks
from dyneval.prompts import load_prompt
from dyneval.runtime.services import services_of
from dyneval.state.errors import ModelError
from dyneval.state.interview import Feedback, FollowUp, InterviewContext, InterviewState, ModifiedQuestion, Turn

INTERVIEWER = "evaluator"


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text or "").lower()))


def strategy_for(task: str, ctx: InterviewContext) -> str:
    """The modification strategy: ``none`` when the duty is off; ``auto`` picks by task (Appendix C.1)."""
    if not ctx.modify or ctx.modification == "none":
        return "none"
    if ctx.modification != "auto":
        return ctx.modification
    return {"math": "math", "factual": "factual"}.get(task, "paraphrase")


def modification_problem(strategy: str, original: str, modified: str, solution: str = "") -> str | None:
    """Why a modified question is unusable (None = usable); checked in code (Appendix C.4.1 criteria).

    Any strategy: not empty, not the original, and not a copy of the reference solution
    (8 consecutive words of it give the answer away). Math: at least one given value
    hidden and no new value introduced.
    """
    if not modified.strip():
        return "empty question"
    if _norm(modified) == _norm(original):
        return "identical to the original question"
    if solution and len(_norm(solution).split()) > 8 and checks.leaks_answer(modified, solution):
        return "copies the reference solution"
    if strategy == "math":
        before = [v for v, _ in checks.numbers_in(original)]
        after = [v for v, _ in checks.numbers_in(modified)]
        if before and len(after) >= len(before):
            return "no given value was hidden"
        if any(not any(checks.same_number(a, b) for b in before) for a in after):
            return "introduces a value that is not in the original problem"
    return None


def modify_question(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """Question modification (section 3.1.1, Appendix D.1): math unknowns, new factual question, paraphrase.

    The original is kept in ``seed``; an invalid or failed modification falls back
    to the original question and is recorded in ``modification.status``.
    """
    ctx = runtime.context
    seed = state["seed"]
    strategy = strategy_for(seed.get("task", "generic"), ctx)
    info: dict[str, Any] = {"strategy": strategy, "original": seed["question"], "explanation": "", "status": "off"}
    question = seed["question"]
    if strategy != "none":
        prompt = f"interview/interviewer_modify_{strategy}"
        values = {
            "question": seed["question"],
            "solution": seed.get("solution") or "(none)",
            "answer": seed.get("answer") or "(none)",
        }
        prompt_obj = load_prompt(prompt)
        messages = prompt_obj.render(**{k: v for k, v in values.items() if k in prompt_obj.variables})
        try:
            out = services_of(ctx).llm(INTERVIEWER).structured(ModifiedQuestion, messages, step="modify")
            problem = modification_problem(strategy, seed["question"], out.question, seed.get("solution") or "")
            if problem:
                info.update(status="rejected", reason=problem, proposed=out.question)
            else:
                question = out.question.strip()
                info.update(status="modified", explanation=out.explanation.strip())
        except ModelError as exc:
            info.update(status="failed", reason=str(exc))
    note = (
        f"question modification: {strategy} -> {info['status']}"
        + (f" ({info.get('reason')})" if info.get("reason") else "")
        + (f"; note: {info['explanation']}" if info["explanation"] else "")
    )
    turns = [
        {"speaker": "system", "kind": "note", "q": 0, "attempt": 0, "text": note[:800]},
        {"speaker": "interviewer", "kind": "question", "q": 0, "attempt": 1, "text": question},
    ]
    return {
        "modification": info,
        "transcript": turns,
        "current": {"q": 0, "kind": "seed", "type": "seed", "text": question, "expected": "", "attempt": 1},
    }


# -- feedback ----------------------------------------------------------------------------------


def _feedback_messages(state: InterviewState, level: int, previous: list[str]) -> tuple[str, list]:
    """(prompt name, messages) of the feedback generator for the current question."""
    seed, cur, grade = state["seed"], state["current"], state["last_grade"]
    task = seed.get("task", "generic")
    prev = "\n".join(f"- {p}" for p in previous) or "(none)"
    response = state.get("last_answer", "")
    if cur["kind"] == "seed" and task == "math":
        return "math", load_prompt("interview/interviewer_feedback_math").render(
            question=cur["text"],
            explanation=state.get("modification", {}).get("explanation") or "(none)",
            solution=seed.get("solution") or "(none)",
            answer=seed.get("answer") or "(none)",
            evaluation=f"{grade['error_type']}: {grade['reason']}",
            previous_feedback=prev,
            response=response,
            level=str(level),
        )
    if cur["kind"] == "seed" and task == "factual":
        facts = (
            "\n".join(
                f"- [{'supported' if f['supported'] else 'unsupported'}] {f['fact']}" for f in grade.get("facts", [])
            )
            or grade["reason"]
        )
        return "factual", load_prompt("interview/interviewer_feedback_factual").render(
            question=cur["text"],
            solution=seed.get("solution") or "(none)",
            status=grade.get("status", ""),
            evaluation=facts,
            previous_feedback=prev,
            response=response,
            level=str(level),
        )
    answer = cur.get("expected") if cur["kind"] == "followup" else seed.get("answer")
    return "generic", load_prompt("interview/interviewer_feedback_generic").render(
        task=task if cur["kind"] == "seed" else f"follow-up ({cur.get('type')})",
        question=cur["text"],
        solution=seed.get("solution") or "(none)",
        answer=answer or "(none)",
        evaluation=f"{grade['error_type']}: {grade['reason']}",
        previous_feedback=prev,
        response=response,
        level=str(level),
    )


def reference_for_leaks(state: InterviewState) -> str:
    """The text feedback must not disclose: the reference final answer (or expected follow-up answer)."""
    seed, cur = state["seed"], state["current"]
    if cur["kind"] == "followup":
        return cur.get("expected") or ""
    return seed.get("answer") or (seed.get("solution") if seed.get("task") == "factual" else "") or ""


def give_feedback(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """Feedback on a wrong answer (section 3.1.2, Appendix D.2.1), then the interviewee retries.

    The hint level rises with every retry of the same question. The reference
    answer is checked for in code: a leaking draft is regenerated once, and
    redacted if it still leaks; all of it is recorded in ``feedbacks``.
    """
    ctx = runtime.context
    cur, grade = state["current"], state["last_grade"]
    previous = [f["text"] for f in state.get("feedbacks", []) if f["q"] == cur["q"]]
    level = len(previous) + 1
    reference = reference_for_leaks(state)
    record: dict[str, Any] = {
        "q": cur["q"],
        "attempt": cur["attempt"],
        "level": level,
        "leaked": False,
        "regenerated": False,
        "redacted": False,
        "repeated": False,
    }
    if not ctx.feedback:
        text = str(load_prompt("interview/interviewee_plain_retry").render()[0].content).strip()
        record.update(source="plain", kind="none")
        kind_turn = "retry"
    else:
        kind_turn = "feedback"
        name, messages = _feedback_messages(state, level, previous)
        llm = services_of(ctx).llm(INTERVIEWER)
        try:
            out = llm.structured(Feedback, messages, step=f"feedback:q{cur['q']}:level{level}")
            text, kind, source = out.feedback.strip(), checks.feedback_kind(out.kind), f"interviewer:{name}"
            if checks.leaks_answer(text, reference):
                record.update(leaked=True, regenerated=True, first_draft=text)
                retry = [*messages, *load_prompt("interview/interviewer_feedback_leak").render(draft=text)]
                try:
                    out = llm.structured(Feedback, retry, step=f"feedback:q{cur['q']}:level{level}:no-leak")
                    text, kind = out.feedback.strip(), checks.feedback_kind(out.kind)
                except ModelError:
                    pass  # keep the first draft; it is redacted below
            if not text:
                raise ModelError("empty feedback")
        except ModelError as exc:
            text = str(
                load_prompt("interview/interviewer_feedback_fallback")
                .render(
                    level=str(level), error_type=grade.get("error_type", "N/A"), reason=grade.get("reason", "")[:300]
                )[0]
                .content
            ).strip()
            kind, source = "error_identification", "fallback"
            record["fallback_reason"] = str(exc)[:300]
        if checks.leaks_answer(text, reference):
            record.update(leaked=True, redacted=True)
            text = checks.redact(text, reference)
        record.update(source=source, kind=kind, repeated=checks.repeats_previous(text, previous))
    record["text"] = text
    turn = {"speaker": "interviewer", "kind": kind_turn, "q": cur["q"], "attempt": cur["attempt"] + 1, "text": text}
    return {"feedbacks": [record], "transcript": [turn], "current": {**cur, "attempt": cur["attempt"] + 1}}


# -- follow-up questions -------------------------------------------------------------------------


def _history(state: InterviewState, q: int) -> str:
    lines = []
    for t in state.get("transcript", []):
        if t.get("q") == q and t.get("speaker") in ("interviewer", "interviewee"):
            lines.append(f"{t['speaker']}: {str(t.get('text', ''))[:700]}")
    return "\n".join(lines) or "(none)"


def ask_followup(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """A follow-up question by task and outcome (section 3.1.3, Table 1, Appendix D.2.2)."""
    ctx = runtime.context
    seed, cur = state["seed"], state["current"]
    task = seed.get("task", "generic")
    solved = bool(state.get("seed_solved"))
    q = cur["q"] + 1
    rng = random.Random(f"{ctx.seed}:{state.get('unit_id', '')}:{q}")
    ftype = checks.followup_type(task, solved, rng)
    asked = [f["question"] for f in state.get("followups", []) if f.get("question")]
    asked_text = "\n".join(f"- {a}" for a in asked) or "(none)"
    seed_answers = [i for i in state.get("interactions", []) if i["q"] == 0]
    last_seed_answer = seed_answers[-1]["answer"] if seed_answers else ""
    question0 = next(
        (t["text"] for t in state.get("transcript", []) if t.get("q") == 0 and t.get("kind") == "question"),
        seed["question"],
    )
    solution = seed.get("solution") or "(none)"
    if ftype == "rationale":
        name, values = (
            "rationale",
            dict(
                question=question0,
                answer=seed.get("answer") or "(none)",
                solution=solution,
                response=last_seed_answer,
                asked=asked_text,
            ),
        )
    elif ftype == "clarification":
        name, values = (
            "clarification",
            dict(
                question=question0,
                answer=seed.get("answer") or "(none)",
                solution=solution,
                history=_history(state, 0),
                error_type=state.get("seed_error_type") or "N/A",
                asked=asked_text,
            ),
        )
    elif ftype == "additional_facts":
        facts = seed_answers[-1].get("facts", []) if seed_answers else []
        unsupported = "\n".join(f"- {f['fact']}" for f in facts if not f["supported"]) or "(none listed)"
        name, values = (
            "facts",
            dict(
                question=question0,
                solution=solution,
                response=last_seed_answer,
                unsupported=unsupported,
                asked=asked_text,
            ),
        )
    else:
        name, values = (
            "instruction",
            dict(question=question0, response=last_seed_answer, followup_type=ftype, asked=asked_text),
        )
    messages = load_prompt(f"interview/interviewer_followup_{name}").render(**values)
    entry: dict[str, Any] = {"q": q, "type": ftype, "seed_solved": solved}
    try:
        out = services_of(ctx).llm(INTERVIEWER).structured(FollowUp, messages, step=f"followup:q{q}")
        text = out.question.strip()
        if not text:
            raise ModelError("empty follow-up question")
        if any(_norm(text) == _norm(a) for a in [*asked, question0]):
            raise ModelError("the follow-up repeats an earlier question")
        entry.update(status="asked", question=text, expected=out.answer.strip())
    except ModelError as exc:
        entry.update(status="failed", reason=str(exc)[:300])
        note = {
            "speaker": "system",
            "kind": "note",
            "q": q,
            "attempt": 0,
            "text": f"follow-up ({ftype}) could not be generated: {str(exc)[:200]}",
        }
        return {"followups": [entry], "transcript": [note]}
    turn = {"speaker": "interviewer", "kind": "follow-up", "q": q, "attempt": 1, "text": text}
    return {
        "followups": [entry],
        "transcript": [turn],
        "current": {
            "q": q,
            "kind": "followup",
            "type": ftype,
            "text": text,
            "expected": entry["expected"],
            "attempt": 1,
        },
    }


# -- session summary ---------------------------------------------------------------------------


def transcript_text(transcript: Sequence[Turn], limit: int = 900) -> str:
    """The transcript as readable lines (also used in the report)."""
    lines = []
    for t in transcript:
        who = {"interviewer": "Interviewer", "interviewee": "Interviewee", "grader": "Grader"}.get(
            t.get("speaker", ""), "Note"
        )
        text = str(t.get("text", ""))
        if limit and len(text) > limit:
            text = text[:limit] + " ..."
        tag = f"[{t.get('kind', '')}, q{t.get('q', 0)}" + (f" try {t['attempt']}" if t.get("attempt") else "") + "]"
        lines.append(f"{who} {tag}: {text}")
    return "\n".join(lines)


def code_summary(state: InterviewState) -> str:
    """A factual summary built from the graded interactions (used when the LLM summary is off or fails)."""
    inter = state.get("interactions", [])
    seed_tries = [i for i in inter if i["q"] == 0]
    fups = [i for i in inter if i["kind"] == "followup"]
    solved = state.get("seed_solved")
    if solved:
        head = f"Solved the seed question at interaction {seed_tries[-1]['attempt'] if seed_tries else '?'}."
    else:
        types = sorted({i["error_type"] for i in seed_tries if not i["correct"]})
        head = f"Did not solve the seed question in {len(seed_tries)} interaction(s); errors: {', '.join(types)}."
    fb = len([f for f in state.get("feedbacks", []) if f["q"] == 0])
    parts = [head, f"Received {fb} feedback message(s)."]
    if fups:
        parts.append(
            f"Answered {sum(1 for i in fups if i['correct'])}/{len(fups)} follow-up answer(s) correctly "
            f"({', '.join(sorted({i['type'] for i in fups}))})."
        )
    return " ".join(parts)


def summarize_session(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """Session summary (section 3.2, Appendix D.3 "Session Summarize Prompt")."""
    ctx = runtime.context
    if not ctx.summarize:
        return {"session_summary": code_summary(state), "summary_source": "code"}
    messages = load_prompt("interview/interviewer_session_summary").render(
        transcript=transcript_text(state.get("transcript", []), limit=600)
    )
    text = services_of(ctx).llm(INTERVIEWER).text(messages, step="summary").strip()
    if not text:
        return {"session_summary": code_summary(state), "summary_source": "code (empty LLM summary)"}
    return {"session_summary": text, "summary_source": "interviewer"}
