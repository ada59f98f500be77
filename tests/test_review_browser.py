"""The review page in a real headless Chromium (the viewer tests' driver), served as ``dyneval --review`` serves it.

The run: a judgecheck run of the JudgeAgent judge over 60 items whose true labels the test knows, against the
stand-in endpoint (:mod:`tests.golden_runs`), so the judge's verdicts are the stand-in's, right on some items and
wrong on others. Every third item's answer and options carry markup that would run a script if the page parsed it
(``<script>``, ``<img onerror>``). Each test reviews as its own reviewer (its own label file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from dyneval.protocols.judgecheck.data import load_labelled
from dyneval.results.review.labels import agreement, label_file
from tests.golden_runs import respond, run_cli
from tests.review_served import review_of, served
from tests.standin_endpoint import StandIn
from tests.test_viewer_browser import _driver

pytestmark = pytest.mark.integration

HOSTILE = '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">'
ITEMS = 60
#: Question text -> the true label (the answer is right on even items).
TRUTH = {f"Question {i}: what is {i} + {i}?": "correct" if i % 2 == 0 else "wrong" for i in range(ITEMS)}
KEY = {"correct": "c", "wrong": "w"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("review")
    rows = []
    for i, (question, truth) in enumerate(TRUTH.items()):
        tail = HOSTILE if i % 3 == 0 else ""
        answer = f"It is {2 * i if truth == 'correct' else 2 * i + 1}.{tail}"
        options = ["<b>bold</b>", HOSTILE] if tail else []
        rows.append(
            {"id": f"q{i:02d}", "question": question, "reference": str(2 * i), "response": answer}
            | {"options": options, "label": truth}
        )
    labels = folder / "items.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["--protocol", "judgecheck", "--judge", "judgeagent.judge", "--labels", str(labels)]
    with StandIn(respond=respond) as standin:
        run_cli("review", [*args, "--bootstrap-resamples", "100"], standin, folder / "out")
    (run,) = [p for p in (folder / "out").iterdir() if p.is_dir() and not p.name.startswith("_")]
    return run


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    driver.set_window_size(390, 844)  # a phone's screen
    yield driver
    driver.quit()


def _wait(browser: Any, condition: Any, message: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, 60).until(condition, message=message)


def _text(browser: Any, element_id: str) -> str:
    return browser.execute_script(f"return document.getElementById('{element_id}').textContent")


def _visible(browser: Any, element_id: str) -> bool:
    return browser.execute_script(f"return !document.getElementById('{element_id}').hidden")


def _progress(browser: Any) -> str:
    return _text(browser, "progress-text")


def _open(browser: Any, url: str, done: int) -> None:
    """Open the page and wait until it shows an item to decide with ``done`` items labelled."""
    browser.get(url)
    _wait(browser, lambda d: _progress(d).startswith(f"{done} /") and _visible(d, "item"), f"never at {done}")


def _press(browser: Any, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).send_keys(key).perform()


def _decide_by_keyboard(browser: Any, done: int) -> tuple[str, str]:
    """Answer the item shown with its truth by its key, wait for the judge's verdict; (question, verdict shown)."""
    question = _text(browser, "question")
    _press(browser, KEY[TRUTH[question]])
    _wait(browser, lambda d: _visible(d, "judge") and _progress(d).startswith(f"{done + 1} /"), "no verdict shown")
    return question, _text(browser, "judge-verdict")


def _next(browser: Any, done: int) -> None:
    from selenium.webdriver.common.keys import Keys

    _press(browser, Keys.ENTER)
    _wait(browser, lambda d: _visible(d, "end") or not _visible(d, "judge"), f"item {done + 1} never opened")


def _verdicts(run_dir: Path) -> dict[str, str]:
    """Question -> the judge's verdict, from the run's records and plan."""
    questions = {}
    for line in (run_dir / "units.jsonl").read_text(encoding="utf-8").splitlines():
        plan = json.loads(line)
        questions[plan["id"]] = plan["input"]["item"]["question"]
    out = {}
    for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        out[questions[record["unit_id"]]] = record["verdicts"][0]["value"]
    return out


def test_the_judges_verdict_is_hidden_until_the_person_decides_then_shown_on_a_phone_sized_page(run_dir, browser):
    verdicts = _verdicts(run_dir)
    with served(review_of(run_dir, "--sample", "60", "--reviewer", "hidden")) as url:
        _open(browser, url, 0)
        question = _text(browser, "question")
        assert not _visible(browser, "judge") and _text(browser, "judge-verdict") == ""
        state = browser.execute_script(
            "const r = await fetch('api/state'); return await r.json();"
        )  # what the server sent: no verdict in it
        assert set(state["item"]) == {"key", "question", "options", "reference", "response", "output_1", "output_2"}
        _, shown = _decide_by_keyboard(browser, 0)
        width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width  # a phone's screen: nothing to scroll sideways
        assert shown.startswith({"correct": "Correct", "wrong": "Wrong"}[verdicts[question]])


def test_a_reload_and_a_restart_resume_at_the_first_unlabelled_item(run_dir, browser):
    with served(review_of(run_dir, "--sample", "60", "--reviewer", "reload")) as url:
        _open(browser, url, 0)
        seen = []
        for done in range(3):
            seen.append(_decide_by_keyboard(browser, done)[0])
            _next(browser, done)
        fourth = _text(browser, "question")
        _open(browser, url, 3)  # a reload
        assert _text(browser, "question") == fourth
    with served(review_of(run_dir, "--sample", "60", "--reviewer", "reload")) as url:  # a restart
        _open(browser, url, 3)
        assert _text(browser, "question") == fourth
    given = [json.loads(line) for line in label_file(run_dir, "reload").read_text().splitlines()]
    assert [g["question"] for g in given] == seen and len({*seen, fourth}) == 4


def test_a_hostile_answer_runs_no_script_and_shows_as_text(run_dir, browser):
    with served(review_of(run_dir, "--sample", "60", "--reviewer", "hostile")) as url:
        _open(browser, url, 0)
        for done in range(ITEMS):
            if HOSTILE in _text(browser, "response"):
                break
            _decide_by_keyboard(browser, done)
            _next(browser, done)
        assert _text(browser, "response").endswith(HOSTILE)
        assert [li.text for li in browser.find_elements("css selector", "#options li")] == ["<b>bold</b>", HOSTILE]
        assert not browser.find_elements("css selector", "#item script, #item img, #item b")
        _decide_by_keyboard(browser, done)
        assert browser.execute_script("return window.pwned") is None


def test_sixty_items_answered_by_keyboard_with_the_truth_give_labels_judgecheck_reads(run_dir, browser, tmp_path):
    with served(review_of(run_dir, "--sample", "60", "--reviewer", "truth")) as url:
        _open(browser, url, 0)
        for done in range(ITEMS):
            _decide_by_keyboard(browser, done)
            _next(browser, done)
        _wait(browser, lambda d: _visible(d, "end"), "no end screen")
        keys = [json.loads(line)["id"] for line in label_file(run_dir, "truth").read_text().splitlines()]
        between = agreement(run_dir, "judgeagent.judge", keys)
        # every test's reviewer labelled the first items of the same order: the agreement is on those all labelled
        assert _text(browser, "agreement") == between.line() and "truth" in between.reviewers and between.items
    path = label_file(run_dir, "truth")
    read = load_labelled(path, "judgeagent.judge")
    assert len(read.items) == ITEMS and not read.skipped
    assert {item.question: item.label for item in read.items} == TRUTH
    with StandIn(respond=respond) as standin:
        code = cli.main(
            ["--protocol", "judgecheck", "--judge", "judgeagent.judge", "--labels", str(path)]
            + ["--evaluator", standin.spec("evaluator"), "--out", str(tmp_path), "--bootstrap-resamples", "100"]
        )
    assert code == 0
