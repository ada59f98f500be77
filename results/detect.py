"""``dyneval --detect D --pilot RUN``: how many units per target a run needs to separate two targets whose headline
metric differs by ``D``, from the pilot run (its ``summary["metrics"]["separable"]``, written by
:mod:`results.stats`), at 95 % confidence and 80 % power (:func:`results.stats.units_needed`): a share of
independent units (an exact binomial interval) is sized at both proportions, the pilot's p and p +/- D; any other
metric (a mean, a clustered ratio) assumes both targets have the pilot's sd per unit:
``n = ceil(2 * ((z_0.975 + z_0.8) * sd / D) ** 2)``. A weighted share (ATAD's Table 1, exact at its Kish effective
size) is sized the same way on effective units and then times the pilot's measured design effect
``n / n_eff`` (its distinct problems' task and file weights, copies merged): a new run is assumed to have the
pilot's structure, and the console says so.

``D`` is in each metric's own units (a share: 0.05 = five points; ATAD's accuracy and LLMEval's S and R are in
percent: 5 = five points); a count (ATAD's finalized problems) is sized on its share, as its label says.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from dyneval.results.headline import Headline, headlines, number
from dyneval.results.stats import ALPHA, POWER, units_needed
from dyneval.state.errors import InputError
from dyneval.stores.rundir import finished_run
from dyneval.stores.runfiles import SummaryFile


def parse_difference(text: str | None) -> float:
    """``--detect``'s value: a positive number."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(
            f"--detect needs a positive difference in the metric's units (e.g. 0.05), not {text!r}", setting="--detect"
        )
    return value


def needed(protocol: str, summary: SummaryFile, difference: float) -> list[list[str]]:
    """Per headline metric of the pilot: label, pilot value, sd over units, smallest separable difference at the
    pilot's size, units per target for ``difference``."""
    metrics = summary.metrics
    if not metrics.get("separable"):
        raise InputError(
            "the pilot run's summary.json has no separable differences (a run from before they were "
            "written, or one with nothing graded): run the pilot again",
            setting="--pilot",
        )
    rows = []
    for h in headlines(protocol, metrics):
        sep = h.separable or {}
        if sep.get("sd"):
            units = _units(h, sep, difference)
        else:
            units = f"n/a: {sep.get('note') or 'no variance in the pilot'}" if sep else "n/a: no pilot variance"
        smallest = number(sep["difference"]) if sep.get("difference") is not None else "n/a"
        label = h.label + (f" (as a {sep['scale']})" if sep.get("scale") else "")
        rows.append(
            [
                label,
                number(h.value),
                number(sep.get("sd")) if sep.get("sd") is not None else "n/a",
                f"{sep.get('n', '-')}",
                smallest,
                units,
            ]
        )
    return rows


#: the exact intervals of a share, whose run is sized at both proportions
SHARES = ("clopper-pearson", "clopper-pearson-effective-n")


def design_effect(interval: dict[str, Any] | None) -> float | None:
    """``n / n_eff`` of a weighted share's interval (1 for an exact share of equal units), None for any other."""
    if not (interval and interval.get("method") in SHARES):
        return None
    return interval["n"] / interval["effective_n"] if interval.get("effective_n") else 1.0


def _units(h: Headline, sep: dict[str, Any], difference: float) -> str:
    """The units per target for ``difference`` (``n/a`` and why, for a difference a share cannot make)."""
    unit, interval = sep.get("unit", "units"), h.interval or {}
    deff = design_effect(interval)
    if deff is None:
        return f"{units_needed(sep['sd'], difference)} {unit}"
    if sep.get("scale"):  # a count out of n, sized on its share: D is a share already
        share, factor = h.value / interval["n"], 1.0
    else:  # a share on a scale f (1, or 100 for percent): value = f p and sd^2 = f^2 p (1 - p) deff give f
        factor = h.value + sep["sd"] ** 2 / (h.value * deff)
        share = h.value / factor
    try:
        effective = units_needed(sep["sd"], difference / factor, share=share)
    except ValueError as exc:
        return f"n/a: {exc}"
    return f"{math.ceil(round(effective * deff, 9))} {unit}"


def weighting_lines(protocol: str, summary: SummaryFile) -> list[str]:
    """One line per weighted share of the pilot: sized at its measured design effect, on the pilot's structure."""
    out = []
    for h in headlines(protocol, summary.metrics):
        deff = design_effect(h.interval)
        if h.interval and h.interval.get("effective_n") and deff is not None:
            out.append(
                f"{h.label}: sized on effective units times the pilot's measured design effect {deff:.2f} "
                f"({h.interval['n']} distinct problems weigh as {h.interval['effective_n']:.1f} by task and file, "
                "copies merged); a new run is assumed to share the pilot's structure."
            )
    return out


def print_units_needed(detect: str | None, pilot: str | None, out: str, console: Console) -> None:
    """Check both flags, read the pilot and print the table (``InputError`` before anything else)."""
    difference = parse_difference(detect)
    if not pilot:
        raise InputError(
            "--detect needs --pilot RUN (a finished run whose variance sizes the new one)", setting="--pilot"
        )
    run = finished_run(pilot, out, "--pilot")
    summary = run.summary() or SummaryFile()  # finished: it has one
    rows = needed(run.protocol, summary, difference)
    table = Table(
        title=f"Units per target to separate a difference of {difference:g} (two-sided, "
        f"{1 - ALPHA:.0%} confidence, {POWER:.0%} power; pilot {run.name})",
        title_justify="left",
    )
    for header in (
        "metric",
        "pilot value",
        "sd per unit",
        "pilot units",
        "separable at pilot size",
        f"units for {difference:g}",
    ):
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in weighting_lines(run.protocol, summary):
        console.print(line, markup=False, highlight=False)
    console.print(
        "The difference is in each metric's own units (shares 0-1; ATAD accuracy, S and R in percent). "
        "Units are clusters where the pilot's units share questions (batches, seed questions). A share of "
        "independent units is sized at both proportions (the pilot's p and p +/- D, whichever side varies more); "
        "any other metric assumes both targets vary as the pilot does.",
        markup=False,
        highlight=False,
    )
