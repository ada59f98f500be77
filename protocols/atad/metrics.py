"""Pure metric functions of ATAD (seed 003): accuracy tables (Tables 1, 2, 5), the consistency curve
(Figure 4, Appendix F), review scores (Table 3) and generation statistics. No I/O, no models."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dyneval.results.stats import Estimate, proportion, summary_entries, t_mean, weighted_proportion
from dyneval.state.atad import TASK_IDS


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def per_task_accuracy(rows: Iterable[tuple[str, bool]]) -> dict[str, Any]:
    """``[(task, correct), ...]`` -> ``{"T1": 0.5, ..., "avg": mean over the tasks present, "n": count}``.

    Accuracy is in percent like the paper's tables; the average is the mean of the
    task columns (Table 1's "Avg."), not of the pooled items.
    """
    by_task: dict[str, list[bool]] = defaultdict(list)
    for task, correct in rows:
        by_task[task].append(bool(correct))
    out: dict[str, Any] = {t: 100.0 * sum(v) / len(v) for t in TASK_IDS if (v := by_task.get(t))}
    out["avg"] = mean(out[t] for t in TASK_IDS if t in out)
    out["n"] = sum(len(v) for v in by_task.values())
    return out


def average_tables(tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Table 1 from Table 5: per task, the mean over benchmark files that have the task."""
    out: dict[str, Any] = {}
    for t in TASK_IDS:
        vals = [tab[t] for tab in tables if t in tab]
        if vals:
            out[t] = sum(vals) / len(vals)
    out["avg"] = mean(out[t] for t in TASK_IDS if t in out)
    out["n"] = sum(tab.get("n", 0) for tab in tables)
    return out


def consistency_curve(by_task: Mapping[str, Sequence[bool]], sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Figure 4 / Appendix F: accuracy on the first ``n`` samples per task, for each ``n`` in ``sizes``.

    For each n: per-task accuracy on the first n items (all items if a task has
    fewer), their mean ``avg``, and ``std`` = population standard deviation over
    tasks of (accuracy at n - accuracy on all items).
    """
    full = {t: 100.0 * sum(v) / len(v) for t, v in by_task.items() if v}
    points = []
    for n in sizes:
        accs = {t: 100.0 * sum(v[:n]) / len(v[:n]) for t, v in by_task.items() if v}
        if not accs:
            continue
        devs = [accs[t] - full[t] for t in accs]
        points.append(
            {
                "n": n,
                "avg": sum(accs.values()) / len(accs),
                "std": statistics.pstdev(devs) if len(devs) > 1 else 0.0,
                "per_task": accs,
            }
        )
    return points


def curve_sizes(max_n: int, steps: int = 10) -> list[int]:
    """Sample sizes for the consistency curve: about ``steps`` evenly spaced sizes ending at ``max_n``."""
    if max_n <= 0:
        return []
    step = max(1, -(-max_n // steps))
    sizes = list(range(step, max_n, step))
    return sizes + [max_n]


def review_summary(reviews: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Table 3 quality columns: mean validity / coherence / fairness (1-5) and approval rate (%), over the
    graded reviews (``n``); a ``None`` review (the reviewer gave no usable review) is counted in ``ungraded``."""
    reviews = list(reviews)
    graded = [r for r in reviews if r]
    ungraded = len(reviews) - len(graded)
    reviews = graded
    if not reviews:
        return {"validity": None, "coherence": None, "fairness": None, "approval": None, "n": 0, "ungraded": ungraded}
    return {
        "ungraded": ungraded,
        "validity": mean(r["validity"] for r in reviews),
        "coherence": mean(r["coherence"] for r in reviews),
        "fairness": mean(r["fairness"] for r in reviews),
        "approval": 100.0 * sum(bool(r["approved"]) for r in reviews) / len(reviews),
        "n": len(reviews),
    }


def generation_stats(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts over generated items (the ``result`` records of finished units)."""
    finalized = [i for i in items if i.get("item_status") == "finalized"]
    reasons: Counter[str] = Counter()
    for item in items:
        for event in item.get("history") or []:
            if event.get("step") == "generate":
                for err in event.get("structure_errors") or []:
                    reasons[err.split(":", 1)[0]] += 1
            elif event.get("step") == "validate" and event.get("approved") is False:
                reasons["orchestrator_rejected"] += 1
    per_task: dict[str, dict[str, int]] = {}
    for item in items:
        row = per_task.setdefault(item["task"], {"finalized": 0, "discarded": 0})
        row["finalized" if item.get("item_status") == "finalized" else "discarded"] += 1
    return {
        "items": len(items),
        "finalized": len(finalized),
        "discarded": len(items) - len(finalized),
        "acceptance": dict(Counter(i["acceptance"] for i in finalized)),
        "difficulty": dict(Counter(i["difficulty"] for i in finalized)),
        "rejection_reasons": dict(reasons.most_common()),
        "per_task": dict(sorted(per_task.items())),
        "mean_student_loops": mean(i["student_loops"] for i in finalized),
        "mean_level": mean(i["level"] for i in finalized),
        "mean_teacher_attempts": mean(i["teacher_attempts"] for i in items),
    }


# -- intervals (results.stats) -------------------------------------------------------------------


def generation_intervals(items: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """95 % intervals and separable differences of the generation headline metrics. Each unit generates its own
    problem, so the finalized and discarded counts are binomial: the exact interval of the share, shown on the
    count scale (n x share), with the separable difference on the share; the mean level takes Student's t over
    the finalized problems (``t-units``: a default run finalizes a handful, where the bootstrap undercovered)."""
    n = len(items)
    finalized = sum(1 for i in items if i.get("item_status") == "finalized")
    share = proportion(finalized, n, "problems")
    other = proportion(n - finalized, n, "problems")
    levels = [float(i["level"]) for i in items if i.get("item_status") == "finalized"]
    return summary_entries(
        {
            "finalized": share and share.scaled(n, scale="share of problems"),
            "discarded": other and other.scaled(n, scale="share of problems"),
            "mean_level": t_mean(levels, "finalized problems", (0.0, math.inf)),
        }
    )


def table1_estimate(answers: Sequence[tuple[str, str, bool, str]]) -> Estimate | None:
    """Table 1's average accuracy (%) of one model from its answers ``(benchmark file, task, correct, problem)``
    with its exact interval over the distinct problems.

    Table 1 scores per task the mean over files of the file's task accuracy, then the mean over the tasks
    present: a weighted share of right answers, each answer weighing ``1 / (tasks * files with its task *
    answers in its file and task)``. Answers to copies of one problem (the same ``problem`` key) are one
    problem: its weight the copies' sum, its value their weighted share right. The interval is
    ``clopper-pearson-effective-n`` (:func:`results.stats.weighted_proportion`): one method whatever the count
    of right answers, the exact binomial one when every problem weighs alike."""
    if not answers:
        return None
    strata = Counter((f, t) for f, t, _, _ in answers)
    files_per_task = Counter(t for _, t in strata)
    weight: dict[str, float] = defaultdict(float)
    right: dict[str, float] = defaultdict(float)
    for f, t, correct, problem in answers:
        w = 1.0 / (len(files_per_task) * files_per_task[t] * strata[(f, t)])
        weight[problem] += w
        right[problem] += w * bool(correct)
    share = weighted_proportion([right[p] / weight[p] for p in weight], list(weight.values()), "problems")
    return share and share.scaled(100.0)


def evaluation_intervals(answers: dict[str, list[tuple[str, str, bool, str]]]) -> dict[str, dict[str, Any]]:
    """:func:`table1_estimate` of each evaluated model, keyed ``table1.<model>.avg``."""
    return summary_entries({f"table1.{model}.avg": table1_estimate(rows) for model, rows in answers.items()})
