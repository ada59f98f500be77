"""``--calibration LABELS``: a finished run's judged share correct, raw and judge-calibrated by human labels.

The run's judged answers are the correct / wrong verdicts its judge decided (a verdict compared in code, such as a
multiple-choice letter, or an ungraded answer, is none): every answer the interview grader decided (seed 004,
Appendix D.2.1) and every answer JudgeAgent's evaluator judged (seed 000, Table 12). Each has a key,
``UNIT#WHERE`` (``#seed2``, ``#followup1.1``, ``#single``; ``#base.Q``, ``#round3``), the ``id`` the review page
writes. The labels file is JSONL in the format ``judgecheck --labels`` reads, one line per labelled answer with
``id`` (the key) and ``label`` (``correct`` / ``wrong``).

Labels are for one judge: a label file in the run's own folder (the review of this run) is this run's; any
other must carry, on each line, the ``judge_fingerprint`` of the run it was made on
(:func:`judge_fingerprint`: the judging step, its models' answer-changing settings and its prompt templates),
equal to this run's. A mismatch, a label naming an answer the run did not judge, or a label off the scale is one
:class:`state.errors.InputError` naming the file and record.

What is written: ``summary["judge_calibration"]`` (:func:`calibration_entry`): the raw share with its
cluster-robust interval over units (:func:`results.stats.clustered`), the judge-calibrated share with its joint
bootstrap interval (:mod:`results.calibration.estimates`), and the judge's agreement with the labels.
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
from dyneval.results.calibration.estimates import calibrated_share
from dyneval.results.review.items import READERS
from dyneval.results.stats import clustered
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.rundir import RunDir

FLAG = "--calibration"
#: The judging step of each protocol whose judged answers a run folder holds, its roles and prompt templates.
JUDGES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "interview": ("interview.grader", ("grader",), "interview/grader_*.yaml"),
    "judgeagent": ("judgeagent.judge", ("evaluator",), "judgeagent/evaluator_judge*.yaml"),
}
METRIC = "judged answers correct"


def judge_fingerprint(protocol: str, config: RunConfig) -> str:
    """What identifies a run's judge: its judging step, the answer-changing settings of its roles' models
    (:meth:`state.config.ModelSpec.answer_identity`) and the text of its prompt templates; 16 hex digits."""
    step, roles, pattern = JUDGES[protocol]
    prompts = {p.name: p.read_text(encoding="utf-8") for p in sorted(PROMPT_DIR.glob(pattern))}
    identity = {
        "step": step,
        "models": {role: config.spec_for(role).answer_identity() for role in roles},
        "prompts": prompts,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def judged_verdicts(run: RunDir) -> dict[str, dict[str, bool]]:
    """Unit id -> {answer key -> judged correct} of every answer the run's judge decided: the review page's items
    (:mod:`results.review.items`), so a label written there names an answer counted here."""
    out: dict[str, dict[str, bool]] = defaultdict(dict)
    for item in READERS[run.protocol](run).items:
        out[item.unit][item.key] = item.verdict == "correct"
    return out


def read_labels(path: Path, run: str, fingerprint: str, *, own: bool = False) -> dict[str, bool]:
    """Answer key -> labelled correct, from the labels file for run ``run`` (``own``: the file is in its folder,
    so needs no fingerprint); the module docstring says what is refused."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the labels: {exc.strerror}", file=str(path), setting=FLAG) from None
    labels: dict[str, bool] = {}
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
        if label not in ("correct", "wrong"):
            raise InputError(f"{row.get('label')!r} is not correct or wrong", file=str(path), record=n, field="label")
        key = str(row["id"])
        if key in labels:
            raise InputError(f"{key!r} is labelled twice", file=str(path), record=n, field="id")
        labels[key] = label == "correct"
    if not labels:
        raise InputError("no labels", file=str(path), setting=FLAG)
    return labels


def _judge_of(protocol: str, name: str) -> None:
    if protocol not in JUDGES:
        raise InputError(
            f"run {name} is a {protocol} run; --calibration reads the judged answers of "
            f"{' and '.join(JUDGES)} runs from their folders",
            setting=FLAG,
        )


def check_labels(labels_path: Path, protocol: str, config: RunConfig) -> None:
    """Before a ``--rescore`` makes its run: the labels are readable and made for its judge (model, prompt)."""
    _judge_of(protocol, f"--rescore {config.rescored_from}")
    read_labels(labels_path, f"--rescore {config.rescored_from}", judge_fingerprint(protocol, config))


def calibration_entry(run: RunDir, labels_path: Path) -> dict[str, Any]:
    """``summary["judge_calibration"]`` of ``run`` with the labels at ``labels_path``; ``InputError`` (exit 2)
    for a run whose folder holds no judged answers, or labels that are not for its judge or its answers."""
    _judge_of(run.protocol, run.name)
    config = run.run_config()
    fingerprint = judge_fingerprint(run.protocol, config)
    own = labels_path.resolve().is_relative_to(run.path.resolve())
    labels = read_labels(labels_path, run.name, fingerprint, own=own)
    verdicts = judged_verdicts(run)
    judged = {key: v for unit in verdicts.values() for key, v in unit.items()}
    for n, key in enumerate(labels, 1):
        if key not in judged:
            raise InputError(
                f"{key!r} is not an answer run {run.name}'s judge decided", file=str(labels_path), record=n, field="id"
            )
    correct = [sum(unit.values()) for unit in verdicts.values()]
    graded = [len(unit) for unit in verdicts.values()]
    judge = [int(judged[k]) for k in labels]
    human = [int(v) for v in labels.values()]
    raw = clustered(correct, graded, "answers", "units")
    assert raw is not None  # every labelled key is a judged answer, so there is one
    rng = np.random.default_rng(config.seed)
    calibrated = calibrated_share(correct, graded, judge, human, rng=rng)
    table = np.zeros((2, 2), int)
    np.add.at(table, (human, judge), 1)
    se, sp = (
        (table[1, 1] / table[1].sum() if table[1].sum() else None),
        (table[0, 0] / table[0].sum() if table[0].sum() else None),
    )
    kappa = cohen(table) if table.sum(axis=0).all() and table.sum(axis=1).all() else None
    return {
        "judge": JUDGES[run.protocol][0],
        "judge_fingerprint": fingerprint,
        "labels_file": str(labels_path),
        "metric": METRIC,
        "raw": raw.interval(),
        "calibrated": {
            "estimate": calibrated.value,
            "low": calibrated.low,
            "high": calibrated.high,
            "labels": calibrated.labels,
            "method": "Rogan-Gladen correction, percentile bootstrap over units and labels jointly",
            **({"note": calibrated.note} if calibrated.note else {}),
        },
        "agreement": {
            "labels": len(human),
            "share": float(np.trace(table) / table.sum()),
            "kappa": kappa.kappa if kappa else None,
            "kappa_low": kappa.low if kappa else None,
            "kappa_high": kappa.high if kappa else None,
            "sensitivity": None if se is None else float(se),
            "specificity": None if sp is None else float(sp),
        },
    }
