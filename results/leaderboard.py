"""The leaderboard of a folder of runs: per protocol and set-up, a model x headline-metric table of the latest
finished runs, ranked with the probability that each model is best.

A **set-up** is what makes two runs' numbers comparable: the protocol, the input data (:func:`data_fingerprint`:
the protocol's parameters except those naming the models under test, ``--limit``, ``--seed`` and the content of
every input file they name) and the judge (every model the run called besides the one under test: evaluator,
grader, reference model ...). Runs of different set-ups never share a table. A row is a model (the protocol's
``subject`` role, or the key of a ``*`` metric: ATAD's examinees, judgecheck's judges); a cell is the metric's value
in the latest finished (not interrupted) run of that model in that set-up, with its 95 % interval as the run wrote
it.

**How sure the order is.** Each cell's estimate is taken as normal with the standard error its 95 % interval
implies, ``(high - low) / (2 x 1.96)``, the runs as independent; from these, :func:`rank` gives the probability that
each model is best (Monte Carlo, :data:`DRAWS` seeded draws) and the probability that each adjacent pair is in the
order shown (closed form). We chose this over rank intervals from a bootstrap because a leaderboard only has the
runs' summaries (their intervals use each protocol's own method: clustered t, exact binomial ...), not a common
resampling of their units. Where the runs share their questions the true difference is sharper than independence
assumes (the runs' errors are positively correlated), so these probabilities understate the certainty; the paired
comparison of two runs (``dyneval --compare``) uses the pairing (docs/statistics.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

import numpy as np

from dyneval.results.headline import Headline, headlines, number
from dyneval.results.view.adapters import Adapter, Metric, adapter
from dyneval.stores.rundir import DamagedRun, RunDir
from dyneval.stores.runfiles import ConfigFile, SummaryFile

#: Draws of the Monte Carlo estimate of each model's probability of being best (standard error <= 0.005).
DRAWS = 10_000
SEED = 0
#: z of a two-sided 95 % interval: its half-width in standard errors.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Cell:
    """A model's value of one metric, from one run."""

    value: float
    low: float | None
    high: float | None
    n: Any
    method: str | None
    run_id: str

    @property
    def se(self) -> float | None:
        """The standard error the 95 % interval implies (None without an interval)."""
        if self.low is None or self.high is None:
            return None
        return max(0.0, (self.high - self.low) / (2 * Z95))


@dataclass
class Board:
    """One protocol and set-up: its models' latest finished values of each headline metric."""

    protocol: str
    data: str  # the data fingerprint (12 hex digits)
    data_label: str  # the data as a person names it: parameters, input files, --limit, --seed
    judge: str
    metrics: list[Metric] = field(default_factory=list)
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # model -> metric path -> cell

    @property
    def key(self) -> str:
        return f"{self.protocol}-{self.data}-{_digest(self.judge)[:6]}"

    def ranking(self, metric: Metric) -> Ranking:
        """The models ranked by ``metric`` (those without a value last), with how sure the order is."""
        valued = {model: cells[metric.path] for model, cells in self.cells.items() if metric.path in cells}
        return rank(valued, metric.better)


@dataclass(frozen=True)
class Ranking:
    order: list[str]  # best first; the models with a value of the metric
    p_best: dict[str, float]  # model -> probability of being best (the models with an interval)
    p_pairs: list[float | None]  # probability that order[i] is ahead of order[i + 1] (None: a side has no interval)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_digest(value: Any) -> str | None:
    """sha256 of the file ``value`` names, None when it names no file."""
    if not isinstance(value, str) or "\n" in value or len(value) > 4096:
        return None
    try:
        stat = Path(value).stat()
    except OSError:
        return None
    return _digest_of(value, stat.st_mtime_ns, stat.st_size) if S_ISREG(stat.st_mode) else None


@lru_cache(maxsize=256)
def _digest_of(path: str, mtime_ns: int, size: int) -> str | None:
    """The file's sha256, read once per version of it (runs on one data set name the same files)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def _contents(value: Any) -> Any:
    """``value`` with each file path replaced by its content's digest (lists element by element)."""
    if isinstance(value, list):
        return [_contents(v) for v in value]
    digest = _file_digest(value)
    return {"file": Path(value).name, "sha256": digest} if digest else value


def data_fingerprint(config: ConfigFile, spec: Adapter) -> tuple[str, str]:
    """(fingerprint, label) of a run's input data: its parameters except those naming the models under test,
    ``--limit`` and ``--seed``, each input file by the sha256 of its content (read now: a file changed since the run
    counts as other data). Defaults (the shipped samples) are the parameters a run did not set."""
    extra = config.model_extra or {}
    params = {k: _contents(v) for k, v in sorted(config.params.items()) if k not in spec.subject_params}
    data = {"params": params, "limit": extra.get("limit"), "seed": extra.get("seed", 0)}
    fingerprint = _digest(json.dumps(data, sort_keys=True, default=str))[:12]
    shown = [f"{k}={_shown(v)}" for k, v in params.items()]
    if data["limit"] is not None:
        shown.append(f"limit={data['limit']}")
    if data["seed"]:
        shown.append(f"seed={data['seed']}")
    return fingerprint, ", ".join(shown) or "the shipped sample"


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(_shown, value))
    if isinstance(value, dict) and "sha256" in value:
        return f"{value['file']} ({value['sha256'][:8]})"
    return str(value)


def _judge(models: dict[str, str], subject: str) -> str:
    """Every model the run called besides the one under test, by role."""
    return "; ".join(f"{role}: {model}" for role, model in sorted(models.items()) if role != subject) or "none"


def _cell(h: Headline, run_id: str) -> Cell | None:
    if isinstance(h.value, bool) or not isinstance(h.value, (int, float)) or not math.isfinite(h.value):
        return None
    interval = h.interval or {}
    low, high = interval.get("low"), interval.get("high")
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):
        low = high = None
    return Cell(
        float(h.value),
        None if low is None else float(low),
        None if high is None else float(high),
        interval.get("n"),
        interval.get("method"),
        run_id,
    )


def boards(runs: list[RunDir], protocol: str | None = None) -> list[Board]:
    """The leaderboards of ``runs`` (oldest first, as :func:`stores.rundir.runs_under` lists them), one per protocol
    and set-up, in the order of their newest run; ``protocol`` keeps that protocol's only. A run that is not finished
    (no summary, interrupted) or not readable is left out: the run index lists it with its status."""
    found: dict[tuple[str, str, str], Board] = {}
    for run in reversed(runs):  # newest first: a model's first value in a set-up is its latest
        try:
            config, summary = run.config(), run.summary()
        except DamagedRun:
            continue
        if summary is None or summary.interrupted or (protocol is not None and config.protocol != protocol):
            continue
        _add(found, run.name, config, summary)
    return list(found.values())


def _add(found: dict[tuple[str, str, str], Board], run_id: str, config: ConfigFile, summary: SummaryFile) -> None:
    spec = adapter(config.protocol)
    data, label = data_fingerprint(config, spec)
    judge = _judge(summary.models, spec.subject)
    board = found.setdefault((config.protocol, data, judge), Board(config.protocol, data, label, judge))
    declared = {m.path: m for m in spec.metrics}
    for h in headlines(config.protocol, summary.metrics):
        model = h.entry if h.entry is not None else summary.models.get(spec.subject)
        cell = _cell(h, run_id)
        if model is None or cell is None or h.metric not in declared:
            continue  # the judge-calibration rows of --calibration are the run's own, not the protocol's metrics
        if declared[h.metric] not in board.metrics:
            board.metrics.append(declared[h.metric])
        board.cells.setdefault(model, {}).setdefault(h.metric, cell)
    board.metrics.sort(key=list(declared.values()).index)


def rank(cells: dict[str, Cell], better: str = "higher") -> Ranking:
    """Models ordered best first by their cells' values, with the probability each is best and each adjacent pair
    is in this order, from independent normals with the standard errors the cells' intervals imply (module doc)."""
    sign = 1.0 if better == "higher" else -1.0
    order = sorted(cells, key=lambda m: (-sign * cells[m].value, m))
    with_se = [m for m in order if cells[m].se is not None]
    p_best: dict[str, float] = {}
    if with_se:
        mu = np.array([sign * cells[m].value for m in with_se])
        se = np.array([cells[m].se for m in with_se], dtype=float)
        draws = mu + se * np.random.default_rng(SEED).standard_normal((DRAWS, len(with_se)))
        top = draws == draws.max(axis=1, keepdims=True)  # ties (equal values without spread) share the win
        share = (top / top.sum(axis=1, keepdims=True)).mean(axis=0)
        p_best = {m: float(p) for m, p in zip(with_se, share, strict=True)}
    pairs = [_ahead(cells[a], cells[b], sign) for a, b in zip(order, order[1:], strict=False)]
    return Ranking(order, p_best, pairs)


def _ahead(a: Cell, b: Cell, sign: float) -> float | None:
    """P(a's true value is ahead of b's), both normal around their values."""
    if a.se is None or b.se is None:
        return None
    from scipy.stats import norm

    spread = math.hypot(a.se, b.se)
    diff = sign * (a.value - b.value)
    if spread == 0:
        return 1.0 if diff > 0 else 0.5 if diff == 0 else 0.0
    return float(norm.cdf(diff / spread))


def statement(metric: Metric, ranking: Ranking) -> str:
    """How sure the order by ``metric`` is, in words."""
    if not ranking.order:
        return f"No model has a value of {metric.heading}."
    text = f"Ranked by {metric.heading} ({metric.better} is better). "
    if len(ranking.order) == 1:
        return text + "One model only: nothing to rank."
    if ranking.p_best:
        best = ", ".join(f"{m} {ranking.p_best[m]:.2f}" for m in ranking.order if m in ranking.p_best)
        text += f"Probability of being best: {best}. "
    pairs = [
        f"{a} ahead of {b}: {p:.2f}"
        for a, b, p in zip(ranking.order, ranking.order[1:], ranking.p_pairs, strict=False)
        if p is not None
    ]
    if pairs:
        text += "Probability of each adjacent order: " + "; ".join(pairs) + ". "
    missing = [m for m in ranking.order if m not in ranking.p_best]
    if missing:
        text += f"Without an interval (not in the probabilities): {', '.join(missing)}. "
    return (
        text + "From normal approximations of each run's 95 % interval, runs taken as independent "
        "(runs on the same questions are surer than this says; dyneval --compare pairs them)."
    )


def cell_text(cell: Cell | None) -> str:
    """``0.75 [0.19, 0.99]``: a cell as the console and the page show it."""
    if cell is None:
        return ""
    if cell.low is None or cell.high is None:
        return f"{number(cell.value)} (no interval)"
    return f"{number(cell.value)} [{number(cell.low)}, {number(cell.high)}]"


def payload(board: Board) -> dict[str, Any]:
    """A board as the run index's page reads it: columns, rows and, per column, its ranking and statement."""
    columns = []
    for m in board.metrics:
        ranking = board.ranking(m)
        columns.append(
            {
                "path": m.path,
                "heading": m.heading,
                "definition": m.definition,
                "better": m.better,
                "order": ranking.order,
                "p_best": ranking.p_best,
                "statement": statement(m, ranking),
            }
        )
    return {
        "key": board.key,
        "protocol": board.protocol,
        "data": board.data,
        "data_label": board.data_label,
        "judge": board.judge,
        "columns": columns,
        "rows": [
            {
                "model": model,
                "cells": {
                    path: {
                        "value": c.value,
                        "low": c.low,
                        "high": c.high,
                        "n": c.n,
                        "method": c.method,
                        "run": c.run_id,
                        "text": cell_text(c),
                    }
                    for path, c in cells.items()
                },
            }
            for model, cells in board.cells.items()
        ],
    }
