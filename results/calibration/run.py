"""``--calibration LABELS``: a finished run's judge-based headline metrics, raw and judge-calibrated by human labels.

The run's judged answers are the verdicts its judge decided (a verdict compared in code, such as a multiple-choice
letter, or an ungraded answer, is none): the review page's items (:mod:`results.review.items`), each with a key,
``UNIT#WHERE`` (``#seed2``, ``#followup1.1``, ``#single``; ``#base.Q``, ``#round3``; ``#4``, ``#ref.4``), the
``id`` the review page writes. The labels file is JSONL in the format ``judgecheck --labels`` reads, one line per
labelled answer with ``id`` (the key) and ``label`` on the judge's scale (``correct`` / ``wrong``; 0-3 stars).

Labels are for one judge: a label file in the run's own folder (the review of this run) is this run's; any
other must carry, on each line, the ``judge_fingerprint`` of the run it was made on
(:func:`judge_fingerprint`: the judging step, its models' answer-changing settings and its prompt templates),
equal to this run's. A mismatch, a label naming an answer the run did not judge, or a label off the scale is one
:class:`state.errors.InputError` naming the file and record.

What is written: ``summary["judge_calibration"]`` (:func:`calibration_entry`): per judge-based headline metric
(:mod:`results.calibration.metrics`), its raw value and interval as the run reported them, and its
judge-calibrated value with the joint bootstrap interval (:mod:`results.calibration.estimates`), or the reason it
is not corrected; and the judge's agreement with the labels.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dyneval.prompts import PROMPT_DIR
from dyneval.results.agreement import cohen
from dyneval.results.calibration.estimates import REPLICATES, Calibrated
from dyneval.results.calibration.metrics import CORRECTIONS
from dyneval.results.review.items import READERS
from dyneval.results.view.adapters import adapter, interval_of
from dyneval.results.view.data import headline_metrics
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.state.judgecheck import SCALES
from dyneval.stores.rundir import RunDir

FLAG = "--calibration"
#: The judging step of each protocol whose judged answers a run folder holds, its roles and prompt templates.
JUDGES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "interview": ("interview.grader", ("grader",), "interview/grader_*.yaml"),
    "judgeagent": ("judgeagent.judge", ("evaluator",), "judgeagent/evaluator_judge*.yaml"),
    "llmeval": ("llmeval.judge", ("evaluator",), "llmeval/judge_*.yaml"),
}
#: How each scale is corrected.
METHODS = {
    "correct / wrong": "Rogan-Gladen correction of the verdicts (ACC1, ACC2, CR, CtE: of each question's two "
    "verdicts jointly), percentile bootstrap over units and labels jointly (bias-corrected for Rogan-Gladen)",
    "0-3 stars": "confusion-matrix correction of the stars (non-negative least squares), percentile bootstrap over "
    "each session's answers and the labels jointly",
}
#: Why a protocol's runs are not calibrated.
NOT_CALIBRATED = {
    "atad": "ATAD's judge approves generated problems (section 3), it gives no verdict on a target's answer: its "
    "headline metrics count problems, and an evaluation's answers are compared with the key in code",
}


def judge_fingerprint(protocol: str, config: RunConfig) -> str:
    """What identifies a run's judge: its judging step, the answer-changing settings of its roles' models
    (:meth:`state.config.ModelSpec.answer_identity`) and its prompt templates: a shipped one's text, or the SHA-256
    of the ``--prompts`` file the run used in its place (recorded in the run's config); 16 hex digits."""
    step, roles, pattern = JUDGES[protocol]
    overrides = config.prompt_overrides or {}
    prompts = {
        p.name: overrides.get(name) or p.read_text(encoding="utf-8")
        for p in sorted(PROMPT_DIR.glob(pattern))
        for name in [p.relative_to(PROMPT_DIR).with_suffix("").as_posix()]
    }
    identity = {
        "step": step,
        "models": {role: config.spec_for(role).answer_identity() for role in roles},
        "prompts": prompts,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def judged_verdicts(run: RunDir) -> dict[str, dict[str, str]]:
    """Unit id -> {answer key -> the judge's verdict} of every answer the run's judge decided: the review page's
    items (:mod:`results.review.items`), so a label written there names an answer counted here."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for item in READERS[run.protocol](run).items:
        out[item.unit][item.key] = item.verdict
    return out


def read_labels(path: Path, run: str, fingerprint: str, scale: tuple[str, ...], *, own: bool = False) -> dict[str, str]:
    """Answer key -> label on ``scale``, from the labels file for run ``run`` (``own``: the file is in its folder,
    so needs no fingerprint); the module docstring says what is refused."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the labels: {exc.strerror}", file=str(path), setting=FLAG) from None
    labels: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", file=str(path), record=n) from None
        if not isinstance(row, dict) or "id" not in row:
            raise InputError("a label line needs the answer's id", file=str(path), record=n, field="id")
        made_for = row.get("judge_fingerprint")
        if made_for is None and not own:
            raise InputError(
                f"labels from outside run {run} must say which judge they were made for; this line has no "
                f"judge fingerprint (this run's judge is {fingerprint})",
                file=str(path),
                record=n,
                field="judge_fingerprint",
            )
        if made_for is not None and made_for != fingerprint:
            raise InputError(
                f"labels made for judge {made_for}, but run {run}'s judge (model and prompt) is {fingerprint}",
                file=str(path),
                record=n,
                field="judge_fingerprint",
            )
        label = str(row.get("label", "")).strip().lower()
        if label not in scale:
            raise InputError(
                f"{row.get('label')!r} is not on the judge's scale ({', '.join(scale)})",
                file=str(path),
                record=n,
                field="label",
            )
        key = str(row["id"])
        if key in labels:
            raise InputError(f"{key!r} is labelled twice", file=str(path), record=n, field="id")
        labels[key] = label
    if not labels:
        raise InputError("no labels", file=str(path), setting=FLAG)
    return labels


def _judge_of(protocol: str, name: str) -> None:
    if protocol not in JUDGES:
        why = NOT_CALIBRATED.get(protocol, f"{protocol} runs hold no judged answers in their folders")
        raise InputError(
            f"run {name} is a {protocol} run: {why}; --calibration corrects {', '.join(JUDGES)} runs", setting=FLAG
        )


def _scale(protocol: str) -> tuple[str, ...]:
    return SCALES[JUDGES[protocol][0]]


def check_labels(labels_path: Path, protocol: str, config: RunConfig) -> None:
    """Before a ``--rescore`` makes its run: the labels are readable and made for its judge (model, prompt)."""
    _judge_of(protocol, f"--rescore {config.rescored_from}")
    name = f"--rescore {config.rescored_from}"
    read_labels(labels_path, name, judge_fingerprint(protocol, config), _scale(protocol))


def _classes(scale: tuple[str, ...], values: list[str]) -> np.ndarray:
    """Class indices of ``values``: 1 = correct for correct / wrong, the stars themselves for 0-3 stars."""
    if scale == ("correct", "wrong"):
        return np.array([int(v == "correct") for v in values])
    return np.array([scale.index(v) for v in values])


def _agreement(scale: tuple[str, ...], judge: np.ndarray, human: np.ndarray) -> dict[str, Any]:
    """The judge's agreement with the labels: the share agreeing, Cohen's kappa with its interval, and for
    correct / wrong verdicts its sensitivity and specificity."""
    k = 2 if scale == ("correct", "wrong") else len(scale)
    table = np.zeros((k, k), int)
    np.add.at(table, (human, judge), 1)
    kappa = cohen(table) if (table.sum(axis=0) > 0).sum() > 1 and (table.sum(axis=1) > 0).sum() > 1 else None
    out: dict[str, Any] = {
        "labels": len(human),
        "share": float(np.trace(table) / table.sum()),
        "kappa": kappa.kappa if kappa else None,
        "kappa_low": kappa.low if kappa else None,
        "kappa_high": kappa.high if kappa else None,
    }
    if k == 2:
        out["sensitivity"] = float(table[1, 1] / table[1].sum()) if table[1].sum() else None
        out["specificity"] = float(table[0, 0] / table[0].sum()) if table[0].sum() else None
    return out


def _entry(calibrated: Calibrated) -> dict[str, Any]:
    return {
        "estimate": calibrated.value,
        "low": calibrated.low,
        "high": calibrated.high,
        "labels": calibrated.labels,
        **({"note": calibrated.note} if calibrated.note else {}),
    }


def calibration_entry(run: RunDir, labels_path: Path) -> dict[str, Any]:
    """``summary["judge_calibration"]`` of ``run`` with the labels at ``labels_path``; ``InputError`` (exit 2)
    for a run whose folder holds no judged answers, or labels that are not for its judge or its answers."""
    _judge_of(run.protocol, run.name)
    config = run.run_config()
    scale = _scale(run.protocol)
    fingerprint = judge_fingerprint(run.protocol, config)
    own = labels_path.resolve().is_relative_to(run.path.resolve())
    labels = read_labels(labels_path, run.name, fingerprint, scale, own=own)
    judged = {key: v for unit in judged_verdicts(run).values() for key, v in unit.items()}
    for n, key in enumerate(labels, 1):
        if key not in judged:
            raise InputError(
                f"{key!r} is not an answer run {run.name}'s judge decided", file=str(labels_path), record=n, field="id"
            )
    judge = _classes(scale, [judged[k] for k in labels])
    human = _classes(scale, list(labels.values()))
    corrections = CORRECTIONS[run.protocol](run)
    rng = np.random.default_rng(config.seed)
    calibrated: dict[str, Calibrated] = {}
    for estimator in corrections.estimators:
        calibrated.update(estimator(judge, human, rng, REPLICATES))
    summary = run.summary()
    reported = summary.metrics if summary else {}
    names = {m["path"]: m["name"] for m in headline_metrics(adapter(run.protocol), reported)}
    metrics: dict[str, Any] = {}
    for path in [*corrections.raw, *names]:
        if path in calibrated or path in corrections.notes:
            found = calibrated.get(path) or Calibrated(None, None, None, len(human), corrections.notes[path])
            metrics[path] = {
                "name": names.get(path, path),
                "raw": corrections.raw.get(path) or interval_of(reported, path),
                "calibrated": _entry(found),
            }
    return {
        "judge": JUDGES[run.protocol][0],
        "judge_fingerprint": fingerprint,
        "labels_file": str(labels_path),
        "scale": " / ".join(scale) if len(scale) == 2 else f"{scale[0]}-{scale[-1]} stars",
        "method": METHODS["correct / wrong" if len(scale) == 2 else "0-3 stars"],
        "metrics": metrics,
        "agreement": _agreement(scale, judge, human),
    }
