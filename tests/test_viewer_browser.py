"""The viewer, the comparison page and the run index in a real headless Chromium, opened from disk.

Each protocol runs through ``run.main`` against the stand-in endpoint (the golden cases of
:mod:`tests.golden_runs`, and a judgecheck run), all into one ``--out`` folder, from the repository as working
directory. The tests open the pages as ``file://`` pages in a 1400 x 900 window: each run's ``view.html``
(the outcome column in view without scrolling sideways, filters, a unit's drill-down with its LLM exchanges from
``events.jsonl`` in order, the unit permalink ``#unit=ID``, previous/next), the folder's ``index.html`` (every run
listed, its links and the comparison command), and the comparison of two ATAD evaluations whose examinees answer
differently (the paired difference in the first screen, changed units linked to their drill-downs). No page
names an absolute path of the machine; no console errors on any page; a screenshot per page goes to the test's
temp folder.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y chromium chromium-driver``) and selenium
(the ``test`` extra); the test is skipped, saying which is missing, without them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from dyneval import cli
from tests.golden_runs import CASES, REPO, ROLES, _tool_call, respond
from tests.standin_endpoint import StandIn, _Draw, content_key

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
NEEDS = (
    "needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver) and "
    "selenium (pip install -e '.[test]')"
)
#: Every protocol's run: the golden cases and a pairwise judge check over the shipped pairs.
RUNS = {
    **CASES,
    "judgecheck": ["--protocol", "judgecheck", "--judge", "pairwise", "--limit", "6", "--bootstrap-resamples", "100"],
}
#: The column that holds each run's outcome (the first a reader looks for).
OUTCOME = {
    "atad_generate": "outcome",
    "atad_evaluate": "correct",
    "judgeagent": "JudgeAgent score",
    "interview": "Score@1",
    "llmeval": "S",
    "judgecheck": "verdict",
}
WIDTH, HEIGHT = 1400, 900


def _driver(tmp_path: Path) -> Any:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(f"no chromium/chromedriver on PATH: {NEEDS}")
    webdriver = pytest.importorskip("selenium.webdriver", reason=NEEDS)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _respond_by_model(body: dict[str, Any]) -> dict[str, Any] | None:
    """As the golden runs, but an ATAD examinee answers from every choice (1-5) by a draw that also depends on
    its model name, so two examinees differ on some items and are right on some."""
    tools = body.get("tools") or []
    name = tools[0]["function"]["name"] if tools else ""
    if name in ("IndexAnswer", "OrderAnswer"):
        draw = _Draw(hashlib.sha256((content_key(body) + str(body.get("model"))).encode()).hexdigest())
        args = {"answer": draw.rng.randint(1, 5)} if name == "IndexAnswer" else {"coherent": draw.rng.random() < 0.5}
        return _tool_call(body, name, {**args, "explanation": draw.words() + "."})
    return respond(body)


def _run(out: Path, argv: list[str]) -> Path:
    """Run the CLI into ``out`` from the repository (a user's working directory); the new run's folder."""
    before = set(out.iterdir()) if out.exists() else set()
    with StandIn(respond=_respond_by_model) as standin, contextlib.chdir(REPO):
        args = [a.replace("{URL}", standin.url).replace("{REPO}", str(REPO)) for a in argv]
        args += [x for role in ROLES for x in (f"--{role}", standin.spec(role))] + ["--out", str(out)]
        with contextlib.redirect_stdout(io.StringIO()) as console:
            assert cli.main(args) == 0, console.getvalue()
    (run_dir,) = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")]
    return run_dir


def _cli(argv: list[str]) -> str:
    with contextlib.chdir(REPO), contextlib.redirect_stdout(io.StringIO()) as console:
        assert cli.main(argv) == 0, console.getvalue()
    return console.getvalue()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _shown(value: Any) -> str:
    """An output as the page prints it (JSON.stringify of an object; the text itself otherwise)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Every protocol's run, all in one ``--out`` folder (case -> run folder)."""
    out = tmp_path_factory.mktemp("runs")
    return {case: _run(out, argv) for case, argv in RUNS.items()}


def _no_console_errors(browser: Any) -> None:
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors


def _open(browser: Any, page: Path, fragment: str = "") -> None:
    browser.get(page.resolve().as_uri() + fragment)


def _opened_unit(browser: Any) -> str:
    """The unit whose exchanges the page shows, once its title and the table's highlighted row agree: a unit
    opens through the location's hash, whose ``hashchange`` the page handles after the click returns."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def agreed(driver: Any) -> str | None:
        title = driver.find_element(By.ID, "unit-title").text.removeprefix("Unit ")
        rows = [r.get_attribute("data-unit") for r in driver.find_elements(By.CSS_SELECTOR, "#units tbody tr.open")]
        return title if rows == [title] else None

    return WebDriverWait(
        browser, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    ).until(agreed)


def _wait_opened(browser: Any, unit: str) -> None:
    """Wait until the page shows ``unit`` opened (:func:`_opened_unit`); a timeout says it never did."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 60).until(lambda d: _opened_unit(d) == unit, message=f"unit {unit} never opened")


def _headers(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [th.get_attribute("data-column") for th in browser.find_elements(By.CSS_SELECTOR, "#units thead th")]


@pytest.mark.parametrize("case", list(RUNS))
def test_view_of_each_protocol_shows_its_outcome_first_filters_units_and_shows_a_units_exchanges(
    case, runs, browser, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run_dir = runs[case]
    page = run_dir / "view.html"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page.read_text(encoding="utf-8"))  # no fetch
    _open(browser, page)
    assert browser.find_element(By.ID, "title").text.endswith(run_dir.name)
    assert browser.find_elements(By.CSS_SELECTOR, "#headline tbody tr"), "no headline metric shown"
    rows = browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")
    total = len(rows)
    assert total == len(_jsonl(run_dir / "units.jsonl"))

    # the outcome column comes right after the unit id; the first unit's outcome is in the first screen at
    # 1400 x 900, without scrolling sideways or down
    assert _headers(browser)[:2] == ["unit", OUTCOME[case]]
    width, height = browser.execute_script("return [document.documentElement.clientWidth, window.innerHeight]")
    first = browser.find_elements(By.CSS_SELECTOR, "#units tbody tr:first-child td")[1]
    box = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); "
        "return [r.left, r.right, r.top, r.bottom, window.scrollX, window.scrollY];",
        first,
    )
    assert box[4:] == [0, 0] and 0 <= box[0] and box[1] <= width <= WIDTH and box[3] <= height <= HEIGHT, box

    selects = browser.find_elements(By.CSS_SELECTOR, ".filters select")
    assert selects or total == 1, "no categorical filter offered"
    if selects:  # a column with a few distinct values: filtering by one of them keeps exactly its units
        column = selects[0].get_attribute("data-column")
        choice = Select(selects[0])
        value = choice.options[1].get_attribute("value")
        choice.select_by_value(value)
        index = _headers(browser).index(column)
        kept = browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")
        assert 0 < len(kept) < total
        assert all(r.find_elements(By.TAG_NAME, "td")[index].text == value for r in kept)
        choice.select_by_value("")

    events = _jsonl(run_dir / "events.jsonl")
    unit = next(
        r["unit_id"] for r in _jsonl(run_dir / "results.jsonl") if any(e["unit"] == r["unit_id"] for e in events)
    )
    own = [e for e in events if e["unit"] == unit]
    search = browser.find_element(By.ID, "filter-text")
    search.send_keys(unit)
    row = browser.find_element(By.CSS_SELECTOR, f'#units tbody tr[data-unit="{unit}"]')
    assert len(browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")) < total or total == 1
    row.click()
    _wait_opened(browser, unit)
    shown = browser.find_elements(By.CSS_SELECTOR, "#unit-detail details.exchange")
    assert [s.get_attribute("data-step") for s in shown] == [e["step"] for e in own]  # every exchange, in order
    last = shown[-1]
    last.find_element(By.TAG_NAME, "summary").click()
    summary = last.find_element(By.TAG_NAME, "summary").text
    assert own[-1]["role"] in summary and own[-1]["step"] in summary
    assert _shown(own[-1]["output"])[:200] in last.find_element(By.CSS_SELECTOR, ".output pre").text
    prompts = [m.text for m in last.find_elements(By.CSS_SELECTOR, ".msg:not(.output) pre")]
    assert [" ".join(p.split())[:100] for p in prompts] == [
        " ".join(str(m["content"]).split())[:100] for m in own[-1]["messages"]
    ]  # long ones stored once
    browser.save_screenshot(str(tmp_path / f"{case}.png"))
    _no_console_errors(browser)


def test_a_unit_permalink_opens_that_unit_and_previous_next_move_through_the_table(runs, browser):
    from selenium.webdriver.common.by import By

    run_dir = runs["interview"]
    ids = [u["id"] for u in _jsonl(run_dir / "units.jsonl")]
    assert len(ids) >= 3
    _open(browser, run_dir / "view.html", f"#unit={quote(ids[1])}")

    _wait_opened(browser, ids[1])
    browser.find_element(By.ID, "unit-next").click()
    _wait_opened(browser, ids[2])
    assert browser.execute_script("return location.hash") == f"#unit={quote(ids[2])}"
    browser.find_element(By.ID, "unit-prev").click()
    _wait_opened(browser, ids[1])
    browser.find_element(By.ID, "unit-prev").click()
    _wait_opened(browser, ids[0])
    assert not browser.find_element(By.ID, "unit-prev").is_enabled()
    assert browser.find_element(By.ID, "unit-permalink").get_attribute("href").endswith(f"#unit={quote(ids[0])}")
    browser.back()  # the browser's history follows the units opened
    _wait_opened(browser, ids[1])
    _no_console_errors(browser)


def test_judgecheck_rows_show_verdict_and_agreement_and_filter_by_it(runs, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run_dir = runs["judgecheck"]
    records = _jsonl(run_dir / "results.jsonl")
    first = {r["unit_id"]: next(v for v in r["verdicts"] if v["order"] == "original") for r in records}
    disagree = sorted(r["unit_id"] for r in records if str(first[r["unit_id"]]["value"]) != r["label"])
    assert 0 < len(disagree) < len(records), "the stand-in judge agrees always or never: nothing to filter"
    _open(browser, run_dir / "view.html")
    Select(browser.find_element(By.ID, "filter-agree")).select_by_value("disagree")
    columns = _headers(browser)
    rows = [
        [td.text for td in r.find_elements(By.TAG_NAME, "td")]
        for r in browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")
    ]
    assert sorted(r[0] for r in rows) == disagree
    assert all(r[columns.index("verdict")] == str(first[r[0]]["value"]) for r in rows)
    _no_console_errors(browser)


def test_run_index_lists_the_runs_of_the_folder_and_its_links_work(runs, browser, tmp_path):
    from selenium.webdriver.common.by import By

    out = next(iter(runs.values())).parent
    printed = _cli(["--index", str(out)])
    assert "index.html" in printed
    _open(browser, out / "index.html")
    listed = [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "#runs tbody input")]
    assert sorted(listed) == sorted(d.name for d in runs.values())  # every run, and nothing else (_cache)
    row = browser.find_element(By.CSS_SELECTOR, f'#runs tbody input[data-run="{runs["llmeval"].name}"]').find_element(
        By.XPATH, "./ancestor::tr"
    )
    assert "Absolute score S:" in row.text and "finished: ok=" in row.text
    atad = [runs["atad_evaluate"].name, runs["atad_generate"].name]  # newest first, as listed
    for run_id in atad:
        browser.find_element(By.CSS_SELECTOR, f'#runs tbody input[data-run="{run_id}"]').click()
    command = browser.find_element(By.CSS_SELECTOR, "#compare-command code").text
    assert command == f"dyneval --compare {' '.join(atad)} --out ."
    browser.save_screenshot(str(tmp_path / "index.png"))

    browser.find_element(By.LINK_TEXT, runs["judgeagent"].name).click()  # the run's view
    assert browser.find_element(By.ID, "title").text.endswith(runs["judgeagent"].name)
    _cli(["--compare", *atad, "--out", str(out)])  # the command shown; the index is rewritten with its page
    _open(browser, out / "index.html")
    browser.find_element(By.CSS_SELECTOR, "#comparisons a").click()
    assert browser.find_element(By.ID, "title").text == f"atad: {' vs '.join(atad)}"
    _no_console_errors(browser)


def test_no_page_names_an_absolute_path_of_the_machine(runs, tmp_path_factory):
    out = next(iter(runs.values())).parent
    _cli(["--index", str(out)])
    pages = sorted(out.rglob("*.html"))
    assert len(pages) >= 2 * len(runs) + 1  # each run's view and report, the index
    base = str(tmp_path_factory.getbasetemp())
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert base not in text and str(REPO) not in text, page


def test_comparison_page_opens_with_the_paired_difference_and_links_changed_units(browser, tmp_path):
    from selenium.webdriver.common.by import By

    base = ["--protocol", "atad", "--benchmark", "{REPO}/samples/atad/benchmark.jsonl", "--evaluate"]
    a = _run(tmp_path / "runs", [*base, "examinee_a@{URL}"])
    b = _run(tmp_path / "runs", [*base, "examinee_b@{URL}"])
    correct = [{r["unit_id"]: float(r["correct"]) for r in _jsonl(d / "results.jsonl")} for d in (a, b)]
    diff = sum(correct[1][u] - correct[0][u] for u in correct[0]) / len(correct[0])
    changed = sorted(u for u in correct[0] if correct[0][u] != correct[1][u])
    assert changed, "the two examinees answer alike: the stand-in no longer tells them apart"

    _cli(["--compare", str(a), str(b), "--out", str(tmp_path)])
    (page,) = tmp_path.glob("compare-*.html")
    assert str(tmp_path) not in page.read_text(encoding="utf-8")
    _open(browser, page)
    paired = browser.find_element(By.ID, "paired")
    bottom = browser.execute_script("return arguments[0].getBoundingClientRect().bottom", paired)
    assert bottom <= browser.execute_script("return window.innerHeight") <= HEIGHT  # in the first screen
    rows = {
        r.find_elements(By.TAG_NAME, "td")[0].text: [c.text for c in r.find_elements(By.TAG_NAME, "td")]
        for r in browser.find_elements(By.CSS_SELECTOR, "#paired tbody tr")
    }
    row = rows["correct"]
    assert row[1] == "B \u2212 A" and row[2] == str(len(correct[0]))
    assert float(row[5]) == pytest.approx(diff, abs=5e-4) and float(row[6]) <= float(row[5]) <= float(row[7])
    headers = " ".join(th.text for th in browser.find_elements(By.TAG_NAME, "th"))
    assert a.name not in headers and b.name not in headers  # short labels; the legend names the runs
    legend = {
        r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[1].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    }
    assert legend == {"A": a.name, "B": b.name}
    units = [
        r.find_element(By.TAG_NAME, "td").text for r in browser.find_elements(By.CSS_SELECTOR, "#unit-diffs tbody tr")
    ]
    assert sorted(units) == changed
    browser.save_screenshot(str(tmp_path / "compare.png"))
    _no_console_errors(browser)
    row = browser.find_element(By.CSS_SELECTOR, "#unit-diffs tbody tr")
    row.find_elements(By.TAG_NAME, "a")[1].click()  # run B's status of the unit: its drill-down there
    _wait_opened(browser, units[0])
    assert browser.find_element(By.ID, "title").text.endswith(b.name)
    _no_console_errors(browser)
