"""Pure metric functions of JudgeAgent (unit-tested against hand-computed values).

* :func:`validation_metrics` - Algorithm 2: ACC1, ACC2, Correction Rate (CR) and Correct-to-Error rate
  (CtE), all over ``N_total`` = every base question, plus the conditional rates
  ``cr_given_wrong`` = wrong->right / initially wrong and ``cte_given_right`` = right->wrong / initially right.
* :func:`dynamic_scores` - Table 3: pooled difficulty score of the base questions and after each extension
  round ``@K`` (Algorithm 1 running ``sc_B / RND_total``, pooled over batches like line 35).
* :func:`difficulty_distribution` - Table 3: share of generated questions per difficulty.
* :func:`overall_score` - Algorithm 1, line 35: ``sum sc_B / sum RND_total``.
"""

from __future__ import annotations

from typing import Any, Iterable

from state.judgeagent import DIFFICULTIES


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def validation_metrics(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Algorithm 2 over rows ``{"correct1": bool, "correct2": bool}``."""
    rows = list(rows)
    n = len(rows)
    acc1 = sum(1 for r in rows if r["correct1"])
    acc2 = sum(1 for r in rows if r["correct2"])
    cr = sum(1 for r in rows if r["correct2"] and not r["correct1"])
    ce = sum(1 for r in rows if r["correct1"] and not r["correct2"])
    return {"n": n, "acc1": _ratio(acc1, n), "acc2": _ratio(acc2, n), "cr": _ratio(cr, n), "cte": _ratio(ce, n),
            "cr_given_wrong": _ratio(cr, n - acc1), "cte_given_right": _ratio(ce, acc1)}


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


def dynamic_scores(records: Iterable[dict[str, Any]], rounds: int) -> dict[str, float | None]:
    """Pooled running score after the base questions (``base``) and after each round ``@K``.

    A record holds ``base`` (per question ``gain``) and ``rounds`` (per round ``status``, ``gain``);
    failed generations add nothing to either sum.
    """
    records = list(records)
    num = [0.0] * (rounds + 1)
    den = [0] * (rounds + 1)
    for r in records:
        s = sum(b["gain"] for b in r["base"])
        a = len(r["base"])
        num[0] += s
        den[0] += a
        by_round = {x["round"]: x for x in r.get("rounds", [])}
        for k in range(1, rounds + 1):
            x = by_round.get(k)
            if x and x.get("status") == "ok":
                s += x["gain"]
                a += 1
            num[k] += s
            den[k] += a
    out = {"base": _ratio(num[0], den[0])}
    for k in range(1, rounds + 1):
        out[f"@{k}"] = _ratio(num[k], den[k])
    return out


def difficulty_distribution(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts and shares of the generated (successfully generated) questions per difficulty."""
    counts = {d: 0 for d in DIFFICULTIES}
    for r in records:
        for x in r.get("rounds", []):
            if x.get("status") == "ok" and x.get("difficulty") in counts:
                counts[x["difficulty"]] += 1
    total = sum(counts.values())
    return {"counts": counts, "total": total, "share": {d: _ratio(c, total) for d, c in counts.items()}}


def accuracy(records: Iterable[dict[str, Any]]) -> float | None:
    base = [b for r in records for b in r["base"]]
    return _ratio(sum(1 for b in base if b["correct"]), len(base))
