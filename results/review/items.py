"""A finished run's judged items, read from its folder alone (``units.jsonl``, ``results.jsonl``, ``config.json``).

An item is one decision of a judging step on a target's answer, on that step's scale (:data:`state.judgecheck.SCALES`):

* ``interview``: every answer the grader decided (seed question attempts, follow-ups, the single-turn answer;
  seed 004, Appendix D.2.1), correct/wrong, against the seed's answer and solution (a follow-up's: the
  interviewer's expected answer);
* ``judgeagent``: every base-question and extension-round answer the evaluator decided (seed 000, Table 12),
  correct/wrong, against the reference answer; multiple-choice letters compared in code are not a judge's;
* ``llmeval``: every answer of a session and of its reference replay the judge rated (seed 002, section 2.3),
  0-3 stars, against the question's answer and explanation, from ``judged_answers.jsonl``, the copy of the
  sessions' judged answers the run keeps beside its question bank (:data:`stores.rundir.JUDGED`);
* ``judgecheck``: each item's first verdict in the original order (the jury's when there is one), on the checked
  judge's scale (answers only: ATAD's problem judges see no answer).

An answer the judge left ungraded carries no verdict to check and is not an item (counted in :class:`Judged`).
ATAD's decisions (the orchestrator's approval of a generated problem) judge no target answer:
:class:`state.errors.InputError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dyneval.state.errors import InputError
from dyneval.state.judgecheck import PROBLEM_JUDGES, SCALES
from dyneval.stores.rundir import JUDGED, RunDir

#: LLMEval-3's star scale (Figure 11).
STARS = SCALES["llmeval.judge"]


@dataclass(frozen=True)
class Item:
    """One judged answer: what the judge saw, and its verdict and reason (never shown before a person decides)."""

    key: str
    unit: str
    judge: str
    question: str
    response: str = ""
    output_1: str = ""
    output_2: str = ""
    reference: str = ""
    options: tuple[str, ...] = ()
    task: str = "generic"
    qtype: str = ""
    verdict: str = ""
    reason: str = ""

    def shown(self) -> dict[str, Any]:
        """What the page shows before the person decides (no verdict, no reason)."""
        return {
            "key": self.key,
            "question": self.question,
            "options": list(self.options),
            "reference": self.reference,
            "response": self.response,
            "output_1": self.output_1,
            "output_2": self.output_2,
        }


@dataclass
class Judged:
    """A run's judged items and how many of its answers were left ungraded (no verdict to review)."""

    judge: str
    items: list[Item] = field(default_factory=list)
    ungraded: int = 0


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def by_grader(answer: dict[str, Any]) -> bool:
    """Whether the interview's grader decided the answer (an empty answer is wrong without it)."""
    return "grader" in _text(answer.get("graded_by"))


def by_evaluator(answer: dict[str, Any]) -> bool:
    """Whether JudgeAgent's evaluator judged the answer (a choice letter, an empty or an exact reply is compared
    in code)."""
    return answer.get("how") == "evaluator"


def _interview(run: RunDir) -> Judged:
    out = Judged("interview.grader")
    seeds = {line["id"]: line.get("input", {}).get("seed", {}) for line in run.plan()}
    for record in run.records():
        seed = seeds.get(record["unit_id"], {})
        reference = "\n".join(filter(None, [_text(seed.get("answer")), _text(seed.get("solution"))]))
        task = _text(record.get("task") or seed.get("task") or "generic")
        answers: list[tuple[str, str, dict[str, Any], str]] = []
        for a in record.get("seed_interactions") or []:
            answers.append((f"seed{a.get('attempt')}", _text(record.get("question")), a, reference))
        asked = {f.get("q"): f for f in record.get("followups") or []}
        for a in record.get("followup_results") or []:
            follow = asked.get(a.get("q"), {})
            where = f"followup{a.get('q')}.{a.get('attempt')}"
            answers.append((where, _text(follow.get("question")), a, _text(follow.get("expected"))))
        if single := record.get("single_turn"):
            answers.append(("single", _text(record.get("original_question")), single, reference))
        for where, question, a, ref in answers:
            if a.get("verdict") not in ("correct", "wrong"):
                out.ungraded += a.get("verdict") == "ungraded"
                continue
            if not by_grader(a):
                continue  # decided without the grader (an empty answer)
            out.items.append(
                Item(
                    key=f"{record['unit_id']}#{where}",
                    unit=record["unit_id"],
                    judge=out.judge,
                    question=question,
                    response=_text(a.get("answer")),
                    reference=ref,
                    task=task if where.startswith(("seed", "single")) else "generic",
                    verdict=a["verdict"],
                    reason=_text(a.get("reason")),
                )
            )
    return out


def _judgeagent(run: RunDir) -> Judged:
    out = Judged("judgeagent.judge")
    batches = {line["id"]: {q.get("id"): q for q in line.get("input", {}).get("batch") or []} for line in run.plan()}
    for record in run.records():
        asked = batches.get(record["unit_id"], {})
        answers: Iterator[tuple[str, dict[str, Any], dict[str, Any]]] = (
            (f"base.{a.get('id')}", a, asked.get(a.get("id"), {})) for a in record.get("base") or []
        )
        rounds = ((f"round{r.get('round')}", r, r) for r in record.get("rounds") or [])
        for where, a, question in (*answers, *rounds):
            if a.get("verdict") not in ("correct", "wrong"):
                out.ungraded += a.get("verdict") == "ungraded"
                continue
            if not by_evaluator(a):
                continue  # compared in code (a choice letter), not judged
            out.items.append(
                Item(
                    key=f"{record['unit_id']}#{where}",
                    unit=record["unit_id"],
                    judge=out.judge,
                    question=_text(a.get("question") or question.get("question")),
                    response=_text(a.get("reply")),
                    reference=_text(question.get("answer")),
                    options=tuple(_text(o) for o in question.get("options") or []),
                    verdict=a["verdict"],
                    reason=_text(a.get("reason")),
                )
            )
    return out


def llmeval_sessions(run: RunDir) -> list[dict[str, Any]]:
    """Each session of an LLMEval-3 run (its record, in plan order) with ``answers`` and ``reference`` (its
    reference replay's): the judged answers the run kept in ``judged_answers.jsonl``; ``InputError`` for a run
    made before runs kept them."""
    if not run.has(JUDGED):
        raise InputError(
            f"run {run.name} keeps its answers and stars only in its question bank (made before LLMEval-3 runs "
            f"kept them in {JUDGED}); re-run it, or review them with judgecheck --judge llmeval.judge",
            setting="--review",
        )
    kept = {line["unit_id"]: line for line in run.file(JUDGED)}
    return [
        {**r, "answers": kept[r["unit_id"]].get("answers") or [], "reference": kept[r["unit_id"]].get("reference")}
        for r in run.records()
        if r["unit_id"] in kept
    ]


def _llmeval(run: RunDir) -> Judged:
    out = Judged("llmeval.judge")
    for session in llmeval_sessions(run):
        for where, answers in (("", session["answers"]), ("ref.", session.get("reference") or [])):
            for a in answers:
                if a.get("stars") is None:
                    out.ungraded += a.get("judge_status") == "ungraded"
                    continue
                out.items.append(
                    Item(
                        key=f"{session['unit_id']}#{where}{a.get('position')}",
                        unit=session["unit_id"],
                        judge=out.judge,
                        question=_text(a.get("question")),
                        response=_text(a.get("response")),
                        reference="\n".join(filter(None, [_text(a.get("answer")), _text(a.get("explanation"))])),
                        task=_text(a.get("discipline") or "generic"),
                        qtype=_text(a.get("qtype")),
                        verdict=str(a["stars"]),
                        reason=_text(a.get("reason")),
                    )
                )
    return out


def _judgecheck(run: RunDir) -> Judged:
    judge = _text(run.config().params.get("judge"))
    if judge in PROBLEM_JUDGES:
        raise InputError(
            f"run {run.name} checks {judge}, a judge of generated problems, not of answers: nothing to review",
            setting="--review",
        )
    out = Judged(judge)
    items = {line["id"]: line.get("input", {}).get("item", {}) for line in run.plan()}
    for record in run.records():
        first = [
            v for v in record.get("jury") or record.get("verdicts") or [] if v.get("order", "original") == "original"
        ]
        first.sort(key=lambda v: (v.get("repeat") or 0, v.get("member") or 0))
        if not first or first[0].get("value") in (None, "split"):
            out.ungraded += 1
            continue
        item = items.get(record["unit_id"], {})
        out.items.append(
            Item(
                key=record["unit_id"],
                unit=record["unit_id"],
                judge=judge,
                question=_text(item.get("question")),
                response=_text(item.get("response")),
                output_1=_text(item.get("output_1")),
                output_2=_text(item.get("output_2")),
                reference=_text(item.get("reference")),
                options=tuple(_text(o) for o in item.get("options") or []),
                task=_text(item.get("task") or "generic"),
                qtype=_text(item.get("qtype")),
                verdict=_text(first[0]["value"]),
                reason=_text(first[0].get("reason")),
            )
        )
    return out


READERS: dict[str, Callable[[RunDir], Judged]] = {
    "interview": _interview,
    "judgeagent": _judgeagent,
    "llmeval": _llmeval,
    "judgecheck": _judgecheck,
}
#: Why a protocol's run has nothing to review from its folder.
NOT_HERE = {
    "atad": "ATAD's judged decisions are the orchestrator's approvals of generated problems, not verdicts on a "
    "target's answer (an evaluation's answers are compared in code)",
}


def judged_items(run: RunDir) -> Judged:
    """The run's judged items (the module docstring), in plan order; ``InputError`` naming ``--review`` for a
    protocol whose folder holds none, or a run with no judged item."""
    protocol = run.protocol
    if protocol not in READERS:
        why = NOT_HERE.get(protocol, f"{protocol} is not a protocol whose items a judge decides")
        raise InputError(f"run {run.name}: {why}; --review reads {', '.join(READERS)} runs", setting="--review")
    judged = READERS[protocol](run)
    if not judged.items:
        raise InputError(
            f"run {run.name} has no answer a judge decided ({judged.ungraded} left ungraded)", setting="--review"
        )
    return judged
