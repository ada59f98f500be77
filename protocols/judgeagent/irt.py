"""Adaptive base questions for JudgeAgent (issue 17): item parameters from earlier runs, the plan, the summary.

**Responses.** ``--irt-runs DIR[,DIR...]`` (each a run directory or a glob) names earlier JudgeAgent runs of
other targets on the same questions. Each run's latest record per unit (``results.jsonl``) holds, per base
question, the verdict of that run's target: correct and wrong are responses, ungraded is none. An examinee is
a target model as it answers (:meth:`state.config.ModelSpec.answer_identity`: model, endpoint, temperature,
max tokens ...); of its answers to a question the latest counts, runs taken in the order of their run ids
(which begin with their start time). The current run's target is no examinee: its ability is what the run
measures.

**Calibration.** 1PL or 2PL (``--irt-model``) by the marginal MAP EM of :func:`nodes.irt.calibrate`, the one
LLMEval uses. Questions with fewer than ``--irt-min-responses`` responses stay uncalibrated and are not asked.

**Plan.** The calibrated questions are split into pools of ``--batch-size`` (``SPLIT_BATCHES``); a unit
asks ``--irt-items`` of its pool, each chosen by information at the ability so far
(:mod:`nodes.judgeagent.adaptive`). The fit is written to ``irt_calibration.json`` in the run directory and the
pool's item parameters into each unit, so a resumed run keeps them.

**Refused** (``InputError`` naming ``--irt-runs``, before the run sends anything): a path that does not exist
or a glob matching no run directory (one holding a ``config.json``), a directory that is no finished JudgeAgent
run, a run on another benchmark (no question id in common, or a shared id whose question, answer or options
differ), and fewer calibrated questions than ``--irt-items``.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import numpy as np

from dyneval.nodes import irt
from dyneval.protocols.judgeagent.data import split_batches
from dyneval.runtime.protocol import Run, Unit
from dyneval.state.errors import InputError
from dyneval.state.judgeagent import BaseQuestion, JudgeAgentContext
from dyneval.state.verdicts import is_ungraded
from dyneval.stores.files import write_atomic
from dyneval.stores.rundir import RESULTS, RunDir, is_run

FLAG = "--irt-runs"
CALIBRATION_FILE = "irt_calibration.json"
#: What makes two plans' questions the same question.
SAME = ("question", "answer", "options")


def run_dirs(spec: str, current: Path) -> list[Path]:
    """The run directories ``spec`` names (comma-separated paths or globs), the current run left out."""
    found: list[Path] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        # a glob keeps the run directories it matches (``runs/*`` also matches ``runs/_cache``)
        matches = [m for m in sorted(glob.glob(part)) if is_run(Path(m))] if glob.has_magic(part) else [part]
        if not matches:
            raise InputError(f"{part!r} matches no run directory", field=FLAG)
        for m in map(Path, matches):
            if not m.is_dir():
                raise InputError(f"{m}: no such run directory", field=FLAG)
            if m.resolve() != current.resolve() and m.resolve() not in {f.resolve() for f in found}:
                found.append(m)
    if not found:
        raise InputError("names no earlier run", field=FLAG)
    return sorted(found, key=lambda d: (d.name, str(d)))


def examinee(run_dir: Path) -> tuple[str, str]:
    """``(key, label)`` of a run's target: its answer identity, and ``model@endpoint`` to show."""
    config = RunDir(run_dir, FLAG).run_config()
    if config.protocol != "judgeagent":
        raise InputError(f"{run_dir} is a run of {config.protocol}, not judgeagent", field=FLAG)
    spec = config.spec_for("target").answer_identity()
    label = "local" if spec["provider"] == "embedded" else f"{spec['model']}@{spec['base_url']}"
    return json.dumps(spec, sort_keys=True), label


def check_same_benchmark(run_dir: Path, questions: dict[str, BaseQuestion]) -> None:
    """Refuse a run whose plan shares no question with this benchmark or asks a shared id differently."""
    shared = 0
    for unit in RunDir(run_dir, FLAG).plan():
        for q in unit.get("input", {}).get("batch") or []:
            ours = questions.get(str(q.get("id")))
            if ours is None:
                continue
            shared += 1
            diff = [k for k in SAME if q.get(k) != getattr(ours, k)]
            if diff:
                raise InputError(
                    f"{run_dir} was on another benchmark: its question {ours.id!r} differs in {', '.join(diff)}",
                    field=FLAG,
                )
    if not shared:
        raise InputError(f"{run_dir} was on another benchmark: none of its questions is in this one", field=FLAG)


def responses(
    dirs: list[Path], questions: dict[str, BaseQuestion], exclude: str
) -> tuple[dict[tuple[str, str], int], list[dict[str, Any]], dict[str, str]]:
    """``(examinee key, question id) -> 0/1`` (latest graded answer), per run what it gave, key -> label."""
    latest: dict[tuple[str, str], int] = {}
    used, labels = [], {}
    for d in dirs:
        key, label = examinee(d)
        run = RunDir(d, FLAG)
        if not run.has(RESULTS):
            raise InputError(f"{d}: no results.jsonl (not a finished run)", field=FLAG)
        check_same_benchmark(d, questions)
        labels[key] = label
        given = 0
        for record in run.records():
            for b in record.get("base") or []:
                if key == exclude or b.get("id") not in questions or is_ungraded(b):
                    continue
                latest[(key, b["id"])] = int(bool(b.get("correct")))
                given += 1
        used.append(
            {
                "run": str(d),
                "target": label,
                "responses": given,
                "left_out": "the current target" if key == exclude else None,
            }
        )
    return latest, used, labels


def calibrate_runs(run: Run, questions: list[BaseQuestion], model: str, min_responses: int) -> dict[str, Any]:
    """Fit ``model`` on the earlier runs' responses to ``questions``; the fit with its items ``{id: {a, b, n}}``."""
    by_id = {q.id: q for q in questions}
    target = json.dumps(run.config.spec_for("target").answer_identity(), sort_keys=True)
    latest, used, labels = responses(run_dirs(str(run.params["irt_runs"]), run.run_dir), by_id, target)
    counts: dict[str, int] = {}
    for _, qid in latest:
        counts[qid] = counts.get(qid, 0) + 1
    ids = [q.id for q in questions if counts.get(q.id, 0) >= min_responses]
    pairs = [(k, q, y) for (k, q), y in latest.items() if q in set(ids)]
    examinees = sorted({k for k, _, _ in pairs})
    fit: dict[str, Any] = {
        "irt_model": model,
        "min_responses": min_responses,
        "runs": used,
        "examinees": [labels[k] for k in examinees],
        "responses": len(pairs),
        "benchmark_questions": len(questions),
        "calibrated": len(ids),
        "uncalibrated": len(questions) - len(ids),
        "items": {},
    }
    if ids:
        item = {q: i for i, q in enumerate(ids)}
        who = {k: i for i, k in enumerate(examinees)}
        cal = irt.calibrate(
            np.array([who[k] for k, _, _ in pairs]),
            np.array([item[q] for _, q, _ in pairs]),
            np.array([y for _, _, y in pairs]),
            len(ids),
            model=model,
        )
        fit.update(
            iterations=cal.iterations,
            converged=cal.converged,
            items={q: {"a": float(cal.a[i]), "b": float(cal.b[i]), "n": counts[q]} for q, i in item.items()},
        )
    return fit


def adaptive_units(
    run: Run, questions: list[BaseQuestion], ctx: JudgeAgentContext, batch: Any, source: str
) -> list[Unit]:
    """The plan with ``--irt-runs``: pools of calibrated questions with their item parameters."""
    fit = calibrate_runs(run, questions, batch.irt_model, batch.irt_min_responses)
    if fit["calibrated"] < ctx.irt_items:
        raise InputError(
            f"only {fit['calibrated']} of the {len(questions)} questions have "
            f"{batch.irt_min_responses} or more responses in the earlier runs (--irt-min-responses), "
            f"fewer than --irt-items {ctx.irt_items}",
            field=FLAG,
        )
    items = fit["items"]
    write_atomic(run.run_dir / CALIBRATION_FILE, json.dumps(fit, indent=2))
    run.console.print(
        f"adaptive grading: {fit['calibrated']} of {len(questions)} questions calibrated "
        f"({batch.irt_model}, {len(fit['examinees'])} earlier targets, {fit['responses']} responses); "
        f"{ctx.irt_items} asked from each pool of up to {batch.batch_size}",
        markup=False,
        highlight=False,
    )
    if batch.batch_size <= ctx.irt_items:
        run.console.print(
            "note: --batch-size (the pool) is not larger than --irt-items: every calibrated "
            "question is asked, only the order and the first difficulty change",
            markup=False,
            highlight=False,
        )
    calibrated = [q for q in questions if q.id in items]
    return [
        Unit(
            id=f"batch-{i:04d}",
            input={
                "batch": [q.model_dump() for q in pool],
                "irt": {q.id: [items[q.id]["a"], items[q.id]["b"]] for q in pool},
            },
            meta={"questions": [q.id for q in pool], "source": source},
        )
        for i, pool in enumerate(split_batches(calibrated, batch.batch_size), 1)
    ]


def adaptive_result(state: dict[str, Any]) -> dict[str, Any]:
    """The unit record's ``adaptive`` part: theta +/- SE, asked questions, first difficulty, the choices."""
    return {"adaptive": {**state.get("ability", {}), "trace": state.get("irt_trace", [])}}


def adaptive_summary(run: Run, ok: list[dict[str, Any]]) -> dict[str, Any]:
    """``adaptive_grading`` of the summary (nothing without ``--irt-runs``): the fit, the pooled ability on the
    calibrated benchmark with its 95 % interval, and the base answers not asked."""
    path = run.run_dir / CALIBRATION_FILE
    if not path.exists():
        return {}
    fit = json.loads(path.read_text(encoding="utf-8"))  # this run's own, written by adaptive_units
    items = fit.pop("items")
    graded = [b for r in ok for b in r["base"] if b["id"] in items and not is_ungraded(b)]
    theta = irt.eap(
        [items[b["id"]]["a"] for b in graded],
        [items[b["id"]]["b"] for b in graded],
        [int(bool(b["correct"])) for b in graded],
    )
    a = np.array([v["a"] for v in items.values()])
    b = np.array([v["b"] for v in items.values()])

    def accuracy(t: float) -> float:
        return float(irt.probability(t, a, b).mean())

    units = [r for r in ok if r.get("adaptive")]
    adaptive = [r["adaptive"] for r in units]
    not_asked = sum(x["not_asked"] for x in adaptive)
    firsts: dict[str, int] = {}
    for x in adaptive:
        firsts[x["first_difficulty"]] = firsts.get(x["first_difficulty"], 0) + 1
    return {
        "adaptive_grading": {
            "calibration": fit,
            "ability": {
                "theta": theta.theta,
                "se": theta.se,
                "responses": theta.n,
                "theta_95": [theta.theta - irt.Z95 * theta.se, theta.theta + irt.Z95 * theta.se],
            },
            "expected_accuracy": {
                "value": accuracy(theta.theta),
                "low": accuracy(theta.theta - irt.Z95 * theta.se),
                "high": accuracy(theta.theta + irt.Z95 * theta.se),
                "questions": len(items),
            },
            "pool_questions": sum(x["pool"] for x in adaptive),
            "asked": sum(len(x["asked"]) for x in adaptive),
            "not_asked": not_asked,
            "saved": {
                "base_answers": not_asked,
                "validation_answers": sum(r["adaptive"]["not_asked"] for r in units if r["validation"]),
            },
            "first_difficulty": firsts,
        }
    }
