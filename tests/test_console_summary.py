"""The console summary of each protocol's run against the stand-in, rendered at 80 columns: no raw dotted metric
key, nothing cut (no ellipsis, no line wider than 80), every headline metric's label with its value and 95 %
interval, every model named in full (folded onto further lines, never shortened), and a judgecheck pairwise run
showing its judges' accuracy by model name."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from dyneval.results.console_summary import render_summary
from dyneval.results.headline import headlines, interval_text, number
from dyneval.results.view.adapters import leaves
from tests.standin_runs import RUNS, run, summary

#: A dotted metric path as summary.json spells it (``validation.overall.acc1``, ``raters.m0.measures.kappa``);
#: host names like 127.0.0.1 start with digits and do not match.
DOTTED = re.compile(r"\b[A-Za-z_][\w@*]*\.[A-Za-z_][\w@*]*\.[A-Za-z_]\w*")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    base = tmp_path_factory.mktemp("console")
    out = {}
    for name in RUNS:
        s = summary(run(name, base))
        console = Console(width=80, record=True, file=io.StringIO())
        render_summary(s, console)
        out[name] = (s, console.export_text())
    return out


def columns(text: str) -> list[str]:
    """Each table column's text over all the table's lines (header and body), spaces removed (a folded or
    wrapped cell reads whole again)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(("│", "┃")):
            for i, cell in enumerate(line.strip("│┃").replace("┃", "│").split("│")):
                out.setdefault(i, []).append(cell.replace(" ", ""))
    return ["".join(parts) for parts in out.values()]


@pytest.mark.parametrize("name", list(RUNS))
def test_console_summary_has_no_raw_key_and_cuts_nothing_at_80_columns(rendered, name):
    s, text = rendered[name]
    assert "…" not in text and "..." not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert not DOTTED.findall(text), DOTTED.findall(text)
    for path, _ in leaves(s["metrics"]):
        if path.count(".") >= 2:
            assert path not in text


@pytest.mark.parametrize("name", list(RUNS))
def test_every_headline_metric_is_shown_with_its_value_and_interval(rendered, name):
    s, text = rendered[name]
    heads = headlines(s["protocol"], s["metrics"])
    assert heads
    label_col, value_col = columns(text)[0], "".join(columns(text))
    for h in heads:
        assert h.label.replace(" ", "") in label_col
        assert h.interval is not None, h.path
        assert h.interval["low"] is not None or h.interval["note"], h.path  # none (no spread, too few): says why
        assert f"{number(h.value)}{interval_text(h.interval)}".replace(" ", "") in value_col


@pytest.mark.parametrize("name", ["atad_evaluate", "llmeval", "judgecheck_pairwise", "judgecheck_correctness"])
def test_every_model_is_named_in_full(rendered, name):
    s, text = rendered[name]
    first = columns(text)[0]
    models = {
        *(s["metrics"].get("models") or []),
        *(r["model"] for r in s["metrics"].get("leaderboard") or []),
        *(r["model"] for r in (s["metrics"].get("raters") or {}).values()),
    }
    assert models
    for model in models:
        assert model.replace(" ", "") in first


def test_pairwise_judgecheck_shows_each_judges_accuracy_by_model_name(rendered):
    s, text = rendered["judgecheck_pairwise"]
    assert " m0 " not in text and " m1 " not in text
    table = text[text.index("Per judge") :]
    cells = "".join(columns(table))
    for rater in s["metrics"]["raters"].values():
        acc = rater["measures"]["accuracy_mean"]
        assert f"{rater['model']}".replace(" ", "") in cells
        assert f"{number(acc['value'])}[{number(acc['low'])},{number(acc['high'])}]" in cells
    assert "accuracy(meanofbothorders)" in cells


def test_per_discipline_scores_state_their_scale(rendered):
    _, text = rendered["llmeval"]
    assert "score out of 10" in " ".join(text.split())
