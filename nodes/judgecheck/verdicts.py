"""Judge-check nodes: judge one labelled item with every judge, repeat and order; combine a jury's votes.

``judge`` calls the chosen judging step (:mod:`nodes.judgecheck.judges`) for each judge model (the evaluator
role's model, or each ``jury`` member resolved through ``Services.model``, so members share the endpoints'
limits), ``repeats`` times, in both orders for a pairwise judge with ``swap``. Calls run one after another
inside the unit, so each verdict's cost is read exactly from the event log's account of the unit (calls,
tokens, seconds) before and after it.

``vote`` combines the members' verdicts per (repeat, order) by majority vote
(:func:`state.judgecheck.majority`); on an ordinal scale (stars) the jury also has the mean score of its
graded members.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.judgecheck.judges import judge_once
from dyneval.runtime.llm import current_unit
from dyneval.runtime.services import services_of
from dyneval.state.judgecheck import ORDERS, ORDINAL, JudgeCheckContext, JudgeCheckState, LabelledItem, majority


def orders(ctx: JudgeCheckContext) -> tuple[str, ...]:
    """The presentation orders judged: both for a pairwise judge with ``swap``, else the original only."""
    return ORDERS if ctx.judge == "pairwise" and ctx.swap else ORDERS[:1]


def judge(state: JudgeCheckState, runtime: Runtime[JudgeCheckContext]) -> dict[str, Any]:
    """Every verdict on the item: one per (member, repeat, order), with its cost."""
    ctx = runtime.context
    svc = services_of(ctx)
    item = LabelledItem(**state["item"])
    unit = current_unit()
    verdicts = []
    for member, ref in enumerate(ctx.jury or [""]):
        llm = svc.model(ref, role="evaluator") if ref else svc.llm("evaluator")
        for repeat in range(ctx.repeats):
            for order in orders(ctx):
                before = svc.events.usage(unit)
                out = judge_once(ctx, svc, llm, item, order, step=f"judgecheck:{ctx.judge}:m{member}:r{repeat}:{order}")
                after = svc.events.usage(unit)
                cost = {
                    "calls": after.calls - before.calls,
                    "tokens": (
                        after.prompt_tokens + after.completion_tokens - before.prompt_tokens - before.completion_tokens
                    ),
                    "seconds": round(after.seconds - before.seconds, 3),
                }
                verdicts.append(
                    {"member": member, "model": llm.model_label, "repeat": repeat, "order": order, **out, "cost": cost}
                )
    return {"verdicts": verdicts}


def vote(state: JudgeCheckState, runtime: Runtime[JudgeCheckContext]) -> dict[str, Any]:
    """The jury's verdict per (repeat, order): majority value, votes and, on an ordinal scale, mean score."""
    ctx = runtime.context
    jury = []
    for repeat in range(ctx.repeats):
        for order in orders(ctx):
            votes = [v["value"] for v in state["verdicts"] if v["repeat"] == repeat and v["order"] == order]
            entry: dict[str, Any] = {"repeat": repeat, "order": order, "votes": votes, "value": majority(votes)}
            if ctx.judge in ORDINAL:
                graded = [int(v) for v in votes if v is not None]
                entry["score"] = sum(graded) / len(graded) if graded else None
            jury.append(entry)
    return {"jury": jury}
