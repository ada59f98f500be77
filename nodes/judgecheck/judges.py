"""The judging steps a judge check runs, by name, each through the protocol's own function and prompt.

* ``llmeval.judge`` - :func:`nodes.llmeval.judge.judge_item` (Figure 11 rubric, 0-3 stars, code band for
  true/false and multiple choice);
* ``interview.grader`` - :func:`nodes.interview.grader.grade_response` (Appendix D.2.1 graders by task);
* ``judgeagent.judge`` - :func:`nodes.judgeagent.judging.grade_reply` (option letters in code, exact match,
  else the evaluator with the phrase or free-form prompt; Benchmark Grading and Validation both use it);
* ``atad.orchestrator`` - :func:`nodes.atad.orchestrator.judge_problem` (the initial validation of Appendix
  D.2.1, or D.2.3 for a problem with a difficulty ``level``): approved / rejected;
* ``atad.reviewer`` - :func:`nodes.atad.evaluation.review_problem` (the quality review of section 4.4, Table 3):
  the 1-5 score of the context's ``aspect`` (validity, coherence or fairness);
* ``pairwise`` - :func:`judge_pair`, a preference judge over two outputs (``judgecheck/evaluator_pairwise``),
  shown in either order (LLMBar section 3, MT-Bench section 3.3: position bias); a multi-turn pair (two
  conversations) is judged on its last turn in the context of the whole conversation
  (``judgecheck/evaluator_pairwise_multiturn``, as MT-Bench's multi-turn pairwise judge).

The judge model is the evaluator role's (or a jury member), whatever role the step has in its protocol
(the interview's grader and ATAD's orchestrator default to the evaluator there too). Each returns
``{"value", "reason", "how"}``: ``value`` on the judge's scale (:data:`state.judgecheck.SCALES`) in the item's
original numbering, ``None`` when the judge gave no usable verdict after retries and one repair (ungraded, never
a disagreement).
"""

from __future__ import annotations

from typing import Any

from dyneval.nodes.atad.evaluation import review_problem
from dyneval.nodes.atad.orchestrator import judge_problem
from dyneval.nodes.interview.grader import grade_response
from dyneval.nodes.judgeagent.common import question_text as judgeagent_question
from dyneval.nodes.judgeagent.judging import answer_format, grade_reply
from dyneval.nodes.llmeval.bankio import question_type
from dyneval.nodes.llmeval.judge import judge_item
from dyneval.prompts import load_prompt
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.services import Services
from dyneval.state.errors import ModelError
from dyneval.state.judgeagent import BaseQuestion
from dyneval.state.judgecheck import JudgeCheckContext, LabelledItem, PairwiseVerdict, Turn

#: The pairwise judge's answer for the output shown first / second, in each order -> original numbering.
_ORIGINAL = {("original", "A"): "1", ("original", "B"): "2", ("swapped", "A"): "2", ("swapped", "B"): "1"}


def judge_pair(llm: RoleLLM, item: LabelledItem, order: str, *, step: str) -> dict[str, Any]:
    """Which output (or conversation) is better, the first one shown first (``original``) or second
    (``swapped``)."""
    if item.conversation_1:
        a, b = (item.conversation_1, item.conversation_2)[:: 1 if order == "original" else -1]
        messages = load_prompt("judgecheck/evaluator_pairwise_multiturn").render(
            conversation_a=conversation_text(a, "A"), conversation_b=conversation_text(b, "B")
        )
    else:
        first, second = (item.output_1, item.output_2) if order == "original" else (item.output_2, item.output_1)
        messages = load_prompt("judgecheck/evaluator_pairwise").render(
            instruction=item.question, output_a=first, output_b=second
        )
    try:
        verdict = llm.structured(PairwiseVerdict, messages, step=step)
    except ModelError as exc:
        return {"value": None, "reason": f"ungraded: the judge gave no usable verdict: {exc}"[:600], "how": "ungraded"}
    value = "tie" if verdict.winner == "tie" else _ORIGINAL[order, verdict.winner]
    return {"value": value, "reason": verdict.reason.strip(), "how": f"judge:{verdict.winner}"}


def conversation_text(turns: list[Turn], side: str) -> str:
    """A conversation as the multi-turn judge reads it: ``### User:`` / ``### Assistant A:`` blocks."""
    return "\n\n".join(f"### {'User' if t.role == 'user' else f'Assistant {side}'}:\n{t.content}" for t in turns)


def _llmeval(ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, step: str) -> dict[str, Any]:
    stars, reason, status = judge_item(
        llm,
        {
            "qtype": question_type(item.qtype, item.options, item.reference, item.question),
            "question": item.question,
            "options": item.options or None,
            "answer": item.reference,
            "explanation": item.explanation,
            "response": item.response,
        },
    )
    return {"value": None if stars is None else str(stars), "reason": reason, "how": status}


def _interview(ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, step: str) -> dict[str, Any]:
    seed = {"task": item.task, "question": item.question, "solution": item.solution, "answer": item.reference}
    out = grade_response(svc, seed, item.question, "", item.response, step=step, grader=llm)
    value = None if out["correct"] is None else ("correct" if out["correct"] else "wrong")
    return {"value": value, "reason": out.get("reason", ""), "how": out.get("graded_by", "")}


def _judgeagent(ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, step: str) -> dict[str, Any]:
    q = BaseQuestion(
        id=item.id, question=item.question, answer=item.reference, options=item.options or None, difficulty=None
    )
    out = grade_reply(
        svc,
        judgeagent_question(q),
        q.answer,
        item.response,
        q.options,
        fmt=answer_format("auto", [q]),
        step=step,
        llm=llm,
    )
    value = None if out["correct"] is None else ("correct" if out["correct"] else "wrong")
    return {"value": value, "reason": out.get("reason") or out.get("error") or _DECIDED[out["how"]], "how": out["how"]}


#: Why an answer JudgeAgent decides without its evaluator has its verdict (the judge's reason otherwise).
_DECIDED = {
    "empty": "empty answer: wrong without asking the evaluator",
    "exact": "the answer equals the reference: correct without asking the evaluator",
    "code": "the answer's option letter compared with the key in code",
}


def _orchestrator(ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, step: str) -> dict[str, Any]:
    out = judge_problem(
        llm, item.task, item.problem, level=item.level or None, lenient=ctx.lenient_escalation, step=step
    )
    if out["approved"] is None:
        return {
            "value": None,
            "reason": f"ungraded: the orchestrator gave no usable verdict: {out['error']}"[:600],
            "how": "ungraded",
        }
    return {
        "value": "approved" if out["approved"] else "rejected",
        "reason": out["feedback"],
        "how": "scaled" if item.level else "initial",
    }


def _reviewer(ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, step: str) -> dict[str, Any]:
    out = review_problem(llm, item.task, item.problem, step=step)
    if out["review"] is None:
        return {
            "value": None,
            "reason": f"ungraded: the reviewer gave no usable review: {out['parse_error']}"[:600],
            "how": "ungraded",
        }
    review = out["review"]
    scores = ", ".join(f"{k} {review[k]}" for k in ("validity", "coherence", "fairness"))
    return {"value": str(review[ctx.aspect]), "reason": f"{scores}; approved {review['approved']}", "how": "reviewer"}


_POINTWISE = {
    "llmeval.judge": _llmeval,
    "interview.grader": _interview,
    "judgeagent.judge": _judgeagent,
    "atad.orchestrator": _orchestrator,
    "atad.reviewer": _reviewer,
}


def judge_once(
    ctx: JudgeCheckContext, svc: Services, llm: RoleLLM, item: LabelledItem, order: str, *, step: str
) -> dict[str, Any]:
    """One verdict of the context's judging step by ``llm`` on ``item`` (``order`` matters for ``pairwise``
    only)."""
    if ctx.judge == "pairwise":
        return judge_pair(llm, item, order, step=step)
    return _POINTWISE[ctx.judge](ctx, svc, llm, item, step)
