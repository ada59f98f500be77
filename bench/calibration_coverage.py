"""Coverage of ``--calibration``'s judge-calibrated intervals, measured by simulation with a known truth.

Each protocol's runs are simulated with targets of known ability and a judge of set error (correct / wrong
verdicts: sensitivity :data:`SE`, specificity :data:`SP`; 0-3 stars: the confusion matrix :data:`STAR_ERRORS`),
shaped as the protocol writes its records; a random sample of the run's judged answers is labelled with the truth.
The calibrated estimates come from the functions ``--calibration`` calls on a run's records
(:mod:`results.calibration.metrics`), the raw intervals from the protocol's own (``protocols/*/metrics.py``).
Per metric it prints the truth (the metric of a run of infinite size, from one simulated run of
:data:`TRUTH_UNITS` units), the share of runs whose raw and whose calibrated 95 % interval contain it (with the
counts), the calibrated interval's mean half-width, and the runs the calibration could not correct (a judge too
weak on the drawn labels: counted as misses).

    python bench/calibration_coverage.py [--runs 500] [--replicates 2000] [--units 300] [--labels 60] [--only interview]

Importable: :func:`coverage` runs one protocol at any size (``tests/test_calibration_coverage.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dyneval.protocols.interview.metrics import intervals as interview_intervals  # noqa: E402
from dyneval.protocols.judgeagent.metrics import intervals as judgeagent_intervals  # noqa: E402
from dyneval.protocols.judgeagent.metrics import overall_score, validation_metrics  # noqa: E402
from dyneval.protocols.llmeval.metrics import intervals as llmeval_intervals  # noqa: E402
from dyneval.results.calibration import metrics  # noqa: E402
from dyneval.results.calibration.estimates import REPLICATES, Calibrated  # noqa: E402
from dyneval.state.judgeagent import DIFFICULTIES, DifficultyControl  # noqa: E402

Rng = np.random.Generator
SE, SP = 0.85, 0.80
TRUTH_UNITS = 20_000


def judged(rng: Rng, truth: bool) -> bool:
    """The judge's verdict (True = correct) on an answer whose truth is ``truth``."""
    return bool(rng.random() < SE) if truth else bool(rng.random() >= SP)


def verdict(correct: bool) -> str:
    return "correct" if correct else "wrong"


@dataclass
class Run:
    """One simulated run: its records as the protocol writes them, the judged answers (judge's class, true class)
    a reviewer could label, and each metric's true value in this run."""

    records: list[dict[str, Any]]
    answers: list[tuple[int, int]] = field(default_factory=list)
    truth: dict[str, float] = field(default_factory=dict)


# -- interview (seed 004): Score@n, Judge, follow-up accuracy --------------------------------------------------

N_MAX, FOLLOWUPS = 3, 2
#: a seed answer is right at first with P_FIRST; a retry after the judge said wrong stays right with P_KEEP when the
#: answer was right (the judge erred), and turns right with P_FIX when it was wrong (the feedback helped)
P_FIRST, P_KEEP, P_FIX, P_FOLLOW, P_SINGLE = 0.55, 0.9, 0.35, 0.7, 0.5


def interview_run(rng: Rng, units: int) -> Run:
    """``units`` sessions, one per seed question (math: one verdict per answer), each retrying its seed question
    until the judge says correct or :data:`N_MAX` interactions, with :data:`FOLLOWUPS` follow-ups and a
    single-turn answer."""
    run = Run([])
    truths: dict[str, list[float]] = {f"score@{n}": [] for n in range(1, N_MAX + 1)}
    truths |= {"judge": [], "followup_accuracy.overall": [], metrics.JUDGED: []}
    for i in range(units):
        chain, right = [], []
        for k in range(1, N_MAX + 1):
            t = rng.random() < (P_FIRST if k == 1 else P_KEEP if right[-1] else P_FIX)
            j = judged(rng, t)
            chain.append({"attempt": k, "verdict": verdict(j), "correct": j, "graded_by": "grader", "score": float(j)})
            right.append(t)
            run.answers.append((int(j), int(t)))
            if j:
                break
        follow = []
        for _ in range(FOLLOWUPS):
            t = rng.random() < P_FOLLOW
            j = judged(rng, t)
            follow.append({"verdict": verdict(j), "correct": j, "graded_by": "grader", "type": "rationale"})
            run.answers.append((int(j), int(t)))
            truths["followup_accuracy.overall"].append(t)
        t = rng.random() < P_SINGLE
        j = judged(rng, t)
        run.answers.append((int(j), int(t)))
        truths["judge"].append(t)
        for n in range(1, N_MAX + 1):
            truths[f"score@{n}"].append(right[min(n, len(right)) - 1])
        run.records.append(
            {
                "status": "ok",
                "unit_id": f"u{i}",
                "seed_id": f"s{i}",
                "task": "math",
                "seed_interactions": chain,
                "seed_scores": [a["score"] for a in chain],
                "followup_results": follow,
                "single_turn": {"verdict": verdict(j), "correct": j, "graded_by": "grader", "score": float(j)},
            }
        )
    truths[metrics.JUDGED] = [t for _, t in run.answers]
    run.truth = {k: float(np.mean(v)) for k, v in truths.items()}
    return run


def interview_raw(run: Run) -> dict[str, Any]:
    return interview_intervals(run.records, N_MAX)["intervals"]


def interview_corrections(run: Run) -> metrics.Corrections:
    return metrics.interview(run.records, N_MAX)


# -- JudgeAgent (seed 000): score, base accuracy, ACC1, ACC2, CR, CtE ------------------------------------------

BASE, ROUNDS, CHOICE = 5, 3, 0.3
#: P(right) of a base question and of a generated one by difficulty; a re-answer with the suggestions keeps a
#: right answer with P_KEEP_2 and corrects a wrong one with P_FIX_2 (Algorithm 2)
P_BASE = dict(zip(DIFFICULTIES, (0.8, 0.6, 0.4), strict=True))
P_ROUND = dict(zip(DIFFICULTIES, (0.75, 0.55, 0.35), strict=True))
P_KEEP_2, P_FIX_2 = 0.9, 0.35
CONTROL = DifficultyControl()


def judgeagent_run(rng: Rng, units: int) -> Run:
    """``units`` base questions in batches of :data:`BASE`, a share :data:`CHOICE` of them multiple choice
    (compared in code), the rest free-form judged by the evaluator; :data:`ROUNDS` extension rounds per batch at
    the difficulty the judged running score asks for (Algorithm 1); every base question answered again with the
    suggestions (Algorithm 2)."""
    run = Run([])
    rows, true_gains, answered = [], 0.0, 0
    for b in range(units // BASE):
        base, rounds, validation = [], [], []
        score = 0.0
        for q in range(BASE):
            difficulty = DIFFICULTIES[int(rng.integers(3))]
            choice = rng.random() < CHOICE
            t1 = rng.random() < P_BASE[difficulty]
            t2 = rng.random() < (P_KEEP_2 if t1 else P_FIX_2)
            j1, j2 = (t1, t2) if choice else (judged(rng, t1), judged(rng, t2))
            how = "code" if choice else "evaluator"
            gain = CONTROL.gain(difficulty) if j1 else 0.0
            score += gain
            base.append(
                {
                    "id": f"q{q}",
                    "difficulty": difficulty,
                    "verdict": verdict(j1),
                    "correct": j1,
                    "gain": gain,
                    "how": how,
                }
            )
            validation.append({"id": f"q{q}", "correct1": j1, "correct2": j2, "how2": how})
            rows.append({"correct1": t1, "correct2": t2})
            true_gains += CONTROL.gain(difficulty) * t1
            if not choice:
                run.answers.append((int(j1), int(t1)))
        for k in range(1, ROUNDS + 1):
            difficulty = CONTROL.next_difficulty(score, BASE + k - 1)
            t = rng.random() < P_ROUND[difficulty]
            j = judged(rng, t)
            gain = CONTROL.gain(difficulty) if j else 0.0
            score += gain
            rounds.append(
                {"round": k, "status": "ok", "difficulty": difficulty, "verdict": verdict(j), "correct": j}
                | {"gain": gain, "how": "evaluator"}
            )
            true_gains += CONTROL.gain(difficulty) * t
            run.answers.append((int(j), int(t)))
        answered += BASE + ROUNDS
        run.records.append(
            {
                "status": "ok",
                "unit_id": f"b{b}",
                "base": base,
                "rounds": rounds,
                "validation": validation,
                "score": score,
                "answered": BASE + ROUNDS,
            }
        )
    truth = validation_metrics(rows)
    run.truth = {
        metrics.JUDGED: float(np.mean([t for _, t in run.answers])),
        "score": true_gains / answered,
        "base_accuracy.value": truth["acc1"],
        **{f"validation.overall.{k}": truth[k] for k in ("acc1", "acc2", "cr", "cte")},
    }
    assert abs(overall_score(run.records) - sum(r["score"] for r in run.records) / answered) < 1e-12
    return run


def judgeagent_raw(run: Run) -> dict[str, Any]:
    return judgeagent_intervals(run.records)["intervals"]


def judgeagent_corrections(run: Run) -> metrics.Corrections:
    return metrics.judgeagent(run.records, CONTROL)


# -- LLMEval-3 (seed 002): S from 0-3 stars --------------------------------------------------------------------

SESSION = 30
STAR_SHARES = np.array([0.15, 0.25, 0.35, 0.25])
#: P(judge gives j stars | the answer deserves h): a lenient judge, one star too many a third of the time, rarely
#: one too few
STAR_ERRORS = np.array([[0.6, 0.4, 0.0, 0.0], [0.05, 0.65, 0.3, 0.0], [0.0, 0.05, 0.65, 0.3], [0.0, 0.0, 0.1, 0.9]])


def llmeval_run(rng: Rng, units: int) -> Run:
    """``units`` answers in sessions of :data:`SESSION` questions drawn from the bank, their true stars drawn
    with :data:`STAR_SHARES` and judged through :data:`STAR_ERRORS`."""
    run = Run([])
    for s in range(max(1, units // SESSION)):
        truth = rng.choice(4, size=SESSION, p=STAR_SHARES)
        stars = np.array([rng.choice(4, p=STAR_ERRORS[t]) for t in truth])
        run.answers += [(int(j), int(t)) for j, t in zip(stars, truth, strict=True)]
        run.records.append(
            {
                "unit_id": f"s{s}",
                "S": 100 * float(stars.mean()) / 3,
                "R": None,
                "stars": [int(x) for x in stars],
                "pairs": [],
                "answers": [{"stars": int(x)} for x in stars],
            }
        )
    run.truth = {"S": 100 * float(np.mean([t for _, t in run.answers])) / 3}
    return run


def llmeval_raw(run: Run) -> dict[str, Any]:
    return llmeval_intervals(run.records)["intervals"]


def llmeval_corrections(run: Run) -> metrics.Corrections:
    return metrics.llmeval(run.records)


@dataclass(frozen=True)
class Protocol:
    simulate: Callable[[Rng, int], Run]
    raw: Callable[[Run], dict[str, Any]]
    corrections: Callable[[Run], metrics.Corrections]


PROTOCOLS = {
    "interview": Protocol(interview_run, interview_raw, interview_corrections),
    "judgeagent": Protocol(judgeagent_run, judgeagent_raw, judgeagent_corrections),
    "llmeval": Protocol(llmeval_run, llmeval_raw, llmeval_corrections),
}


@dataclass
class Coverage:
    """Per metric: the truth, the runs whose raw / calibrated interval contains it, and the calibrated half-widths
    and runs without a correction."""

    truth: dict[str, float]
    runs: int = 0
    raw: dict[str, int] = field(default_factory=dict)
    calibrated: dict[str, int] = field(default_factory=dict)
    widths: dict[str, list[float]] = field(default_factory=dict)
    uncorrected: dict[str, int] = field(default_factory=dict)

    def add(self, raw: dict[str, Any], calibrated: dict[str, Calibrated]) -> None:
        self.runs += 1
        for name, truth in self.truth.items():
            r, c = raw.get(name) or {}, calibrated[name]
            self.raw[name] = self.raw.get(name, 0) + _covers(r.get("low"), r.get("high"), truth)
            self.calibrated[name] = self.calibrated.get(name, 0) + _covers(c.low, c.high, truth)
            if c.low is None or c.high is None:
                self.uncorrected[name] = self.uncorrected.get(name, 0) + 1
            else:
                self.widths.setdefault(name, []).append((c.high - c.low) / 2)


def _covers(low: float | None, high: float | None, truth: float) -> bool:
    return low is not None and high is not None and low - 1e-12 <= truth <= high + 1e-12


def coverage(
    protocol: str, runs: int, *, units: int = 300, labels: int = 60, replicates: int = REPLICATES, seed: int = 0
) -> Coverage:
    """The coverage of ``protocol``'s raw and calibrated intervals over ``runs`` simulated runs of ``units`` units
    with ``labels`` labelled answers (seeded: depends only on the arguments)."""
    spec = PROTOCOLS[protocol]
    out = Coverage(spec.simulate(np.random.default_rng([seed, 1]), TRUTH_UNITS).truth)
    rng = np.random.default_rng([seed, 2])
    for _ in range(runs):
        run = spec.simulate(rng, units)
        picked = rng.choice(len(run.answers), size=labels, replace=False)
        judge = np.array([run.answers[i][0] for i in picked])
        human = np.array([run.answers[i][1] for i in picked])
        boot = np.random.default_rng(rng.integers(2**32))
        corrections = spec.corrections(run)
        estimated: dict[str, Calibrated] = {}
        for estimator in corrections.estimators:
            estimated |= estimator(judge, human, boot, replicates)
        out.add(spec.raw(run) | corrections.raw, estimated)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--replicates", type=int, default=REPLICATES)
    parser.add_argument("--units", type=int, default=300)
    parser.add_argument("--labels", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=sorted(PROTOCOLS))
    args = parser.parse_args()
    print(f"judge Se {SE} / Sp {SP} (stars: STAR_ERRORS); {args.units} units, {args.labels} labels, {args.runs} runs")
    print("| protocol | metric | truth | raw covers | calibrated covers | calibrated half-width | not corrected |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in [args.only] if args.only else PROTOCOLS:
        start = time.perf_counter()
        c = coverage(name, args.runs, units=args.units, labels=args.labels, replicates=args.replicates, seed=args.seed)
        for metric, truth in c.truth.items():
            raw, cal = c.raw[metric], c.calibrated[metric]
            width = np.mean(c.widths.get(metric) or [np.nan])
            print(
                f"| {name} | {metric} | {truth:.3f} | {raw / c.runs:.1%} ({raw}/{c.runs}) | "
                f"{cal / c.runs:.1%} ({cal}/{c.runs}) | {width:.3f} | {c.uncorrected.get(metric, 0)} |"
            )
        print(f"({name}: {time.perf_counter() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
