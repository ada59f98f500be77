"""Every headline metric's 95 % interval covers the truth in at least 93 % of simulated runs at the protocol's
default run size and at the smallest size docs/statistics.md calls supported (``bench/coverage.py`` at a reduced
repetition count, fixed seeds: the same figures on every machine)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPS = 1000
#: judgecheck's kappa resamples 1000 times per run: 500 runs keep its cells near ten seconds of CPU
JUDGECHECK_REPS = 500
ASSERTED = {"llmeval", "judgeagent", "interview", "atad", "judgecheck"}


def _bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "coverage.py"
    spec = importlib.util.spec_from_file_location("bench_coverage", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def measured():
    bench = _bench()
    asserted = [c for c in bench.cells() if (c.default or c.smallest) and c.protocol in ASSERTED]
    return [bench.run_cell(c, JUDGECHECK_REPS if c.protocol == "judgecheck" else REPS) for c in asserted]


def test_every_headline_interval_covers_the_truth_at_its_default_and_smallest_run_size(measured):
    protocols = {c.cell.protocol for c in measured}
    assert protocols == ASSERTED
    short = [
        f"{c.cell.protocol} {c.cell.metric} at {c.cell.size}: {100 * c.share:.1f} % "
        f"({c.above} above, {c.below} below, {c.none} without an interval)"
        for c in measured
        if c.share < 0.93
    ]
    assert not short, "\n".join(short)
