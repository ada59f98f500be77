"""The leaderboard of a folder of runs: per protocol and set-up, a model x headline-metric table of the finished
runs, ranked with the probability that each model is best.

A **set-up** is what makes two runs' numbers comparable: the protocol, the input data (:func:`data_fingerprint`:
the protocol's parameters except those naming the models under test, ``--limit``, ``--seed`` and the content of
every input file they name) and the judge (every model the run called besides the one under test: evaluator,
grader, reference model ...). Runs of different set-ups never share a table.

**A row** is a model (the protocol's ``subject`` role, or the key of a ``*`` metric: ATAD's examinees,
judgecheck's judges) by its name: a run names it ``NAME@URL`` for an OpenAI-compatible server, and the same name
behind two URLs (two replicas, a gateway and the provider) is one row (:meth:`Board.rows`). Only where the results
say the two are not the same model (for some metric, the 95 % intervals from the two URLs do not overlap, which
two runs of one model do at most 5 % of the time, 0.6 % at equal widths) does each URL get a row of its own,
named ``NAME@URL``.

**A cell** is the metric's value with its 95 % interval, either of the row's latest finished (not interrupted) run
or pooled over all of them (:func:`pool`, the default). Every run of a table asked the same questions (the data
fingerprint holds the input files, ``--limit`` and ``--seed``), so a re-run is not new evidence about which
questions were asked: it averages out the answers' and the judge's noise, but the spread of the questions, which
the interval mostly measures, stays. The pooled value is the runs' values averaged with their ``n`` as weights,
and its interval the same average of their intervals' ends: exact where the runs agree unit by unit (a model at
temperature 0), and otherwise wider than the truth by at most what the runs' noise adds, since the standard error
of an average of estimates is at most the average of their standard errors whatever their correlation
(Cauchy-Schwarz). It is never narrower than one run's. A run with another ``--seed`` (another sample from a bank,
other generated problems) is another data set, so its table is another one.

**How sure the order is.** Each cell's estimate is taken as normal with the standard error its 95 % interval
implies, ``(high - low) / (2 x 1.96)``, the models as independent; from these, :func:`rank` gives the probability
that each model is best (Monte Carlo, :data:`DRAWS` seeded draws) and the probability that each adjacent pair is in
the order shown (closed form). A cell whose interval has no width, or that has none because all its units were
alike (every answer right), has no spread to go on, which is no evidence of certainty: a share (a value in [0, 1])
then takes the standard error of the exact binomial (Clopper-Pearson) interval of its units (:func:`standard_error`),
and any other value is left out of the probabilities; the statement says which. We chose this over rank intervals
from a bootstrap because a leaderboard only has the runs' summaries (their intervals use each protocol's own
method: clustered t, exact binomial ...), not a common resampling of their units. Where the models were asked the
same questions the true difference is sharper than independence assumes (their errors are positively correlated),
so these probabilities understate the certainty; the paired comparison of two runs (``dyneval --compare``) uses
the pairing (docs/statistics.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

import numpy as np

from dyneval.results.headline import Headline, headlines
from dyneval.results.numbers import number
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
    """A model's value of one metric, from one run or pooled over several (:func:`pool`)."""

    value: float
    low: float | None
    high: float | None
    n: Any
    method: str | None
    run_id: str  # the run it comes from; pooled: the newest of them
    #: the independent units the interval rests on where they are not ``n`` (clusters: seed questions, batches)
    units: int | None = None
    #: pooled: every run it averages, newest first (empty: the one run ``run_id``)
    runs: tuple[str, ...] = ()


def standard_error(cell: Cell) -> tuple[float | None, bool]:
    """The standard error the cell's 95 % interval implies, ``(high - low) / (2 x 1.96)``, and whether it was
    derived instead: an interval without width, or none, at a value in [0, 1] takes the exact binomial
    (Clopper-Pearson) interval of its units (its clusters where it has some), the binomial's answer to "every one
    of n units alike"; ``(None, False)`` for any other value without an interval."""
    if cell.low is not None and cell.high is not None and cell.high > cell.low:
        return (cell.high - cell.low) / (2 * Z95), False
    units = cell.units if cell.units is not None else cell.n
    if not (0.0 <= cell.value <= 1.0) or isinstance(units, bool) or not isinstance(units, int) or units < 1:
        return None, False
    from scipy.stats import binomtest

    interval = binomtest(round(cell.value * units), units).proportion_ci(confidence_level=0.95, method="exact")
    return (interval.high - interval.low) / (2 * Z95), True


def pool(cells: list[Cell]) -> Cell:
    """One cell for a model's runs on one set-up (newest first): their values and, where every run has one, their
    intervals' ends averaged with the runs' ``n`` as weights (module doc: the runs asked the same questions, so the
    interval is not narrowed by their number)."""
    if len(cells) == 1:
        return cells[0]
    weights = np.array([c.n if isinstance(c.n, int) and not isinstance(c.n, bool) and c.n > 0 else 1 for c in cells])

    def average(values: list[float | None]) -> float | None:
        return None if None in values else float(np.average(np.array(values, dtype=float), weights=weights))

    value = average([c.value for c in cells])
    assert value is not None
    newest = cells[0]
    methods = {c.method for c in cells}
    return Cell(
        value,
        average([c.low for c in cells]),
        average([c.high for c in cells]),
        newest.n,
        newest.method if len(methods) == 1 else "; ".join(sorted(m or "no interval" for m in methods)),
        newest.run_id,
        newest.units,
        tuple(c.run_id for c in cells),
    )


def _apart(a: Cell, b: Cell) -> bool:
    """Whether the two cells' intervals do not overlap (False where either has none)."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return False
    return a.high < b.low or b.high < a.low


def split_url(label: str) -> tuple[str, str | None]:
    """``NAME@URL`` (how a run names a model on a server: :func:`runtime.models.model_label`) as (NAME, URL); a
    label without a URL as (label, None)."""
    name, at, url = label.rpartition("@")
    return (name, url) if at and name and url.startswith(("http://", "https://")) else (label, None)


@dataclass(frozen=True)
class Entry:
    """One model's values in one run: ``label`` as the run named the model, ``cells`` by metric path."""

    label: str
    cells: dict[str, Cell]


@dataclass
class Board:
    """One protocol and set-up: its models' finished runs, newest first."""

    protocol: str
    data: str  # the data fingerprint (12 hex digits)
    data_label: str  # the data as a person names it: parameters, input files, --limit, --seed
    judge: str
    metrics: list[Metric] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)  # newest run first

    @property
    def key(self) -> str:
        return f"{self.protocol}-{self.data}-{_digest(self.judge)[:6]}"

    def _cells(self, labels: list[str], pooled: bool) -> dict[str, Cell]:
        """Metric path -> the cell of the runs of the models ``labels``: pooled, or the newest run's."""
        found: dict[str, list[Cell]] = {}
        for entry in self.entries:
            if entry.label in labels:
                for path, cell in entry.cells.items():
                    found.setdefault(path, []).append(cell)
        return {path: pool(cells) if pooled else cells[0] for path, cells in found.items()}

    def rows(self) -> dict[str, list[str]]:
        """Row -> the model labels (as the runs named them) it holds, newest first: one row per model name, the
        labels of one name behind several URLs in it, unless two of those URLs' pooled 95 % intervals of some
        metric do not overlap (then a row per label; module doc)."""
        by_name: dict[str, list[str]] = {}
        for label in dict.fromkeys(e.label for e in self.entries):
            by_name.setdefault(split_url(label)[0], []).append(label)
        out: dict[str, list[str]] = {}
        for name, labels in by_name.items():
            if len(labels) > 1 and self._disagree(labels):
                out.update({label: [label] for label in labels})
            else:
                out[name] = labels
        return out

    def _disagree(self, labels: list[str]) -> bool:
        """Whether the pooled 95 % intervals of two of ``labels`` are apart for some metric."""
        cells = [self._cells([label], pooled=True) for label in labels]
        return any(
            _apart(a[path], b[path]) for a, b in itertools.combinations(cells, 2) for path in a.keys() & b.keys()
        )

    def cells(self, pooled: bool = True) -> dict[str, dict[str, Cell]]:
        """Row -> metric path -> its cell: pooled over the row's runs, or its latest run's."""
        return {row: self._cells(labels, pooled) for row, labels in self.rows().items()}

    def ranking(self, metric: Metric, pooled: bool = True) -> Ranking:
        """The models ranked by ``metric`` (those without a value last), with how sure the order is."""
        valued = {row: cells[metric.path] for row, cells in self.cells(pooled).items() if metric.path in cells}
        return rank(valued, metric.better)


@dataclass(frozen=True)
class Ranking:
    order: list[str]  # best first; the models with a value of the metric
    p_best: dict[str, float]  # model -> probability of being best (the models with a standard error)
    p_pairs: list[float | None]  # probability that order[i] is ahead of order[i + 1] (None: a side has no interval)
    derived: list[str] = field(default_factory=list)  # the models whose standard error is the exact binomial's


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
    low, high, units = interval.get("low"), interval.get("high"), interval.get("units")
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):
        low = high = None
    return Cell(
        float(h.value),
        None if low is None else float(low),
        None if high is None else float(high),
        interval.get("n"),
        interval.get("method"),
        run_id,
        units if isinstance(units, int) and not isinstance(units, bool) else None,
    )


def boards(runs: list[RunDir], protocol: str | None = None) -> list[Board]:
    """The leaderboards of ``runs`` (oldest first, as :func:`stores.rundir.runs_under` lists them), one per protocol
    and set-up, in the order of their newest run; ``protocol`` keeps that protocol's only. A run that is not finished
    (no summary, interrupted) or not readable is left out: the run index lists it with its status."""
    found: dict[tuple[str, str, str], Board] = {}
    for run in reversed(runs):  # newest first
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
    entries: dict[str, dict[str, Cell]] = {}
    for h in headlines(config.protocol, summary.metrics):
        model = h.entry if h.entry is not None else summary.models.get(spec.subject)
        cell = _cell(h, run_id)
        if model is None or cell is None or h.metric not in declared:
            continue  # the judge-calibration rows of --calibration are the run's own, not the protocol's metrics
        if declared[h.metric] not in board.metrics:
            board.metrics.append(declared[h.metric])
        entries.setdefault(model, {}).setdefault(h.metric, cell)
    board.entries.extend(Entry(model, cells) for model, cells in entries.items())
    board.metrics.sort(key=list(declared.values()).index)


def rank(cells: dict[str, Cell], better: str = "higher") -> Ranking:
    """Models ordered best first by their cells' values, with the probability each is best and each adjacent pair
    is in this order, from independent normals with the standard errors of :func:`standard_error` (module doc)."""
    sign = 1.0 if better == "higher" else -1.0
    order = sorted(cells, key=lambda m: (-sign * cells[m].value, m))
    errors = {m: standard_error(cells[m]) for m in order}
    with_se = [m for m in order if errors[m][0] is not None]
    p_best: dict[str, float] = {}
    if with_se:
        mu = np.array([sign * cells[m].value for m in with_se])
        se = np.array([errors[m][0] for m in with_se], dtype=float)
        draws = mu + se * np.random.default_rng(SEED).standard_normal((DRAWS, len(with_se)))
        wins = np.bincount(draws.argmax(axis=1), minlength=len(with_se)) / DRAWS
        p_best = {m: float(p) for m, p in zip(with_se, wins, strict=True)}
    pairs = [
        _ahead(cells[a], errors[a][0], cells[b], errors[b][0], sign) for a, b in zip(order, order[1:], strict=False)
    ]
    return Ranking(order, p_best, pairs, [m for m in with_se if errors[m][1]])


def _ahead(a: Cell, se_a: float | None, b: Cell, se_b: float | None, sign: float) -> float | None:
    """P(a's true value is ahead of b's), both normal around their values with these (positive) standard errors."""
    if se_a is None or se_b is None:
        return None
    from scipy.stats import norm

    return float(norm.cdf(sign * (a.value - b.value) / math.hypot(se_a, se_b)))


def statement(metric: Metric, ranking: Ranking, pooled: bool = True) -> str:
    """How sure the order by ``metric`` is, in words, and what the cells are (pooled or each model's latest run)."""
    if not ranking.order:
        return f"No model has a value of {metric.heading}."
    text = f"Ranked by {metric.heading} ({metric.better} is better). "
    if len(ranking.order) == 1:
        return text + "One model only: nothing to rank. " + _cells_note(pooled)
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
    if ranking.derived:
        text += (
            f"No spread among the units of {', '.join(ranking.derived)} (an interval without width, or none): "
            "the exact binomial interval of its units stands in for it. "
        )
    missing = [m for m in ranking.order if m not in ranking.p_best]
    if missing:
        text += f"Without an interval (not in the probabilities): {', '.join(missing)}. "
    return (
        text + "From normal approximations of each 95 % interval, models taken as independent "
        "(models asked the same questions are surer than this says; dyneval --compare pairs two runs). "
        + _cells_note(pooled)
    )


def _cells_note(pooled: bool) -> str:
    if not pooled:
        return "Each cell: the model's latest finished run."
    return (
        "Each cell: the model's finished runs pooled, values and interval ends averaged by n (the runs asked the "
        "same questions, so more runs do not narrow the interval)."
    )


def cell_text(cell: Cell | None) -> str:
    """``0.75 [0.19, 0.99]`` (``, 3 runs`` when pooled): a cell as the console and the page show it."""
    if cell is None:
        return ""
    runs = f", {len(cell.runs)} runs" if cell.runs else ""
    if cell.low is None or cell.high is None:
        return f"{number(cell.value)} (no interval{runs})"
    return f"{number(cell.value)} [{number(cell.low)}, {number(cell.high)}]" + (f" ({runs[2:]})" if runs else "")


def _view(board: Board, pooled: bool) -> dict[str, Any]:
    """The board's columns (each with its ranking and statement) and rows, its cells pooled or the latest run's."""
    columns = []
    for m in board.metrics:
        ranking = board.ranking(m, pooled)
        columns.append(
            {
                "path": m.path,
                "heading": m.heading,
                "definition": m.definition,
                "better": m.better,
                "order": ranking.order,
                "p_best": ranking.p_best,
                "statement": statement(m, ranking, pooled),
            }
        )
    rows = board.rows()
    return {
        "columns": columns,
        "rows": [
            {
                "model": model,
                "labels": rows[model],
                "cells": {
                    path: {
                        "value": c.value,
                        "low": c.low,
                        "high": c.high,
                        "n": c.n,
                        "method": c.method,
                        "run": c.run_id,
                        "runs": list(c.runs) or [c.run_id],
                        "text": cell_text(c),
                    }
                    for path, c in cells.items()
                },
            }
            for model, cells in board.cells(pooled).items()
        ],
    }


def payload(board: Board) -> dict[str, Any]:
    """A board as the run index's page reads it: its set-up, and its columns and rows with the cells pooled
    (``views["pooled"]``) and each model's latest run (``views["latest"]``)."""
    return {
        "key": board.key,
        "protocol": board.protocol,
        "data": board.data,
        "data_label": board.data_label,
        "judge": board.judge,
        "views": {"pooled": _view(board, True), "latest": _view(board, False)},
    }
