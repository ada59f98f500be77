"""Each reviewer's labels, and the agreement between reviewers.

A reviewer's labels are one JSONL file in the run folder, ``review/<reviewer>.jsonl``, appended one line per
decision as it is given, in the format ``judgecheck --labels`` reads (:mod:`protocols.judgecheck.data`: ``id``,
``question``, ``response`` or ``output_1``/``output_2``, ``reference``, ``options``, ``task``, ``qtype``,
``label``), plus ``reviewer``, ``unit``, ``judge`` (the judging step, judgecheck's ``--judge``) and the judge's
``judge_verdict``, which judgecheck ignores, and for interview and JudgeAgent runs the ``judge_fingerprint``
(:func:`results.calibration.run.judge_fingerprint`) that ``--calibration`` checks on labels copied elsewhere.
So ``dyneval --protocol judgecheck --judge JUDGE --labels RUN/review/NAME.jsonl`` measures a judge against that
person. An item is labelled once per reviewer; the file is the review's whole
state, so a reload or a restart resumes after its last line.

Agreement between reviewers on the items all of them labelled: Cohen's kappa for two (Cohen 1960;
``sklearn.metrics.cohen_kappa_score``), Fleiss' kappa for three or more (Fleiss 1971;
``statsmodels.stats.inter_rater.fleiss_kappa``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sklearn.metrics import cohen_kappa_score  # type: ignore[import-untyped]  # scikit-learn ships no type hints
from statsmodels.stats.inter_rater import (  # type: ignore[import-untyped]  # statsmodels ships no type hints
    aggregate_raters,
    fleiss_kappa,
)

from dyneval.results.review.items import Item
from dyneval.state.errors import InputError
from dyneval.state.judgecheck import SCALES

#: The folder of a run that holds the reviewers' label files.
FOLDER = "review"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_reviewer(name: str) -> str:
    """A reviewer's name, which names their label file: letters, digits, ``.``, ``_``, ``-`` (at most 64)."""
    if not _NAME.fullmatch(name):
        raise InputError(
            f"{name!r}: a reviewer's name names their label file; use letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)",
            setting="--reviewer",
        )
    return name


def label_file(run_dir: Path, reviewer: str) -> Path:
    return run_dir / FOLDER / f"{reviewer}.jsonl"


def read_labels(path: Path) -> dict[str, str]:
    """Item key -> label of one reviewer's file (empty when there is none yet); a line that is not one of ours is
    an :class:`InputError` naming the file and line (a torn last line, from a kill mid-write, is no decision)."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    lines = path.read_text(encoding="utf-8").split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[str(row["id"])] = str(row["label"])
        except (ValueError, KeyError, TypeError):
            if n == len(lines):  # the last line, unterminated: a write the process did not finish
                continue
            raise InputError("not a label line of the review page", file=str(path), record=n) from None
    return out


class Labels:
    """One reviewer's label file: what is labelled, and appending a decision."""

    def __init__(self, run_dir: Path, reviewer: str, fingerprint: str | None = None) -> None:
        self.reviewer = reviewer
        self.fingerprint = fingerprint  # the run's judge, for --calibration of labels copied elsewhere
        self.path = label_file(run_dir, reviewer)
        self.given = read_labels(self.path)

    def add(self, item: Item, label: str) -> None:
        """Append ``label`` for ``item`` (one line, flushed and synced before the judge's verdict is shown)."""
        row = {
            "id": item.key,
            "question": item.question,
            "response": item.response,
            "output_1": item.output_1,
            "output_2": item.output_2,
            "reference": item.reference,
            "options": list(item.options),
            "task": item.task,
            "qtype": item.qtype,
            "label": label,
            "reviewer": self.reviewer,
            "unit": item.unit,
            "judge": item.judge,
            "judge_verdict": item.verdict,
            "labelled_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self.fingerprint is not None:
            row["judge_fingerprint"] = self.fingerprint
        self.path.parent.mkdir(exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.given[item.key] = label


@dataclass(frozen=True)
class Agreement:
    """Agreement between reviewers on the items every one of them labelled."""

    reviewers: tuple[str, ...]
    items: int
    statistic: str
    kappa: float | None
    observed: float | None

    def line(self) -> str:
        if len(self.reviewers) < 2:
            return "agreement between reviewers: needs a second reviewer on the same items"
        if not self.items:
            return f"agreement between reviewers ({', '.join(self.reviewers)}): no item labelled by all of them yet"
        kappa = "undefined (every label the same)" if self.kappa is None else f"{self.kappa:.3f}"
        assert self.observed is not None
        return (
            f"agreement between reviewers ({', '.join(self.reviewers)}) on {self.items} items: {self.statistic} "
            f"{kappa}, observed agreement {self.observed:.1%}"
        )


def agreement(run_dir: Path, judge: str, keys: list[str]) -> Agreement:
    """Agreement between every reviewer of the run (their files in ``review/``) on the ``keys`` all labelled."""
    files = sorted((run_dir / FOLDER).glob("*.jsonl")) if (run_dir / FOLDER).is_dir() else []
    given = {f.stem: read_labels(f) for f in files}
    reviewers = tuple(given)
    common = [k for k in keys if all(k in labels for labels in given.values())]
    statistic = "Cohen's kappa" if len(reviewers) <= 2 else "Fleiss' kappa"
    if len(reviewers) < 2 or not common:
        return Agreement(reviewers, len(common), statistic, None, None)
    table = [[given[r][k] for r in reviewers] for k in common]
    observed = sum(len(set(row)) == 1 for row in table) / len(table)
    return Agreement(reviewers, len(common), statistic, kappa(table, SCALES.get(judge)), observed)


def kappa(table: list[list[str]], scale: tuple[str, ...] | None) -> float | None:
    """Cohen's kappa of two columns of labels, Fleiss' kappa of more (rows: items); None where it is undefined
    (every label the same: no disagreement is possible by chance, 0/0)."""
    if len({label for row in table for label in row}) == 1:
        return None
    if len(table[0]) == 2:
        value = float(
            cohen_kappa_score([row[0] for row in table], [row[1] for row in table], labels=list(scale or []) or None)
        )
    else:
        counts, _ = aggregate_raters(table)
        value = float(fleiss_kappa(counts, method="fleiss"))
    return None if value != value else value  # NaN: 0/0
