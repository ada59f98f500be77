"""``dyneval --detect D --pilot RUN``: the units per target that separate a difference D, from a real pilot run's
variance, equal the hand computation n = ceil(2 * ((z_0.975 + z_0.8) * sd / D) ** 2), and the printed smallest
separable difference at the pilot's size equals (z_0.975 + z_0.8) * sqrt(2) * sd / sqrt(n). Bad input exits 2 with
one message naming the flag."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from dyneval.cli import main
from tests.standin_runs import records, run

Z = 1.959964 + 0.841621  # z_0.975 + z_0.8, from a table


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    return run("llmeval", tmp_path_factory.mktemp("detect"))


def answer_sd(recs) -> tuple[float, int]:
    """LLMEval's S per answer: its standard error over the answers (within-session variance pooled, sessions as
    strata) times sqrt(answers), and the answers; from each session's star counts."""
    sessions = [[100 * int(x) / 3 for x, c in r["stars"].items() for _ in range(c)] for r in recs]
    n = sum(len(v) for v in sessions)
    pooled = sum(sum((x - statistics.mean(v)) ** 2 for x in v) for v in sessions) / (n - len(sessions))
    se = math.sqrt(sum(pooled / len(v) for v in sessions)) / len(sessions)
    return se * math.sqrt(n), n


def rows(output: str) -> dict[str, list[str]]:
    """The printed table's rows by metric label (cells split on the box's bars)."""
    out = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if len(cells) == 6 and cells[0]:
            out[cells[0]] = cells
    return out


def test_units_needed_and_smallest_separable_difference_equal_the_hand_computation(pilot, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["--detect", "5", "--pilot", str(pilot)]) == 0
    table = rows(capsys.readouterr().out)
    sd, n = answer_sd(records(pilot))
    label, value, sd_cell, units, smallest, needed = table["Absolute score S"]
    assert sd_cell == f"{sd:.3g}" and units == str(n)
    assert smallest == f"{Z * math.sqrt(2) * sd / math.sqrt(n):.3g}"
    assert needed == f"{math.ceil(2 * (Z * sd / 5) ** 2)} answers"
    assert table["Relative score R"][-1].startswith("n/a: no variance")  # R is 100 on every pilot question


def test_a_pilot_named_by_run_id_under_out_is_found(pilot, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["--detect", "10", "--pilot", pilot.name, "--out", str(pilot.parent)]) == 0
    sd, _ = answer_sd(records(pilot))
    assert rows(capsys.readouterr().out)["Absolute score S"][-1] == f"{math.ceil(2 * (Z * sd / 10) ** 2)} answers"


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--detect", "0"], "--detect"),
        (["--detect", "-0.05"], "--detect"),
        (["--detect", "abc"], "--detect"),
        (["--detect", "nan"], "--detect"),
        (["--detect", "0.05"], "--pilot"),
        (["--pilot", "PILOT"], "--detect"),
        (["--detect", "0.05", "--pilot", "no-such-run"], "--pilot"),
        (["--detect", "0.05", "--pilot", "PILOT", "--format", "csv"], "--detect"),
    ],
)
def test_bad_input_exits_2_with_one_message_naming_the_flag(pilot, capsys, argv, flag):
    argv = [str(pilot) if a == "PILOT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and flag in err


def test_a_pilot_without_separable_differences_is_refused(pilot, tmp_path, capsys):
    summary = json.loads((pilot / "summary.json").read_text())
    del summary["metrics"]["separable"]
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps(summary))
    (old / "config.json").write_bytes((pilot / "config.json").read_bytes())
    assert main(["--detect", "5", "--pilot", str(old)]) == 2
    assert "no separable differences" in capsys.readouterr().err


def _share_rows(protocol: str, metrics: dict, difference: float) -> dict[str, list[str]]:
    from dyneval.results.detect import needed
    from dyneval.stores.runfiles import SummaryFile

    return {row[0]: row for row in needed(protocol, SummaryFile(metrics=metrics), difference)}


@pytest.mark.parametrize(
    "protocol, metrics_of, label, difference, share, d",
    [
        # a pilot at 0.1 asked for 0.1: the second target's variance at 0.2 is larger than the pilot's
        (
            "judgeagent",
            lambda s: {"base_accuracy": {"value": 0.1}, **s("base_accuracy.value", 10, 100, None)},
            "Base accuracy",
            0.1,
            0.1,
            0.1,
        ),
        # a share in percent (ATAD's Table 1): D = 5 points
        (
            "atad",
            lambda s: {"table1": {"b": {"avg": 50.0}}, **s("table1.b.avg", 50, 100, 100.0)},
            "Accuracy (%) of b",
            5,
            0.5,
            0.05,
        ),
        # a count sized on its share (24 of 30 problems finalized): p - D lies nearer 1/2, so it sizes the run
        (
            "atad",
            lambda s: {"finalized": 24, **s("finalized", 24, 30, "count")},
            "Finalized problems (as a share of problems)",
            0.1,
            0.8,
            0.1,
        ),
    ],
)
def test_detect_for_a_share_agrees_with_statsmodels_power_calculation(
    protocol, metrics_of, label, difference, share, d
):
    from statsmodels.stats.proportion import samplesize_proportions_2indep_onetail

    from dyneval.results import stats

    def entries(path, k, n, scale):
        e = stats.proportion(k, n, "units")
        e = e.scaled(n, scale="share of problems") if scale == "count" else e.scaled(scale) if scale else e
        return stats.summary_entries({path: e})

    row = _share_rows(protocol, metrics_of(entries), difference)[label]
    ours = int(row[-1].split()[0])
    other = share - d if abs(share - d - 0.5) < abs(share + d - 0.5) else share + d
    theirs = samplesize_proportions_2indep_onetail(diff=other - share, prop2=share, power=0.8, alpha=0.05)
    assert abs(ours - theirs) / theirs < 0.02, (ours, theirs)
    if share == 0.1:
        assert ours >= 195  # the pilot's variance alone asked 142, too few for 80 % power


def test_detect_for_table1_sizes_at_the_pilots_measured_design_effect(capsys):
    """Table 1 weighs each task alike: a pilot with 4 problems of one task and 1 of each other has a design effect
    above 1, so it needs more problems than a share of equal problems (statsmodels' two-proportion size times
    n / n_eff), and the console says which structure it assumed."""
    from statsmodels.stats.proportion import samplesize_proportions_2indep_onetail

    from dyneval.protocols.atad.metrics import evaluation_intervals
    from dyneval.results.detect import weighting_lines
    from dyneval.stores.runfiles import SummaryFile

    answers = [("b.jsonl", "T1", k % 2 == 0, f"T1:{k}") for k in range(4)]
    answers += [("b.jsonl", f"T{t}", t % 2 == 0, f"T{t}:0") for t in range(2, 6)]
    metrics = {"table1": {"b": {"avg": 50.0}}, **evaluation_intervals({"b": answers})}
    interval = metrics["intervals"]["table1.b.avg"]
    assert interval["estimate"] == 50.0 and interval["n"] == 8
    deff = interval["n"] / interval["effective_n"]
    assert deff == pytest.approx(1.36)  # weights 1/20 (x4) and 1/5 (x4): n_eff = 1 / (4/400 + 4/25) = 5.88
    row = _share_rows("atad", metrics, 10)["Accuracy (%) of b"]
    ours = int(row[-1].split()[0])
    theirs = samplesize_proportions_2indep_onetail(diff=0.1, prop2=0.5, power=0.8, alpha=0.05) * deff
    assert abs(ours - theirs) / theirs < 0.02, (ours, theirs)
    (line,) = weighting_lines("atad", SummaryFile(metrics=metrics))
    assert f"design effect {deff:.2f}" in line and "8 distinct problems weigh as 5.9" in line
