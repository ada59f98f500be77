"""The grader (seed 004, Appendix D.2.1 graders; Algorithm 1, lines 12 and 21).

Three outcomes (:mod:`state.verdicts`): correct, wrong, ungraded.

Math: the final number is compared in code with the reference answer, and the
grader model judges the reasoning and names the error type (Concept,
Misinterpret, Calculation, N/A); both must agree for a correct verdict
(Appendix C.1: binary correctness of final answer and solution process).
Long-form factual: atomic facts with supported/unsupported labels; the score is
the factual precision, the answer is correct when its status is ``complete``.
Instruction following / generic and follow-ups: the grader's verdict.

An empty answer is wrong without a call. Otherwise a grader that gives no usable
verdict after retries and one repair (``ModelError``) makes the answer
``ungraded`` with its reason: it is never graded by the code check alone and
never counted as wrong; the interview stops there (:mod:`graphs.interview`)
and resume re-judges it.

With ``judge_jury`` every answer is graded by each jury model and the majority
verdict counts (:func:`by_jury`); a vote without a majority leaves the answer
ungraded with ``graded_by`` ``split``: counted, never correct or wrong, and the
session stops there like at any ungraded answer (resume asks the jury again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.interview import checks
from dyneval.nodes.interview.interviewee import answer_single_turn
from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import Services, services_of
from dyneval.state.errors import ModelError
from dyneval.state.interview import FactGrade, FollowUpGrade, Grade, InterviewContext, InterviewState
from dyneval.state.judgecheck import SPLIT, jury_vote
from dyneval.state.verdicts import is_ungraded, outcome


def _facts_text(facts: list[dict[str, Any]]) -> str:
    return (
        "\n".join(f"- [{'supported' if f.get('supported') else 'unsupported'}] {f.get('fact', '')}" for f in facts)
        or "(none)"
    )


def _verdict(correct: bool | None, score: float | None, **fields: Any) -> dict[str, Any]:
    return {"verdict": outcome(correct), "correct": correct, "score": score, **fields}


def ungraded(exc: ModelError, words: int, **fields: Any) -> dict[str, Any]:
    """The record of an answer the grader could not grade (never counted for or against the target)."""
    return _verdict(
        None,
        None,
        error_type="N/A",
        graded_by="ungraded",
        words=words,
        reason=f"ungraded: the grader gave no usable verdict: {exc}"[:600],
        **fields,
    )


def _empty(words: int) -> dict[str, Any]:
    return _verdict(False, 0.0, error_type="N/A", graded_by="code", words=words, reason="empty answer")


def grade_response(
    svc: Services,
    seed: dict[str, Any],
    question: str,
    explanation: str,
    response: str,
    *,
    previous_facts: list[dict[str, Any]] | None = None,
    feedback: str = "",
    step: str = "grade",
    grader: RoleLLM | None = None,
) -> dict[str, Any]:
    """Grade one answer to a seed question: ``verdict``, ``correct``, ``score``, ``error_type``, ``reason``,
    ``graded_by``. ``grader`` replaces the grader role's model (a judge-check jury member)."""
    task = seed.get("task", "generic")
    grader = grader or svc.llm("grader")
    words = len(str(response or "").split())
    if not str(response or "").strip():
        return _empty(words)
    if task == "factual":
        return _grade_factual(grader, seed, question, response, previous_facts, feedback, step) | {"words": words}
    if task == "math":
        check = checks.check_math_answer(response, seed.get("answer", ""))
        messages = load_prompt("interview/grader_math").render(
            question=question,
            explanation=explanation or "none (no value was hidden)",
            solution=seed.get("solution") or "(none)",
            answer=seed.get("answer") or "(none)",
            response=response,
        )
    else:
        check = {"match": None}
        messages = load_prompt("interview/grader_generic").render(
            task=task,
            question=question,
            solution=seed.get("solution") or "(none)",
            answer=seed.get("answer") or "(none)",
            response=response,
        )
    try:
        g = grader.structured(Grade, messages, step=step)
    except ModelError as exc:
        return ungraded(exc, words, check=check)
    llm_ok, err, reason = bool(g.correct), checks.error_type(g.error_type), g.reason.strip()
    match = check.get("match")
    if match is None:
        correct, graded_by = llm_ok, "grader"
    else:
        correct, graded_by = bool(match) and llm_ok, "code+grader"
        if llm_ok and not match:
            reason = f"final answer {check.get('extracted')!r} differs from the reference. {reason}"
    if correct:
        err = "N/A"
    return _verdict(
        correct, 1.0 if correct else 0.0, error_type=err, reason=reason, graded_by=graded_by, check=check, words=words
    )


def _grade_factual(
    grader: Any,
    seed: dict[str, Any],
    question: str,
    response: str,
    previous_facts: list[dict[str, Any]] | None,
    feedback: str,
    step: str,
) -> dict[str, Any]:
    solution = seed.get("solution") or seed.get("answer") or ""
    if previous_facts:
        messages = load_prompt("interview/grader_facts_update").render(
            question=question,
            solution=solution,
            feedback=feedback or "(none)",
            previous_facts=_facts_text(previous_facts),
            correction=response,
        )
    else:
        messages = load_prompt("interview/grader_facts").render(question=question, solution=solution, response=response)
    try:
        out = grader.structured(FactGrade, messages, step=step)
    except ModelError as exc:
        return ungraded(exc, 0)
    facts = [{"fact": f.fact.strip(), "supported": bool(f.supported)} for f in out.facts if f.fact.strip()]
    complete = bool(out.complete)
    status = checks.factual_status(facts, complete)
    p = checks.precision(facts)
    unsupported = [f["fact"] for f in facts if not f["supported"]]
    reason = f"{sum(f['supported'] for f in facts)}/{len(facts)} facts supported; " + (
        "covers the main points" if complete else "misses main points"
    )
    return _verdict(
        status == "complete",
        round(p, 4),
        error_type="N/A" if status == "complete" else ("Concept" if unsupported else "N/A"),
        reason=reason,
        graded_by="grader",
        facts=facts,
        complete=complete,
        status=status,
    )


def grade_followup(
    svc: Services, seed: dict[str, Any], cur: dict[str, Any], response: str, *, grader: RoleLLM | None = None
) -> dict[str, Any]:
    """Grade a follow-up answer against the interviewer's expected answer (section 3.2); ``grader``: see
    :func:`grade_response`."""
    words = len(str(response or "").split())
    if not str(response or "").strip():
        return _empty(words)
    messages = load_prompt("interview/grader_followup").render(
        followup_type=cur.get("type", ""),
        seed_question=seed.get("question", ""),
        solution=seed.get("solution") or seed.get("answer") or "(none)",
        question=cur["text"],
        expected=cur.get("expected") or "(not given)",
        response=response,
    )
    try:
        g = (grader or svc.llm("grader")).structured(FollowUpGrade, messages, step=f"grade:q{cur['q']}")
    except ModelError as exc:
        return ungraded(exc, words)
    return _verdict(
        bool(g.correct),
        1.0 if g.correct else 0.0,
        error_type="N/A",
        reason=g.reason.strip(),
        graded_by="grader",
        words=words,
    )


def by_jury(
    svc: Services, jury: list[str] | None, grade_one: Callable[[RoleLLM | None], dict[str, Any]]
) -> dict[str, Any]:
    """``grade_one`` by the grader role, or by each ``jury`` model (``--judge-jury``) combined by majority vote
    (:func:`state.judgecheck.jury_vote`): the majority member's record, its reason prefixed with the tally; a
    vote without a majority is ungraded with ``graded_by`` ``split``; no graded member: the first one's
    ungraded record. ``jury`` holds the tally."""
    if not jury:
        return grade_one(None)
    vote, keep, tally = jury_vote([grade_one(svc.model(ref, role="grader")) for ref in jury])
    if vote == SPLIT:
        return _verdict(
            None,
            None,
            error_type="N/A",
            graded_by="split",
            words=keep.get("words", 0),
            reason=f"split: the grader jury has no majority ({tally})",
            jury=tally,
        )
    return {**keep, "reason": f"jury ({tally}): {keep['reason']}"[:600], "jury": tally}


def verdict_text(result: dict[str, Any]) -> str:
    """How a verdict reads in the transcript."""
    if is_ungraded(result):
        return "ungraded"
    if "status" in result:
        return f"{result['status']}, precision {result['score']:.2f}"
    return "correct" if result["correct"] else f"not correct ({result['error_type']})"


def grade(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """Grade the latest answer; record one interaction; settle the seed outcome when it is final.

    An ungraded answer is recorded as such with a note that the session stops there (the feedback and the
    follow-ups of Algorithm 1 depend on the verdict); ``stopped`` holds the reason.
    """
    ctx = runtime.context
    svc = services_of(ctx)
    seed, cur, response = state["seed"], state["current"], state.get("last_answer", "")
    step = f"grade:q{cur['q']}:try{cur['attempt']}"
    if cur["kind"] == "followup":
        result = by_jury(svc, ctx.judge_jury, lambda g: grade_followup(svc, seed, cur, response, grader=g))
    else:
        previous = [i for i in state.get("interactions", []) if i["q"] == cur["q"] and i.get("facts")]
        fb = [f["text"] for f in state.get("feedbacks", []) if f["q"] == cur["q"]]
        result = by_jury(
            svc,
            ctx.judge_jury,
            lambda g: grade_response(
                svc,
                seed,
                cur["text"],
                state.get("modification", {}).get("explanation", ""),
                response,
                previous_facts=previous[-1]["facts"] if previous else None,
                feedback=fb[-1] if fb else "",
                step=step,
                grader=g,
            ),
        )
    record = {
        "q": cur["q"],
        "kind": cur["kind"],
        "type": cur.get("type", "seed"),
        "attempt": cur["attempt"],
        "answer": response,
        **result,
    }
    turn = {
        "speaker": "grader",
        "kind": "grade",
        "q": cur["q"],
        "attempt": cur["attempt"],
        "text": f"{verdict_text(result)}: {result['reason']}"[:600],
    }
    update: dict[str, Any] = {"last_grade": record, "interactions": [record], "transcript": [turn]}
    if is_ungraded(result):
        split = " (the grader jury split)" if result.get("graded_by") == "split" else ""
        why = (
            f"session stopped at question {cur['q']} try {cur['attempt']}: the answer is ungraded{split} "
            f"(resume re-judges it)"
        )
        update["stopped"] = why
        update["transcript"] = [
            turn,
            {"speaker": "system", "kind": "note", "q": cur["q"], "attempt": cur["attempt"], "text": why},
        ]
    elif cur["kind"] == "seed" and (result["correct"] or cur["attempt"] > ctx.max_retries):
        update["seed_solved"] = bool(result["correct"])
        update["seed_error_type"] = result["error_type"]
    return update


def single_turn_judge(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """LLM-as-a-Judge baseline (section 5.1, Table 2 "Judge"): the unmodified question, one turn, graded."""
    ctx = runtime.context
    if not ctx.single_turn_judge:
        return {"single_turn": {"skipped": "disabled"}}
    if ctx.interviewee == "human":
        return {"single_turn": {"skipped": "human interviewee (the original question would spoil the interview)"}}
    seed = state["seed"]
    response = answer_single_turn(ctx, seed.get("task", "generic"), seed["question"])
    svc = services_of(ctx)
    result = by_jury(
        svc,
        ctx.judge_jury,
        lambda g: grade_response(svc, seed, seed["question"], "", response, step="single_turn:grade", grader=g),
    )
    result.pop("check", None)
    note = {
        "speaker": "system",
        "kind": "note",
        "q": 0,
        "attempt": 0,
        "text": f"single-turn judge on the unmodified question: {verdict_text(result)} (score {result['score']})",
    }
    return {"single_turn": {"answer": response, **result}, "transcript": [note]}
