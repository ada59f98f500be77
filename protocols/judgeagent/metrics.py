"""Pure metric functions of JudgeAgent (unit-tested against hand-computed values).

* :func:`validation_metrics` - Algorithm 2: ACC1, ACC2, Correction Rate (CR) and Correct-to-Error rate
  (CtE), all over ``N_total`` = every base question, plus the conditional rates
  ``cr_given_wrong`` = wrong->right / initially wrong and ``cte_given_right`` = right->wrong / initially right.
* :func:`dynamic_scores` - Table 3: pooled difficulty score of the base questions and after each extension
  round ``@K`` (Algorithm 1 running ``sc_B / RND_total``, pooled over batches like line 35).
* :func:`difficulty_distribution` - Table 3: share of generated questions per difficulty.
* :func:`overall_score` - Algorithm 1, line 35: ``sum sc_B / sum RND_total``.
* :func:`intervals` - the 95 % interval and separable difference of each headline metric.

Three verdicts (:mod:`state.verdicts`): an ungraded answer (the evaluator failed after retries and one
repair) is in no numerator and no denominator; every rate carries its denominator ``n`` and ``ungraded``.
A batch whose feedback failed or came back empty is unvalidated: it adds no row to the Algorithm 2 rates and
is listed by :func:`unvalidated` with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dyneval.results.stats import Estimate, clustered, clustered_share, summary_entries
from dyneval.state.judgeagent import DIFFICULTIES
from dyneval.state.verdicts import is_ungraded, rate


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _graded_row(row: dict[str, Any]) -> bool:
    return row.get("correct1") is not None and row.get("correct2") is not None


def validation_metrics(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Algorithm 2 over rows ``{"correct1": bool|None, "correct2": bool|None}``; ``None`` = ungraded.

    ``n`` counts the rows with both verdicts graded; ``ungraded`` the rows left out.
    """
    every = list(rows)
    rows = [r for r in every if _graded_row(r)]
    n = len(rows)
    acc1 = sum(1 for r in rows if r["correct1"])
    acc2 = sum(1 for r in rows if r["correct2"])
    cr = sum(1 for r in rows if r["correct2"] and not r["correct1"])
    ce = sum(1 for r in rows if r["correct1"] and not r["correct2"])
    return {
        "n": n,
        "ungraded": len(every) - n,
        "acc1": _ratio(acc1, n),
        "acc2": _ratio(acc2, n),
        "cr": _ratio(cr, n),
        "cte": _ratio(ce, n),
        "cr_given_wrong": _ratio(cr, n - acc1),
        "cte_given_right": _ratio(ce, acc1),
    }


def unvalidated(records: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Batches whose Algorithm 2 validation did not happen although feedback ran, with the reason."""
    out = {}
    for r in records:
        fb = r.get("feedback") or {}
        if fb and fb.get("status") != "ok":
            out[r.get("unit_id", "?")] = f"feedback {fb.get('status')}" + (
                f": {fb['reason']}" if fb.get("reason") else ""
            )
    return out


def validation_by_label(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`validation_metrics` overall and per difficulty label (``unlabeled`` for None)."""
    rows = list(rows)
    out = {"overall": validation_metrics(rows)}
    for label in (*DIFFICULTIES, None):
        part = [r for r in rows if r.get("difficulty") == label]
        if part:
            out[label or "unlabeled"] = validation_metrics(part)
    return out


def overall_score(records: Iterable[dict[str, Any]]) -> float | None:
    records = list(records)
    return _ratio(sum(r["score"] for r in records), sum(r["answered"] for r in records))


def dynamic_table(records: Iterable[dict[str, Any]], rounds: int) -> dict[str, dict[str, Any]]:
    """Pooled running score after the base questions (``base``) and after each round ``@K``, each with its
    denominator ``n`` (graded answers so far) and ``ungraded`` (ungraded answers so far).

    A record holds ``base`` (per question ``gain``) and ``rounds`` (per round ``status``, ``gain``);
    failed generations and ungraded answers add nothing to either sum.
    """
    records = list(records)
    num = [0.0] * (rounds + 1)
    den = [0] * (rounds + 1)
    left = [0] * (rounds + 1)
    for r in records:
        s = sum(b["gain"] for b in r["base"])
        u = sum(1 for b in r["base"] if is_ungraded(b))
        a = len(r["base"]) - u
        num[0] += s
        den[0] += a
        left[0] += u
        by_round = {x["round"]: x for x in r.get("rounds", [])}
        for k in range(1, rounds + 1):
            x = by_round.get(k)
            if x and x.get("status") == "ok":
                if is_ungraded(x):
                    u += 1
                else:
                    s += x["gain"]
                    a += 1
            num[k] += s
            den[k] += a
            left[k] += u
    keys = ["base", *[f"@{k}" for k in range(1, rounds + 1)]]
    return {key: {"value": _ratio(num[i], den[i]), "n": den[i], "ungraded": left[i]} for i, key in enumerate(keys)}


def dynamic_scores(records: Iterable[dict[str, Any]], rounds: int) -> dict[str, float | None]:
    """The values of :func:`dynamic_table`."""
    return {k: v["value"] for k, v in dynamic_table(records, rounds).items()}


def difficulty_distribution(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts and shares of the generated (successfully generated) questions per difficulty."""
    counts = {d: 0 for d in DIFFICULTIES}
    for r in records:
        for x in r.get("rounds", []):
            if x.get("status") == "ok" and x.get("difficulty") in counts:
                counts[x["difficulty"]] += 1
    total = sum(counts.values())
    return {"counts": counts, "total": total, "share": {d: _ratio(c, total) for d, c in counts.items()}}


def accuracy(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Base accuracy over graded base answers, with ``n`` and ``ungraded``."""
    return rate(None if is_ungraded(b) else bool(b["correct"]) for r in records for b in r["base"])


def ungraded_answers(records: Iterable[dict[str, Any]]) -> int:
    """Ungraded answers of base questions and extension rounds (not validation re-answers)."""
    return sum(1 for r in records for x in [*r["base"], *r.get("rounds", [])] if is_ungraded(x))


def intervals(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """95 % intervals and separable differences of the headline metrics (:mod:`results.stats`).

    Every headline metric is clustered by batch (the score ``cluster-robust-t`` over batches, t at batches - 1
    degrees of freedom; the shares ``clopper-pearson-clustered``, the exact interval at the design-effect size,
    which the t interval undercovered near 0 or 1): a batch holds consecutive questions of the benchmark
    (SPLIT_BATCHES, Algorithm 1), which benchmark files order by subject, so its base questions share a knowledge
    scope (section 5, batch size); its extension rounds grow from its own questions and one feedback serves the
    whole batch (Algorithm 2). Batches are the independent units. An exact interval over base questions, as if
    each were answered on its own, covered 90 % at 10 batches with a batch effect (docs/statistics.md)."""
    records = list(records)
    base = [[bool(b["correct"]) for b in r["base"] if not is_ungraded(b)] for r in records]
    per_batch = [[v for v in r.get("validation", []) if _graded_row(v)] for r in records]

    def share(batches: list[list[Any]], test: Any, unit: str) -> Estimate | None:
        return clustered_share(
            [sum(1 for v in batch if test(v)) for batch in batches], [len(b) for b in batches], unit, "batches"
        )

    def by_batch(test: Any) -> Estimate | None:
        return share(per_batch, test, "validated questions")

    return summary_entries(
        {
            "score": clustered(  # gains are never negative (Eq. 4)
                [r["score"] for r in records], [r["answered"] for r in records], "answers", "batches", (0, math.inf)
            ),
            "base_accuracy.value": share(base, bool, "base questions"),
            "validation.overall.acc1": by_batch(lambda v: v["correct1"]),
            "validation.overall.acc2": by_batch(lambda v: v["correct2"]),
            "validation.overall.cr": by_batch(lambda v: v["correct2"] and not v["correct1"]),
            "validation.overall.cte": by_batch(lambda v: v["correct1"] and not v["correct2"]),
        }
    )
