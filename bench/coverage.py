"""Coverage of every headline metric's 95 % interval, measured by simulation with a known truth.

Each cell simulates runs of one protocol at one size with simulated targets and judges of known ability (no LLM)
and computes the interval through the same metric function the protocol's summary calls
(``protocols/*/metrics.py`` on records shaped as the protocol writes them). Per cell it prints the share of
intervals that contain the truth, their mean width, the misses above and below, the runs that gave no interval
without a reason (counted as misses) and those that withheld it with the reason (a ``note``: a class too rare,
one cluster, no variance), which the coverage leaves out. Seeds are fixed: a cell's figures depend only on
``--reps`` and ``--seed``.

    python bench/coverage.py [--reps 1000] [--seed 0] [--only llmeval] [--metric S]

Importable: :func:`run_cell` runs one of :func:`cells` at any repetition count (``tests/test_coverage.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dyneval.protocols.atad.metrics import evaluation_intervals, generation_intervals  # noqa: E402
from dyneval.protocols.interview.metrics import intervals as interview_intervals  # noqa: E402
from dyneval.protocols.judgeagent.metrics import intervals as judgeagent_intervals  # noqa: E402
from dyneval.protocols.judgecheck.metrics import (  # noqa: E402
    Measure,
    Obs,
    accuracy,
    intervals,
    kappa,
    mean_accuracy,
    per_class,
    swap_consistency,
)
from dyneval.protocols.llmeval.metrics import intervals as llmeval_intervals  # noqa: E402
from dyneval.results.trials import ItemTrials, flip_rate, pass_k  # noqa: E402

Rng = np.random.Generator
#: one simulated run: the interval dict of the metric (``low``/``high``, None without an interval)
Simulate = Callable[[Rng], dict[str, Any]]


def logistic(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def expected(f: Callable[..., Any], dims: int = 1) -> float:
    """``E[f(Z_1, ..., Z_dims)]`` for independent standard normals (Gauss-Hermite quadrature, 80 nodes each)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    grid = np.meshgrid(*[x] * dims, indexing="ij")
    weight = np.prod(np.meshgrid(*[w] * dims, indexing="ij"), axis=0)
    return float((f(*grid) * weight).sum() / weight.sum())


def expected_logistic(mean: float, sd: float) -> float:
    """``E[logistic(mean + sd Z)]`` for a standard normal Z."""
    return expected(lambda z: logistic(mean + sd * z))


@dataclass(frozen=True)
class Cell:
    """One metric at one run size: ``simulate`` draws a run and returns its interval; ``truth`` is the value a
    run of infinite size would give. ``default`` / ``smallest``: the protocol's default and smallest size."""

    protocol: str
    metric: str
    size: str
    truth: float
    simulate: Simulate
    default: bool = False
    smallest: bool = False


@dataclass(frozen=True)
class Coverage:
    cell: Cell
    reps: int
    covered: int
    above: int  # the interval lies above the truth
    below: int
    none: int  # no interval and no reason (a miss)
    withheld: int  # no interval, with the reason (a ``note``): what the data cannot hold, said as such
    mean_width: float
    methods: tuple[str, ...]

    @property
    def share(self) -> float:
        """Coverage of the runs that gave an interval or silently gave none (0 when every run withheld it)."""
        given = self.reps - self.withheld
        return self.covered / given if given else 0.0


# -- LLMEval: S and R (equations 1 and 2) over sessions of answers drawn from a bank ---------------------------

BANK = 5000
_bank = np.random.default_rng(12345).normal(0.0, 1.2, BANK)  # question difficulty (logit)
TARGET, REFERENCE = 0.3, 1.0  # abilities (logit): P(a star) = logistic(ability - difficulty)


def _llmeval_truth(binary: bool) -> tuple[float, float]:
    p, q = logistic(TARGET - _bank), logistic(REFERENCE - _bank)
    return 100 * p.mean(), 100 * p.mean() / q.mean()  # E[stars] / 3 is p either way (Binomial(3, p) or 3 x Bern(p))


def _stars(rng: Rng, p: np.ndarray, binary: bool) -> np.ndarray:
    return 3 * (rng.random(p.shape) < p) if binary else rng.binomial(3, p)


def llmeval_run(rng: Rng, sessions: int, questions: int, binary: bool) -> dict[str, dict[str, Any]]:
    """``sessions`` sessions of ``questions`` questions of one target, each replayed by the reference; no session
    repeats a question the target met (section 3). The judge's stars: Binomial(3, p) or 0/3 (``binary``)."""
    picked = rng.choice(BANK, sessions * questions, replace=False).reshape(sessions, questions)
    rows = []
    for qs in picked:
        m = _stars(rng, logistic(TARGET - _bank[qs]), binary)
        r = _stars(rng, logistic(REFERENCE - _bank[qs]), binary)
        s, s_ref = 100 * m.mean() / 3, 100 * r.mean() / 3
        rows.append({"S": s, "R": s / s_ref * 100 if s_ref else None, "stars": m.tolist(), "pairs": list(zip(m, r))})
    return llmeval_intervals(rows)["intervals"]


def llmeval_cells() -> list[Cell]:
    cells = []
    for binary in (False, True):
        s_true, r_true = _llmeval_truth(binary)
        judge = "0/3 stars" if binary else "0-3 stars"
        for sessions, questions in ((1, 10), (1, 50), (2, 10), (5, 10), (2, 50), (1, 1000)):
            for metric, truth in (("S", s_true), ("R", r_true)):

                def sim(rng: Rng, k: int = sessions, n: int = questions, b: bool = binary, m: str = metric) -> Any:
                    return llmeval_run(rng, k, n, b).get(m, {})

                cells.append(
                    Cell(
                        "llmeval",
                        metric,
                        f"{sessions} x {questions} q, {judge}",
                        truth,
                        sim,
                        default=(sessions, questions) == (1, 1000),  # --sessions 1 --questions 1000
                        smallest=(sessions, questions) == (1, 10),
                    )
                )
    return cells


# -- JudgeAgent: the score (Algorithm 1, line 35), base accuracy and the Algorithm 2 rates, over batches -------

JA_ABILITY, JA_BATCH_SD = 0.5, 1.0  # answers of one batch share its topic: a batch effect on the logit
#: Algorithm 2: the suggestions help (a shift on the logit), by as much as one feedback's quality (a batch effect)
JA_HELP, JA_FEEDBACK_SD = 0.8, 0.5


def _ja_p1(z: Any) -> Any:
    return logistic(JA_ABILITY + JA_BATCH_SD * z)


def _ja_p2(z: Any, g: Any) -> Any:
    return logistic(JA_ABILITY + JA_HELP + JA_BATCH_SD * z + JA_FEEDBACK_SD * g)


#: the population value of each metric (``z``: the batch's topic effect, ``g``: its feedback's quality)
JA_TRUTH: dict[str, Callable[..., Any]] = {
    "score": lambda z, g: _ja_p1(z),
    "base_accuracy.value": lambda z, g: _ja_p1(z),
    "validation.overall.acc1": lambda z, g: _ja_p1(z),
    "validation.overall.acc2": _ja_p2,
    "validation.overall.cr": lambda z, g: (1 - _ja_p1(z)) * _ja_p2(z, g),
    "validation.overall.cte": lambda z, g: _ja_p1(z) * (1 - _ja_p2(z, g)),
}


def judgeagent_run(rng: Rng, size: int, metric: str) -> dict[str, Any]:
    """``size`` batches of 3 base questions and up to 3 extension rounds (a round's generation fails 1 in
    5), every answer right with the batch's probability; Algorithm 2 answers each base question again with the
    batch's suggestions (right with the batch's helped probability, whatever the first answer)."""
    records = []
    for _ in range(size):
        z, g = rng.normal(size=2)
        p1, p2 = float(_ja_p1(z)), float(_ja_p2(z, g))
        answered = 3 + int((rng.random(3) > 0.2).sum())
        first = rng.random(3) < p1
        right = int(first.sum()) + int((rng.random(answered - 3) < p1).sum())
        base = [{"correct": bool(c), "gain": float(c)} for c in first]
        validation = [{"correct1": bool(c), "correct2": bool(d)} for c, d in zip(first, rng.random(3) < p2)]
        records.append({"score": float(right), "answered": answered, "base": base, "validation": validation})
    return judgeagent_intervals(records)["intervals"].get(metric, {})


def sized_cells(
    protocol: str,
    metric: str,
    truth: float,
    run: Callable[..., dict[str, Any]],
    sizes: dict[int, str],
    default: int,
    smallest: int,
) -> list[Cell]:
    """One cell per size ``k`` (labelled ``f"{k} {sizes[k]}"``) of a metric whose run takes one size."""
    return [
        Cell(protocol, metric, f"{k} {unit}", truth, partial(run, size=k), default=k == default, smallest=k == smallest)
        for k, unit in sizes.items()
    ]


def judgeagent_cells() -> list[Cell]:
    batches = {k: "batches" for k in (2, 5, 10, 30)}  # 5: the shipped sample, 15 questions in batches of 3
    return [
        cell
        for metric, truth in JA_TRUTH.items()
        for cell in sized_cells(
            "judgeagent",
            metric,
            expected(truth, 2),
            partial(judgeagent_run, metric=metric),
            batches,
            default=10,
            smallest=5,
        )
    ]


# -- Interview: Score@1 and follow-up accuracy (section 3.2) over seed questions -----------------------------

IV_ABILITY, IV_SEED_SD, IV_FOLLOWUPS = 0.0, 1.5, 3
#: each metric's shift on the logit: follow-ups a little easier; the single-turn judge sees the unmodified question
IV_SHIFT = {"score@1": 0.0, "judge": 0.3, "followup_accuracy.overall": 0.5}


def interview_run(rng: Rng, seeds: int, repeats: int) -> dict[str, dict[str, Any]]:
    """``seeds`` seed questions of random difficulty, ``repeats`` sessions each; a session's seed answer (one
    interaction), its single-turn judge verdict (Table 2 "Judge", one judge) and its follow-ups are right with
    the seed question's probability (:data:`IV_SHIFT`)."""
    records = []
    judge = rng.spawn(1)[0]  # a child stream: the seed answers and follow-ups draw as they did without a judge
    for s in range(seeds):
        u = IV_SEED_SD * rng.normal()
        for r in range(repeats):
            seed_right = float(rng.random() < logistic(IV_ABILITY + u))
            judged = float(judge.random() < logistic(IV_ABILITY + IV_SHIFT["judge"] + u))
            follow = rng.random(IV_FOLLOWUPS) < logistic(IV_ABILITY + IV_SHIFT["followup_accuracy.overall"] + u)
            records.append(
                {
                    "status": "ok",
                    "unit_id": f"s{s}-r{r}",
                    "seed_id": f"s{s}",
                    "seed_scores": [seed_right],
                    "single_turn": {"score": judged},
                    "followup_results": [{"correct": bool(c)} for c in follow],
                }
            )
    return interview_intervals(records, 1)["intervals"]


def interview_metric(rng: Rng, seeds: int, repeats: int, metric: str) -> dict[str, Any]:
    return interview_run(rng, seeds, repeats)[metric]


def interview_cells() -> list[Cell]:
    cells = []
    for metric, shift in IV_SHIFT.items():
        for seeds, repeats in ((7, 1), (30, 1), (7, 3), (30, 3)):
            cells.append(
                Cell(
                    "interview",
                    metric,
                    f"{seeds} seeds x {repeats}",
                    expected_logistic(IV_ABILITY + shift, IV_SEED_SD),
                    partial(interview_metric, seeds=seeds, repeats=repeats, metric=metric),
                    default=(seeds, repeats) == (7, 1),  # the shipped sample, one session per seed question
                    smallest=(seeds, repeats) == (7, 1),
                )
            )
    return cells


# -- ATAD --evaluate: Table 1's average accuracy over distinct problems --------------------------------------

TASKS = [f"T{i}" for i in range(1, 8)]
AT_TASK_LOGIT = np.linspace(-1.0, 1.0, 7)  # the tasks' mean ability of the examinee
AT_PROBLEM_SD = 2.0  # problems within a task differ: copies of one problem are answered alike


def _atad_truth() -> float:
    return 100 * float(np.mean([expected_logistic(m, AT_PROBLEM_SD) for m in AT_TASK_LOGIT]))


def atad_run(rng: Rng, distinct: list[int], copies: int, merged: bool = True) -> dict[str, Any]:
    """A benchmark file with ``distinct[t]`` distinct problems of task t, each present ``copies`` times under
    different ids (generated benchmarks repeat problems); the examinee answers each copy with the problem's own
    probability of being right. ``merged=False`` keys every copy apart (answers counted as independent problems:
    what Table 1's interval must not do)."""
    answers = []
    for t, (task, count) in enumerate(zip(TASKS, distinct)):
        for j in range(count):
            p = logistic(AT_TASK_LOGIT[t] + AT_PROBLEM_SD * rng.normal())
            for c in range(copies):
                key = f"{task}:{j}" if merged else f"{task}:{j}:{c}"
                answers.append(("bench.jsonl", task, bool(rng.random() < p), key))
    return evaluation_intervals({"m": answers})["intervals"]["table1.m.avg"]


def atad_cells() -> list[Cell]:
    truth = _atad_truth()
    dup = [2, 2, 2, 2, 2, 2, 3]
    sizes = {
        "7 problems (the sample)": ([1] * 7, 1, True),
        "30 problems, 15 distinct": (dup, 2, True),
        "30 problems, 15 distinct, copies counted apart": (dup, 2, False),
        "70 problems": ([10] * 7, 1, True),
    }
    return [
        Cell(
            "atad",
            "table1 avg",
            label,
            truth,
            partial(atad_run, distinct=d, copies=c, merged=m),
            default=label.startswith("7 "),  # --evaluate without --benchmark answers the shipped sample
            smallest=label.startswith("7 "),
        )
        for label, (d, c, m) in sizes.items()
    ]


# -- ATAD generation: the finalized and discarded counts and the mean level of the finalized problems ---------

AT_FINALIZED = 0.7  # a unit's problem is finalized (approved, escalated until the student fails) or discarded
AT_LEVEL_SHARES = (0.3, 0.3, 0.25, 0.15)  # the level a finalized problem reached (the default ladder's 4 tiers)


def atad_generation_run(rng: Rng, size: int, metric: str) -> dict[str, Any]:
    """``size`` units, each generating its own problem: finalized with :data:`AT_FINALIZED`, at a level drawn
    from :data:`AT_LEVEL_SHARES` (Appendix C's escalation)."""
    items = [
        {"item_status": "finalized", "level": int(rng.choice(4, p=AT_LEVEL_SHARES))}
        if rng.random() < AT_FINALIZED
        else {"item_status": "discarded"}
        for _ in range(size)
    ]
    return generation_intervals(items)["intervals"].get(metric, {})


def atad_generation_cells() -> list[Cell]:
    """``--per-task 1`` (the default: 7 problems, one per task, also the smallest run), 3 and 10."""
    truths = {
        "finalized": lambda k: k * AT_FINALIZED,
        "discarded": lambda k: k * (1 - AT_FINALIZED),
        "mean_level": lambda k: float(np.dot(range(4), AT_LEVEL_SHARES)),
    }
    return [
        Cell(
            "atad",
            metric,
            f"{k} problems",
            truth(k),
            partial(atad_generation_run, size=k, metric=metric),
            default=k == 7,
            smallest=k == 7,
        )
        for metric, truth in truths.items()
        for k in (7, 21, 70)
    ]


# -- judgecheck: agreement measures of a judge with the human labels, pairwise, both orders ----------------

JC_ABILITY, JC_ITEM_SD, JC_RESAMPLES = 1.0, 1.0, 1000
JC_LABELS, JC_SHARES = ("1", "2", "tie"), (0.45, 0.45, 0.10)  # pairwise labels, ties rarer (MT-Bench style)


def judgecheck_obs(rng: Rng, size: int) -> list[Obs]:
    """``size`` items with labels 1, 2 or tie, each judged once in each order (the swapped verdict in the
    original numbering): a verdict matches the label with the item's probability (logistic of ability plus an
    item effect), else it is one of the two other labels at random; the orders are independent given the item."""
    label = rng.choice(3, size, p=JC_SHARES)
    draw = rng.random(size)
    p = logistic(JC_ABILITY + JC_ITEM_SD * rng.normal(size=size))
    first = np.where(draw < p, label, (label + 1 + rng.integers(0, 2, size)) % 3)
    swapped = rng.spawn(1)[0]  # a child stream: the original order's draws stay those of a one-order run
    second = np.where(swapped.random(size) < p, label, (label + 1 + swapped.integers(0, 2, size)) % 3)
    return [
        Obs(str(i), "", JC_LABELS[a], {(0, "original"): JC_LABELS[v], (0, "swapped"): JC_LABELS[w]})
        for i, (a, v, w) in enumerate(zip(label, first, second))
    ]


def _measured(measure: Callable[[list[Obs]], Measure]) -> Callable[[list[Obs]], dict[str, Any]]:
    """A measure's interval as judgecheck's summary computes it (the run's default resamples and seed)."""
    return lambda obs: intervals(measure(obs), len(obs), resamples=JC_RESAMPLES, seed=0)[""]


def _macro_f1(obs: list[Obs]) -> dict[str, Any]:
    return per_class(obs, JC_LABELS, resamples=JC_RESAMPLES, seed=0)["macro"]["f1"]


#: the pairwise summary's ``accuracy_original`` and ``kappa_original`` are ``accuracy`` and ``kappa`` of the
#: original order: one cell each
JC_METRICS: dict[str, Callable[[list[Obs]], dict[str, Any]]] = {
    "accuracy, accuracy_original": _measured(accuracy),
    "kappa, kappa_original": _measured(kappa),
    "accuracy_mean": _measured(mean_accuracy),
    "swap_consistency": _measured(swap_consistency),
    "macro F1": _macro_f1,
}


def judgecheck_run(rng: Rng, size: int, metric: str) -> dict[str, Any]:
    """One judged set of ``size`` items: the interval of ``metric`` (:data:`JC_METRICS`)."""
    return JC_METRICS[metric](judgecheck_obs(rng, size))


def _expected_table() -> np.ndarray:
    """The population's contingency table (label x verdict): ``share_i * (a if i == j else (1 - a) / 2)``."""
    a = expected_logistic(JC_ABILITY, JC_ITEM_SD)
    return np.asarray(JC_SHARES)[:, None] * np.where(np.eye(3, dtype=bool), a, (1 - a) / 2)


def judgecheck_truth(metric: str) -> float:
    """The population's value: agreement ``a = E[logistic(ability + item effect)]``; kappa and macro F1 from
    the expected table; swap consistency ``E[p^2 + (1 - p)^2 / 2]`` over the items' probabilities ``p``."""
    table = _expected_table()
    if metric.startswith("accuracy"):
        return float(np.trace(table))
    if metric == "swap_consistency":
        return expected(lambda z: (q := logistic(JC_ABILITY + JC_ITEM_SD * z)) ** 2 + (1 - q) ** 2 / 2)
    if metric == "macro F1":
        return float(np.mean(2 * np.diag(table) / (table.sum(axis=0) + table.sum(axis=1))))
    chance = float((table.sum(axis=1) * table.sum(axis=0)).sum())
    return (np.trace(table) - chance) / (1 - chance)


def judgecheck_cells() -> list[Cell]:
    items = {20: "items", 100: "items"}  # 20: the smallest set docs/statistics.md supports; 100: a typical one
    return [
        cell
        for metric in JC_METRICS
        for cell in sized_cells(
            "judgecheck",
            metric,
            judgecheck_truth(metric),
            partial(judgecheck_run, metric=metric),
            items,
            default=100,
            smallest=20,
        )
    ]


# -- --trials: pass^k and the flip rate over items of K trials each (results/trials.py) ----------------------

TR_TRIALS = 4
#: an item's chance of a right answer: logistic of ability plus its cluster's effect (a JudgeAgent batch's topic)
#: and its own; items of one cluster share the first
TR_ABILITY, TR_CLUSTER_SD, TR_ITEM_SD = 0.5, 1.0, 1.2


def _tr_p(z: Any, u: Any) -> Any:
    return logistic(TR_ABILITY + TR_CLUSTER_SD * z + TR_ITEM_SD * u)


#: the population value of each measure (``z``: the cluster's effect, ``u``: the item's)
TR_TRUTH: dict[str, Callable[..., Any]] = {
    **{f"pass^{k}": partial(lambda z, u, k: _tr_p(z, u) ** k, k=k) for k in range(1, TR_TRIALS + 1)},
    "flip_rate": lambda z, u: 1 - _tr_p(z, u) ** TR_TRIALS - (1 - _tr_p(z, u)) ** TR_TRIALS,
}


def trials_run(rng: Rng, clusters: int, per: int, metric: str) -> dict[str, Any]:
    """``clusters`` clusters of ``per`` items, each item answered :data:`TR_TRIALS` times, right with its own
    chance every time (independent trials)."""
    items = []
    for c in range(clusters):
        z = rng.normal()
        for _ in range(per):
            p = float(_tr_p(z, rng.normal()))
            items.append(ItemTrials(str(c), [bool(x) for x in rng.random(TR_TRIALS) < p]))
    found = flip_rate(items) if metric == "flip_rate" else pass_k(items, int(metric.removeprefix("pass^")))
    return found.interval() if found else {}


def trials_cells() -> list[Cell]:
    """Items of their own (ATAD's problems, interview sessions: the shipped samples' 7 the smallest, 30 the
    default) and items in clusters of 3 (JudgeAgent's batches: the shipped sample's 5), 4 trials each."""
    sizes = {(7, 1): "7 items", (30, 1): "30 items", (5, 3): "5 batches of 3 items", (10, 3): "10 batches of 3 items"}
    return [
        Cell(
            "trials",
            metric,
            f"{label} x {TR_TRIALS} trials",
            expected(truth, 2),
            partial(trials_run, clusters=clusters, per=per, metric=metric),
            default=(clusters, per) == (30, 1),
            smallest=(clusters, per) in ((7, 1), (5, 3)),
        )
        for metric, truth in TR_TRUTH.items()
        for (clusters, per), label in sizes.items()
    ]


def cells() -> list[Cell]:
    return [
        *llmeval_cells(),
        *judgeagent_cells(),
        *interview_cells(),
        *atad_cells(),
        *atad_generation_cells(),
        *judgecheck_cells(),
        *trials_cells(),
    ]


def run_cell(cell: Cell, reps: int, seed: int = 0) -> Coverage:
    """``reps`` simulated runs of ``cell`` (one seeded generator per cell)."""
    rng = np.random.default_rng([seed, zlib.crc32(f"{cell.protocol}|{cell.metric}|{cell.size}".encode())])
    covered = above = below = none = withheld = 0
    widths, methods = [], set()
    for _ in range(reps):
        got = cell.simulate(rng)
        low, high = got.get("low"), got.get("high")
        if low is None or high is None:
            if got.get("note"):
                withheld += 1
            else:
                none += 1
            continue
        methods.add(str(got.get("method")))
        widths.append(high - low)
        if low > cell.truth:
            above += 1
        elif high < cell.truth:
            below += 1
        else:
            covered += 1
    width = float(np.mean(widths)) if widths else 0.0
    return Coverage(cell, reps, covered, above, below, none, withheld, width, tuple(methods))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1000, help="simulated runs per cell")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="one protocol: llmeval, judgeagent, interview, atad, judgecheck, trials")
    ap.add_argument("--metric", help="one metric, as the table's metric column names it")
    args = ap.parse_args()
    started = time.monotonic()
    print(
        "| protocol | metric | run size | truth | coverage | mean width | above | below | no interval "
        "| withheld (reason given) | method |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cell in cells():
        if args.only not in (None, cell.protocol) or args.metric not in (None, cell.metric):
            continue
        c = run_cell(cell, args.reps, args.seed)
        tag = " (default)" if cell.default else " (smallest)" if cell.smallest else ""
        print(
            f"| {cell.protocol} | {cell.metric} | {cell.size}{tag} | {cell.truth:.3g} | {100 * c.share:.1f} % "
            f"| {c.mean_width:.3g} | {c.above} | {c.below} | {c.none} | {c.withheld} "
            f"| {', '.join(sorted(c.methods))} |",
            flush=True,
        )
    print(f"\n{args.reps} runs per cell, seed {args.seed}, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
