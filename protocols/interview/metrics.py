"""Interview Report metrics (seed 004, section 3.2, sections 5 and 7, Appendix C.2). Pure functions of records.

A record is the JSON result of one session (``protocols.interview.InterviewProtocol.result``); records with
results (status ``ok`` or ``ungraded``, :func:`runtime.protocol.with_results`) enter the metrics. Every answer
has a verdict (correct / wrong / ungraded, :mod:`state.verdicts`): an ungraded answer never counts for or
against the target; each rate is taken over graded answers and shows its denominator and ungraded count.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from dyneval.results.stats import BLOCK, UNBOUNDED, Bounds, Estimate, clustered, summary_entries
from dyneval.runtime.protocol import with_results
from dyneval.state.interview import ERROR_TYPES
from dyneval.state.verdicts import is_ungraded, rate


def ok_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session records that hold results (``ok`` and ``ungraded``)."""
    return with_results(list(records))


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# -- Score@n -----------------------------------------------------------------------------------


def seed_score_at(seed_scores: list[float | None], n: int) -> float | None:
    """Score of the seed question at the n-th interaction (1-based); ``None`` = ungraded.

    A session stops retrying once it is solved, so a missing interaction carries the
    last score forward (solved at @2 -> also solved at @3). A session stops at its
    first ungraded answer, so that answer and every later interaction are ungraded.
    """
    if not seed_scores:
        return None
    value = seed_scores[min(n, len(seed_scores)) - 1]
    return None if value is None else float(value)


def _graded_throughout(records: list[dict[str, Any]], n_max: int) -> list[dict[str, Any]]:
    """The sessions whose seed answer is graded at every interaction up to ``n_max`` (Score@n's sessions)."""
    return [r for r in records if all(seed_score_at(r["seed_scores"], n) is not None for n in range(1, n_max + 1))]


def score_at_n_rates(records: list[dict[str, Any]], n_max: int) -> list[dict[str, Any]]:
    """Score@1..Score@n_max, each with ``n`` and ``ungraded``, over one set of sessions: those graded at every
    interaction up to ``n_max``.

    Section 3.2 defines Score@n as the mean, over the questions, of the score of the answer given at the n-th
    interaction, so the series shows what feedback adds to the same questions. Only failed sessions get retries,
    so a session whose retry is ungraded would leave the later denominators while the passing ones stay: sessions
    [1], [1], [0, ungraded], [0, ungraded] would give Score@1 = 0.5 and Score@2 = 1.0. A session with an ungraded
    seed answer up to ``n_max`` therefore leaves every Score@n and is counted as ``ungraded`` in each.
    """
    recs = ok_records(records)
    complete = _graded_throughout(recs, n_max)
    left_out = len(recs) - len(complete)
    rates = [rate(seed_score_at(r["seed_scores"], n) for r in complete) for n in range(1, n_max + 1)]
    return [{**r, "ungraded": r["ungraded"] + left_out} for r in rates]


def score_at_n(records: list[dict[str, Any]], n_max: int) -> list[float | None]:
    """[Score@1, ..., Score@n_max] averaged over graded sessions (section 3.2 "Problem Solving Ability")."""
    return [r["value"] for r in score_at_n_rates(records, n_max)]


def _judged(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r["single_turn"]
        for r in ok_records(records)
        if "score" in (r.get("single_turn") or {}) or is_ungraded(r.get("single_turn"))
    ]


def judge_rate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Single-turn LLM-as-a-Judge score on the unmodified question (Table 2 "Judge") with its counts."""
    return rate(None if is_ungraded(st) else st["score"] for st in _judged(records))


def judge_score(records: list[dict[str, Any]]) -> float | None:
    """Mean single-turn judge score over the graded single-turn answers."""
    return judge_rate(records)["value"]


# -- follow-ups ----------------------------------------------------------------------------------


def followup_accuracy(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Follow-up accuracy within solved seed questions, failed ones and overall (section 3.2, Table 3).

    Every graded follow-up answer counts once; ``solved`` means the seed question
    was finally answered correctly. Ungraded follow-up answers are left out of every
    rate and counted in ``ungraded`` (overall and per type).
    """
    buckets: dict[str, list[float]] = {"solved": [], "failed": []}
    by_type: dict[str, list[float | None]] = defaultdict(list)
    ungraded = 0
    for r in ok_records(records):
        for i in r.get("followup_results", []):
            value = None if is_ungraded(i) else (1.0 if i["correct"] else 0.0)
            by_type[i["type"]].append(value)
            if value is None:
                ungraded += 1
                continue
            buckets["solved" if r.get("seed_solved") else "failed"].append(value)
    overall = buckets["solved"] + buckets["failed"]
    types = {t: rate(v) for t, v in sorted(by_type.items())}
    return {
        "solved": _mean(buckets["solved"]),
        "failed": _mean(buckets["failed"]),
        "overall": _mean(overall),
        "n_solved": len(buckets["solved"]),
        "n_failed": len(buckets["failed"]),
        "n": len(overall),
        "ungraded": ungraded,
        "by_type": {t: {"accuracy": v["value"], "n": v["n"], "ungraded": v["ungraded"]} for t, v in types.items()},
    }


# -- errors -----------------------------------------------------------------------------------


def error_distribution(records: list[dict[str, Any]], examples: int = 2) -> dict[str, Any]:
    """Error types over every wrong seed-question answer (section 3.2 (2)), with examples; ungraded answers
    are not errors and are left out."""
    counts: Counter[str] = Counter()
    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ok_records(records):
        for i in r.get("seed_interactions", []):
            if i.get("correct") is not False:
                continue
            et = i.get("error_type") if i.get("error_type") in ERROR_TYPES else "N/A"
            counts[et] += 1
            if len(samples[et]) < examples and all(e["unit"] != r["unit_id"] for e in samples[et]):
                samples[et].append(
                    {
                        "unit": r["unit_id"],
                        "attempt": i["attempt"],
                        "question": r["question"],
                        "answer": i["answer"],
                        "reason": i.get("reason", ""),
                    }
                )
    total = sum(counts.values())
    return {
        "total": total,
        "types": {
            t: {"count": counts[t], "rate": counts[t] / total if total else None, "examples": samples[t]}
            for t in ERROR_TYPES
        },
    }


# -- verbosity bias (section 7) ----------------------------------------------------------------


def pearson(xs: list[float], ys: list[float]) -> tuple[float | None, float | None]:
    """Pearson r and two-sided p (scipy); None when undefined (fewer than 3 points or no variance)."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None, None
    from scipy.stats import pearsonr

    res = pearsonr(xs, ys)
    return float(res.statistic), float(res.pvalue)


def verbosity_bias(records: list[dict[str, Any]], n_max: int) -> list[dict[str, Any]]:
    """Correlation of answer length (words) with score per interaction, and for the single-turn judge.

    Section 7 / Appendix H.1: the paper finds r falling and p rising as interactions progress.
    Interaction n uses the sessions that gave a graded n-th answer to the seed question.
    """
    recs = ok_records(records)
    rows = []
    judge = [(st["words"], st["score"]) for st in _judged(recs) if st.get("score") is not None]
    r_, p_ = pearson([float(a) for a, _ in judge], [float(b) for _, b in judge])
    rows.append({"interaction": "judge", "n": len(judge), "r": r_, "p": p_})
    for n in range(1, n_max + 1):
        pts = [
            (i["words"], i["score"])
            for r in recs
            for i in r.get("seed_interactions", [])
            if i["attempt"] == n and i.get("score") is not None
        ]
        r_, p_ = pearson([float(a) for a, _ in pts], [float(b) for _, b in pts])
        rows.append({"interaction": f"@{n}", "n": len(pts), "r": r_, "p": p_})
    return rows


# -- run-to-run variation (section 7, Table 6) ---------------------------------------------------


def run_to_run_std(records: list[dict[str, Any]], n_max: int) -> dict[str, Any] | None:
    """Std of Score@n (and of the judge score) across the ``--repeats`` runs; None with one repeat.

    Each repeat is a full pass over the seed questions; its Score@n is a mean over
    its sessions; the sample standard deviation (ddof=1) is taken across repeats.
    """
    by_rep: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in ok_records(records):
        by_rep[int(r.get("repeat", 0))].append(r)
    if len(by_rep) < 2:
        return None
    per_rep = {k: score_at_n(v, n_max) for k, v in sorted(by_rep.items())}
    std = []
    for n in range(n_max):
        xs = [x for s in per_rep.values() if (x := s[n]) is not None]
        std.append(statistics.stdev(xs) if len(xs) >= 2 else None)
    judges = [j for j in (judge_score(v) for v in by_rep.values()) if j is not None]
    return {
        "repeats": len(by_rep),
        "score_at_n": {str(k): v for k, v in per_rep.items()},
        "std": std,
        "judge_std": statistics.stdev(judges) if len(judges) >= 2 else None,
    }


# -- bootstrap sample-size check (Appendix C.2, Table 7) ------------------------------------------


def bootstrap_p(values: list[float], size: int, *, resamples: int = 10_000, seed: int = 0) -> float | None:
    """Two-sided bootstrap p-value of the full-set mean under the means of resamples of ``size``.

    Our reading of Appendix C.2: take ``size`` of the N sessions (without
    replacement), resample them with replacement ``resamples`` times, and ask how
    extreme the mean over all N sessions is among the resampled means. A large p
    means a set of that size gives no significantly different estimate.
    """
    if not values or size < 1:
        return None
    rng = random.Random(seed)
    full = sum(values) / len(values)
    subset = rng.sample(values, size) if size <= len(values) else [rng.choice(values) for _ in range(size)]
    import numpy as np

    gen = np.random.default_rng(seed)
    arr = np.asarray(subset, dtype=float)
    block = max(1, BLOCK // len(arr))  # resamples drawn in blocks: memory bounded whatever the size
    means = np.concatenate(
        [
            arr[gen.integers(0, len(arr), size=(min(block, resamples - start), len(arr)))].mean(axis=1)
            for start in range(0, resamples, block)
        ]
    )
    lo = float((means <= full + 1e-12).mean())
    hi = float((means >= full - 1e-12).mean())
    return min(1.0, 2 * min(lo, hi))


def bootstrap_table(
    records: list[dict[str, Any]], sizes: list[int] | None = None, *, resamples: int = 10_000, seed: int = 0
) -> list[dict[str, Any]]:
    """Table 7: for each sample size, the bootstrap p of Score@1 (interviewer) and of the judge score."""
    recs = ok_records(records)
    inter = [x for x in (seed_score_at(r["seed_scores"], 1) for r in recs) if x is not None]
    judge = [st["score"] for st in _judged(recs) if st.get("score") is not None]
    n = len(inter)
    if n == 0:
        return []
    sizes = sizes or sorted({max(1, math.ceil(n * f)) for f in (0.2, 0.6, 1.0)})
    return [
        {
            "size": s,
            "interviewer_p": bootstrap_p(inter, s, resamples=resamples, seed=seed),
            "judge_p": bootstrap_p(judge, min(s, len(judge)), resamples=resamples, seed=seed) if judge else None,
        }
        for s in sizes
    ]


# -- feedback and grading provenance -------------------------------------------------------------


def feedback_checks(records: list[dict[str, Any]]) -> dict[str, int]:
    """How often the code check caught an answer leak, and what was done about it."""
    c: Counter[str] = Counter()
    for r in ok_records(records):
        for f in r.get("feedbacks", []):
            c["feedback"] += 1
            for key in ("leaked", "regenerated", "redacted", "repeated"):
                c[key] += bool(f.get(key))
            c[f"source:{str(f.get('source', '')).split(':')[0]}"] += 1
    return dict(c)


def graded_by(records: list[dict[str, Any]]) -> dict[str, int]:
    """How each answer was graded: ``grader``, ``code+grader``, ``code`` (empty answer) or ``ungraded``."""
    c: Counter[str] = Counter()
    for r in ok_records(records):
        for i in r.get("seed_interactions", []) + r.get("followup_results", []):
            c[i.get("graded_by", "?")] += 1
    return dict(c)


def by_task(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ok_records(records):
        groups[r.get("task", "generic")].append(r)
    return dict(sorted(groups.items()))


def by_level(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Sessions grouped by the seed question's difficulty level (only those that have one)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ok_records(records):
        if r.get("level") not in (None, ""):
            groups[str(r["level"])].append(r)
    return dict(sorted(groups.items()))


# -- intervals (results.stats) -------------------------------------------------------------------


def _by_seed(records: list[dict[str, Any]], values: Any, unit: str, bounds: Bounds = UNBOUNDED) -> Estimate | None:
    """``sum / count`` of the values ``values(record)`` yields, clustered by seed question: the sessions of one
    seed question (``--repeats``) and a session's follow-ups share it and count as one cluster
    (``cluster-robust-t`` over seed questions); where every seed question gave one value they are independent
    units (a share of 0/1 values then gets the exact interval)."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        for v in values(r):
            sums[r["seed_id"]] += float(v)
            counts[r["seed_id"]] += 1
    return clustered(list(sums.values()), [counts[k] for k in sums], unit, "seed questions", bounds)


def intervals(records: list[dict[str, Any]], n_max: int) -> dict[str, dict[str, Any]]:
    """95 % intervals and separable differences of Score@1..n_max (over the sessions of
    :func:`score_at_n_rates`), the single-turn judge score and follow-up accuracy (section 3.2)."""
    recs = ok_records(records)
    complete = _graded_throughout(recs, n_max)
    estimates: dict[str, Estimate | None] = {
        f"score@{n}": _by_seed(complete, lambda r, n=n: [seed_score_at(r["seed_scores"], n)], "sessions", (0, 1))
        for n in range(1, n_max + 1)
    }
    estimates["judge"] = _by_seed(
        recs, lambda r: [st["score"] for st in _judged([r]) if not is_ungraded(st)], "sessions"
    )
    estimates["followup_accuracy.overall"] = _by_seed(
        recs,
        lambda r: [float(bool(i["correct"])) for i in r.get("followup_results", []) if not is_ungraded(i)],
        "follow-up answers",
        (0, 1),
    )
    return summary_entries(estimates)
