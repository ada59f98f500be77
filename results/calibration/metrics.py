"""How each judge-based headline metric of a run follows from its judge's verdicts, read from the run folder.

For ``--calibration``: per protocol, every headline metric the judge decides, either as an estimator that
corrects it by the labels (:mod:`.estimates`) or with the reason it cannot be corrected. Each metric's units are
those of its raw interval (the run's summary), so the two intervals rest on the same independent units:

* interview (seed 004, section 3.2), clustered by seed question: Score@n (the answer each session had at
  interaction ``n``; a session solved earlier carries its answer judged correct forward, so that answer counts at
  its expected truth given the verdict, per interaction: :class:`.estimates.VerdictCounts`), the single-turn
  ``Judge`` score, follow-up accuracy, and the share of all judged answers judged correct. Long-form factual
  sessions score a factual precision, not a correct / wrong verdict: their Score@n and Judge are not corrected;
* JudgeAgent (seed 000), clustered by batch: the score (Algorithm 1, line 35: the gains of the correct answers
  over the graded ones; an answer the evaluator judged weighs its difficulty's gain), base accuracy, and ACC1,
  ACC2, CR, CtE (Algorithm 2) from the joint correction of each question's two verdicts; a verdict compared in
  code (a choice letter, an empty or exact reply) is taken as the truth;
* LLMEval-3 (seed 002), over each session's answers: S (equation 1) from the judge's 0-3 stars; R (equation 2)
  is not corrected (:data:`R_NOTE`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dyneval.results.calibration.estimates import (
    PAIR_METRICS,
    Calibrated,
    VerdictCounts,
    calibrated_pairs,
    calibrated_stars,
    calibrated_verdicts,
)
from dyneval.results.review.items import STARS, by_evaluator, by_grader, llmeval_sessions
from dyneval.results.stats import clustered
from dyneval.runtime.protocol import with_results
from dyneval.state.judgeagent import DifficultyControl
from dyneval.stores.rundir import RunDir

#: The share of all the judge's decisions that say correct: not a headline metric of the papers, the judge's
#: own (its key in ``summary["metrics"]["judge_calibration"]["metrics"]``).
JUDGED = "judged answers correct"
FACTUAL_NOTE = (
    "long-form factual sessions score the factual precision of their atomic facts (seed 004, section 3.2), not "
    "a correct / wrong verdict the labels measure"
)
R_NOTE = (
    "R is a mean over sessions of each session's ratio of two judged sums (the model's and the reference model's "
    "stars on the same questions, equation 2): correcting it needs each session's true S, which a few answers "
    "per session cannot give; the confusion-matrix correction holds for shares pooled over many answers"
)

#: (the labelled items' judge verdicts and human labels as class indices (1 = correct; a star count), the
#: generator, the bootstrap replicates) -> the estimates of one or more metrics.
Estimator = Callable[[np.ndarray, np.ndarray, np.random.Generator, int], dict[str, Calibrated]]


@dataclass
class Corrections:
    """A run's judge-based metrics: estimators of their corrected values, and why the others are not corrected
    (metric path -> reason). ``raw`` holds the value and interval of metrics that are not the summary's own."""

    estimators: list[Estimator] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)


def _verdicts(path: str, counts: VerdictCounts) -> Estimator:
    return lambda j, h, rng, n: {path: calibrated_verdicts(counts, j, h, rng=rng, replicates=n)}


def _judged_share(out: Corrections, counts: VerdictCounts, cluster: str) -> None:
    """The share of the judge's decisions that say correct, raw (cluster-robust over ``cluster``) and corrected."""
    correct, judged = list(counts.counted_correct[:, 0]), [int(d) for d in counts.denominator]
    raw = clustered(correct, judged, "answers", cluster, (0, 1))
    if raw is not None:
        out.raw[JUDGED] = raw.interval()
    out.estimators.append(_verdicts(JUDGED, counts))


class _Counts:
    """:class:`VerdictCounts` built one answer at a time, per cluster and stratum."""

    def __init__(self, strata: int = 1) -> None:
        self.strata = strata
        self.clusters: dict[str, int] = {}
        self.rows: dict[str, list[list[float]]] = defaultdict(list)

    def _row(self, cluster: str) -> int:
        if cluster not in self.clusters:
            self.clusters[cluster] = len(self.clusters)
            for name in ("judged", "said_correct", "counted_correct", "counted_wrong"):
                self.rows[name].append([0.0] * self.strata)
            self.rows["fixed"].append([0.0])
            self.rows["denominator"].append([0.0])
        return self.clusters[cluster]

    def among(self, cluster: str, stratum: int, correct: bool, weight: float = 1.0) -> None:
        """A judged answer of ``stratum`` (its verdict ``correct``), whether the metric counts it or not."""
        u = self._row(cluster)
        self.rows["judged"][u][stratum] += weight
        self.rows["said_correct"][u][stratum] += weight * correct

    def counted(self, cluster: str, stratum: int | None, correct: float, weight: float = 1.0) -> None:
        """An answer the metric counts: judged (``stratum``) or decided without the judge (``None``: its value)."""
        u = self._row(cluster)
        self.rows["denominator"][u][0] += 1
        if stratum is None:
            self.rows["fixed"][u][0] += weight * correct
        else:
            self.rows["counted_correct" if correct else "counted_wrong"][u][stratum] += weight

    def built(self) -> VerdictCounts:
        names = ("judged", "said_correct", "counted_correct", "counted_wrong", "fixed", "denominator")
        a = {k: np.array(self.rows[k], float).reshape(len(self.clusters), -1 if self.clusters else 1) for k in names}
        return VerdictCounts(
            a["judged"],
            a["said_correct"],
            a["counted_correct"],
            a["counted_wrong"],
            a["fixed"][:, 0],
            a["denominator"][:, 0],
        )

    def share(self, cluster: str, stratum: int, answer: dict[str, Any], judged: bool) -> None:
        """An answer of a plain share: among its stratum and counted."""
        correct = answer["verdict"] == "correct"
        if judged:
            self.among(cluster, stratum, correct)
        self.counted(cluster, stratum if judged else None, correct)


def _graded(answer: dict[str, Any] | None) -> bool:
    return isinstance(answer, dict) and answer.get("verdict") in ("correct", "wrong")


def _interview(run: RunDir) -> Corrections:
    summary = run.summary()
    return interview(with_results(run.records()), int((summary.metrics if summary else {}).get("n_max") or 1))


def interview(records: list[dict[str, Any]], n_max: int) -> Corrections:
    """The corrections of an interview's sessions (records with results) of up to ``n_max`` seed interactions."""
    out = Corrections()
    everything, followups, single = _Counts(), _Counts(), _Counts()
    factual_single = False
    for r in records:
        seed = str(r.get("seed_id", r["unit_id"]))
        answers = [*(r.get("seed_interactions") or []), *(r.get("followup_results") or [])]
        answers += [r["single_turn"]] if r.get("single_turn") else []
        for a in answers:
            if _graded(a) and by_grader(a):
                everything.share(seed, 0, a, True)
        for a in r.get("followup_results") or []:
            if _graded(a):
                followups.share(seed, 0, a, by_grader(a))
        if _graded(r.get("single_turn")):
            factual_single |= r.get("task") == "factual"
            single.share(seed, 0, r["single_turn"], by_grader(r["single_turn"]))
    _judged_share(out, everything.built(), "seed questions")
    out.estimators.append(_verdicts("followup_accuracy.overall", followups.built()))
    if factual_single:
        out.notes["judge"] = FACTUAL_NOTE
    else:
        out.estimators.append(_verdicts("judge", single.built()))
    sessions = [r for r in records if _seed_answers(r, n_max) is not None]
    if any(r.get("task") == "factual" for r in sessions):
        out.notes.update({f"score@{n}": FACTUAL_NOTE for n in range(1, n_max + 1)})
        return out
    for n in range(1, n_max + 1):
        counts = _Counts(n_max)
        for r in sessions:
            chain = _seed_answers(r, n_max) or []
            seed = str(r.get("seed_id", r["unit_id"]))
            for k, a in enumerate(chain):
                if by_grader(a):
                    counts.among(seed, k, a["verdict"] == "correct")
            k = min(n, len(chain)) - 1
            counts.counted(seed, k if by_grader(chain[k]) else None, chain[k]["verdict"] == "correct")
        out.estimators.append(_verdicts(f"score@{n}", counts.built()))
    return out


def _seed_answers(record: dict[str, Any], n_max: int) -> list[dict[str, Any]] | None:
    """A session's seed-question answers by interaction, when each up to ``n_max`` is graded (Score@n's sessions:
    a session solved earlier carries its last answer forward; one with an ungraded answer leaves every Score@n)."""
    chain = sorted(record.get("seed_interactions") or [], key=lambda a: a.get("attempt") or 0)[:n_max]
    if not chain or not all(_graded(a) for a in chain):
        return None
    return chain


def _judgeagent(run: RunDir) -> Corrections:
    params = run.config().params
    given = "gains" in params and "thresholds" in params  # the run's resolved options (else their defaults)
    control = DifficultyControl.parse(str(params["gains"]), str(params["thresholds"])) if given else DifficultyControl()
    return judgeagent(with_results(run.records()), control)


def judgeagent(records: list[dict[str, Any]], control: DifficultyControl) -> Corrections:
    """The corrections of JudgeAgent's batches (records with results) under the run's difficulty ``control``."""
    out = Corrections()
    score, base, everything = _Counts(), _Counts(), _Counts()
    cells = []
    for r in records:
        batch = r["unit_id"]
        rounds = [x for x in r.get("rounds") or [] if x.get("status", "ok") == "ok"]
        for a in [*(r.get("base") or []), *rounds]:
            if not _graded(a):
                continue
            correct = a["verdict"] == "correct"
            if by_evaluator(a):
                gain = control.gain(a.get("difficulty"))
                score.among(batch, 0, correct, gain)
                score.counted(batch, 0, correct, gain)
                everything.share(batch, 0, a, True)
            else:
                score.counted(batch, None, float(a.get("gain") or 0.0))
        for a in r.get("base") or []:
            if _graded(a):
                base.share(batch, 0, a, by_evaluator(a))
        how = {b.get("id"): by_evaluator(b) for b in r.get("base") or []}
        unit = np.zeros((4, 4), int)
        for v in r.get("validation") or []:
            if v.get("correct1") is None or v.get("correct2") is None:
                continue
            group = 2 * how.get(v.get("id"), False) + (v.get("how2") == "evaluator")
            unit[group, 2 * bool(v["correct1"]) + bool(v["correct2"])] += 1
        cells.append(unit)
    _judged_share(out, everything.built(), "batches")
    out.estimators += [
        _verdicts("score", score.built()),
        _verdicts("base_accuracy.value", base.built()),
    ]
    if cells:
        pairs = np.array(cells)
        out.estimators.append(
            lambda j, h, rng, n: {
                f"validation.overall.{k}": v for k, v in calibrated_pairs(pairs, j, h, rng=rng, replicates=n).items()
            }
        )
    else:
        out.notes.update({f"validation.overall.{k}": "no validated questions" for k in PAIR_METRICS})
    return out


def llmeval(sessions: list[dict[str, Any]]) -> Corrections:
    """The corrections of LLMEval-3's sessions (records with their judged ``answers``)."""
    out = Corrections(notes={"R": R_NOTE})
    counts = [
        np.bincount([int(a["stars"]) for a in answers], minlength=len(STARS))
        for session in sessions
        if session.get("S") is not None and (answers := [a for a in session["answers"] if a.get("stars") is not None])
    ]
    values = [100 * s / (len(STARS) - 1) for s in range(len(STARS))]
    out.estimators.append(
        lambda j, h, rng, n: {"S": calibrated_stars(np.array(counts), values, j, h, rng=rng, replicates=n)}
    )
    return out


#: The protocols whose judge-based metrics ``--calibration`` corrects from the run folder.
CORRECTIONS: dict[str, Callable[[RunDir], Corrections]] = {
    "interview": _interview,
    "judgeagent": _judgeagent,
    "llmeval": lambda run: llmeval(llmeval_sessions(run)),
}
