"""The run index's leaderboards in a real headless Chromium, and ``dyneval --leaderboard`` on the console.

One ``--out`` folder holds runs of two protocols, three models and two data sets, all against one stand-in
endpoint (so the judges are the same models): three interview targets on each of two seed files, and one ATAD
evaluation of three examinees on each of two benchmark files. The stand-in answers a target or an examinee by a
draw that also depends on its model name, so the models differ. The index must show one leaderboard per protocol
and data set, each cell's value with its interval from the run that made it, a ranking statement, a sort by a
click on a column, the protocol filter; no leaderboard holds a run of another data set.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from tests.golden_runs import REPO, ROLES
from tests.standin_endpoint import StandIn, _Draw, content_key
from tests.test_viewer_browser import _driver, _no_console_errors, _open, _respond_by_model

pytestmark = pytest.mark.integration

MODELS = ("model_a", "model_b", "model_c")


def _respond(body: dict[str, Any]) -> dict[str, Any] | None:
    """An interview target's free-text answer drawn from the request and its model; ATAD as the viewer's test."""
    if str(body.get("model", "")).startswith("model_") and not body.get("tools"):
        draw = _Draw(hashlib.sha256((content_key(body) + str(body["model"])).encode()).hexdigest())
        return {"role": "assistant", "content": draw.words(3, 12) + "."}
    return _respond_by_model(body)


def _lines(source: Path, keep: slice, dest: Path) -> Path:
    dest.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[keep]), encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> dict[str, Any]:
    """The runs (run id -> the data file it read) and their ``--out`` folder."""
    tmp = tmp_path_factory.mktemp("leaderboard")
    out = tmp / "runs"
    seeds = [
        _lines(REPO / "samples/interview/seeds.jsonl", slice(0, 2), tmp / "seeds_one.jsonl"),
        _lines(REPO / "samples/interview/seeds.jsonl", slice(2, 4), tmp / "seeds_two.jsonl"),
    ]
    benchmarks = [
        REPO / "samples/atad/benchmark.jsonl",
        _lines(REPO / "samples/atad/benchmark.jsonl", slice(0, 4), tmp / "benchmark_four.jsonl"),
    ]
    data: dict[str, Path] = {}
    with StandIn(respond=_respond) as standin, contextlib.chdir(REPO):
        roles = [x for role in ROLES for x in (f"--{role}", standin.spec(role))]

        def run(argv: list[str], source: Path) -> None:
            before = set(out.iterdir()) if out.exists() else set()
            with contextlib.redirect_stdout(io.StringIO()) as console:
                assert cli.main([*roles, *argv, "--out", str(out)]) == 0, console.getvalue()
            (new,) = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")]
            data[new.name] = source

        for source in seeds:
            for model in MODELS:
                run(["--protocol", "interview", "--data", str(source), "--target", f"{model}@{standin.url}"], source)
        for source in benchmarks:
            examinees = [f"{m}@{standin.url}" for m in MODELS]
            run(["--protocol", "atad", "--evaluate", *examinees, "--benchmark", str(source)], source)
    return {"out": out, "data": data}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def _boards(browser: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, "div.board")


def _column(board: Any, heading: str) -> tuple[int, Any]:
    """The position among the cells of a row and the header cell of the metric column ``heading``."""
    from selenium.webdriver.common.by import By

    headers = board.find_elements(By.CSS_SELECTOR, "thead th")
    (i,) = [i for i, th in enumerate(headers) if th.text.split(" \u25b2")[0].split(" \u25bc")[0] == heading]
    return i, headers[i]


def _values(board: Any, i: int) -> list[float | None]:
    """The values of column ``i``, top row first (None for an empty cell)."""
    from selenium.webdriver.common.by import By

    out = []
    for row in board.find_elements(By.CSS_SELECTOR, "tbody tr"):
        cell = row.find_elements(By.TAG_NAME, "td")[i]
        found = cell.find_elements(By.CSS_SELECTOR, "[data-value]")
        out.append(float(found[0].get_attribute("data-value")) if found else None)
    return out


def test_index_shows_one_leaderboard_per_protocol_and_data_set_sorted_by_a_click(folder, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out, data = folder["out"], folder["data"]
    _open(browser, out / "index.html")
    boards = _boards(browser)
    assert sorted(b.get_attribute("data-protocol") for b in boards) == ["atad", "atad", "interview", "interview"]
    for board in boards:
        models = [r.get_attribute("data-model") for r in board.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert sorted(m.split("@")[0] for m in models) == list(MODELS)
        runs = {
            a.get_attribute("href").split("/")[-2] for a in board.find_elements(By.CSS_SELECTOR, "tbody td a[href]")
        }
        assert runs and len({data[r] for r in runs}) == 1, "a leaderboard mixes data sets"
        cells = [c.text for c in board.find_elements(By.CSS_SELECTOR, "tbody td [data-value]")]
        assert cells and all(re.fullmatch(r"\S+ \[\S+, \S+\]", c) for c in cells), cells  # value [low, high]
        statement = board.find_element(By.CSS_SELECTOR, "p.ranking").text
        assert "Probability of being best" in statement and "95 % interval" in statement
    # the two data sets of a protocol are two boards, each named by its data file
    atad = [b for b in boards if b.get_attribute("data-protocol") == "atad"]
    assert {"benchmark.jsonl" in b.text.split("\n")[0] for b in atad} == {True, False}

    board = next(b for b in boards if b.get_attribute("data-protocol") == "interview")
    i, header = _column(board, "Follow-up accuracy")
    header.click()
    board = next(b for b in _boards(browser) if b.get_attribute("data-board") == board.get_attribute("data-board"))
    values = _values(board, i)
    shown = [v for v in values if v is not None]
    assert shown == sorted(shown, reverse=True) and values[: len(shown)] == shown  # best first, empty ones last
    assert board.find_element(By.CSS_SELECTOR, "p.ranking").text.startswith("Ranked by Follow-up accuracy")
    _column(board, "Follow-up accuracy")[1].click()
    again = [v for v in _values(board, i) if v is not None]
    assert again == sorted(again)  # a second click reverses
    browser.save_screenshot(str(tmp_path / "leaderboard.png"))

    pooled = {b.get_attribute("data-board"): b.text for b in _boards(browser)}
    Select(browser.find_element(By.ID, "board-cells")).select_by_value("latest")
    latest = {b.get_attribute("data-board"): b.text for b in _boards(browser)}
    assert "Each cell: the model's latest finished run." in latest[board.get_attribute("data-board")]
    # one run per model here: its latest run is all there is to pool
    assert {k: v.split("Each cell:")[0] for k, v in latest.items()} == {
        k: v.split("Each cell:")[0] for k, v in pooled.items()
    }
    Select(browser.find_element(By.ID, "board-protocol")).select_by_value("atad")
    assert sorted(b.get_attribute("data-protocol") for b in _boards(browser) if b.is_displayed()) == ["atad", "atad"]
    _no_console_errors(browser)


def test_ticking_two_models_gives_the_command_that_compares_their_runs(folder, browser):
    from selenium.webdriver.common.by import By

    _open(browser, folder["out"] / "index.html")
    board = next(b for b in _boards(browser) if b.get_attribute("data-protocol") == "interview")
    ticks = board.find_elements(By.CSS_SELECTOR, "tbody input[type=checkbox]")
    ticks[0].click()
    ticks[1].click()
    command = board.find_element(By.CSS_SELECTOR, ".board-compare code").text
    runs = command.split()[2:4]
    assert command.startswith("dyneval --compare ") and len(set(runs)) == 2 and set(runs) <= set(folder["data"])


def test_console_leaderboard_prints_the_boards_of_one_protocol_ranked(folder):
    with contextlib.redirect_stdout(io.StringIO()) as console:
        assert cli.main(["--leaderboard", "--out", str(folder["out"]), "--protocol", "interview"]) == 0
    text = console.getvalue()
    assert text.count("Ranked by Score@1") == 2 and "atad" not in text
    for name in ("seeds_one.jsonl", "seeds_two.jsonl"):
        assert name in text
    for model in MODELS:
        assert text.count(model) >= 2


def test_console_leaderboard_refuses_an_unknown_protocol_and_a_missing_folder(folder, tmp_path, capsys):
    assert cli.main(["--leaderboard", "--out", str(folder["out"]), "--protocol", "nope"]) == 2
    assert "unknown protocol 'nope'" in capsys.readouterr().err
    assert cli.main(["--leaderboard", "--out", str(tmp_path / "none")]) == 2
    assert "is not a folder of runs" in capsys.readouterr().err


def test_index_payload_groups_by_judge_too(folder, tmp_path):
    """A run judged by another evaluator is a board of its own, never a row of the same table."""
    import shutil

    from dyneval.results.leaderboard import boards
    from dyneval.stores.rundir import runs_under

    out = tmp_path / "runs"
    shutil.copytree(folder["out"], out)
    run = next(p for p in out.iterdir() if (p / "config.json").is_file() and "interview" in p.name)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary["models"]["evaluator"] = "another_judge@http://127.0.0.1:1/v1"
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    found = boards(runs_under(out), "interview")
    assert len(found) == 3
    assert [b for b in found if "another_judge" in b.judge][0].rows() == {
        summary["models"]["target"].split("@")[0]: [summary["models"]["target"]]
    }
