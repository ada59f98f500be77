"""The viewer and the comparison page in a real headless Chromium, opened from disk (issue 16's acceptance).

Each protocol runs through ``run.main`` against the stand-in endpoint (the golden cases of
:mod:`tests.golden_runs`); the test opens the run's ``view.html`` as a ``file://`` page, filters the unit table,
opens a unit's drill-down and finds that unit's LLM exchanges from ``events.jsonl`` in order with a known output,
then compares two ATAD evaluations whose examinees answer differently and finds their paired difference. No
console errors on any page; a screenshot per page goes to the test's temp folder.

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

import pytest

from dyneval import cli
from tests.golden_runs import CASES, REPO, ROLES, _tool_call, respond
from tests.standin_endpoint import StandIn, _Draw, content_key

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
NEEDS = ("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver) and "
         "selenium (pip install -e '.[test]')")


def _driver(tmp_path: Path) -> Any:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(f"no chromium/chromedriver on PATH: {NEEDS}")
    webdriver = pytest.importorskip("selenium.webdriver", reason=NEEDS)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1600",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
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
        args = {"answer": draw.rng.randint(1, 5)} if name == "IndexAnswer" else {"coherent": draw.rng.random() < .5}
        return _tool_call(body, name, {**args, "explanation": draw.words() + "."})
    return respond(body)


def _run(out: Path, argv: list[str]) -> Path:
    with StandIn(respond=_respond_by_model) as standin:
        args = [a.replace("{URL}", standin.url).replace("{REPO}", str(REPO)) for a in argv]
        args += [x for role in ROLES for x in (f"--{role}", standin.spec(role))] + ["--out", str(out)]
        with contextlib.redirect_stdout(io.StringIO()) as console:
            assert cli.main(args) == 0, console.getvalue()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return run_dir


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


def _no_console_errors(browser: Any) -> None:
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors


@pytest.mark.parametrize("case", list(CASES))
def test_view_of_each_protocol_filters_units_and_shows_a_units_exchanges(case, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run_dir = _run(tmp_path / "out", CASES[case])
    page = run_dir / "view.html"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page.read_text(encoding="utf-8"))  # no fetch
    browser.get(page.resolve().as_uri())
    assert browser.find_element(By.ID, "title").text.endswith(run_dir.name)
    assert browser.find_elements(By.CSS_SELECTOR, "#headline tbody tr"), "no headline metric shown"
    rows = browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")
    total = len(rows)
    assert total == len(_jsonl(run_dir / "units.jsonl"))

    selects = browser.find_elements(By.CSS_SELECTOR, ".filters select")
    assert selects or total == 1, "no categorical filter offered"
    if selects:  # a column with a few distinct values: filtering by one of them keeps exactly its units
        column = selects[0].get_attribute("data-column")
        choice = Select(selects[0])
        value = choice.options[1].get_attribute("value")
        choice.select_by_value(value)
        index = [th.text.split(" ")[0] for th in browser.find_elements(By.CSS_SELECTOR, "#units thead th")
                 ].index(column)
        kept = browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")
        assert 0 < len(kept) < total
        assert all(r.find_elements(By.TAG_NAME, "td")[index].text == value for r in kept)
        choice.select_by_value("")

    events = _jsonl(run_dir / "events.jsonl")
    unit = next(r["unit_id"] for r in _jsonl(run_dir / "results.jsonl")
                if any(e["unit"] == r["unit_id"] for e in events))
    own = [e for e in events if e["unit"] == unit]
    search = browser.find_element(By.ID, "filter-text")
    search.send_keys(unit)
    row = browser.find_element(By.CSS_SELECTOR, f'#units tbody tr[data-unit="{unit}"]')
    assert len(browser.find_elements(By.CSS_SELECTOR, "#units tbody tr")) < total or total == 1
    row.click()
    shown = browser.find_elements(By.CSS_SELECTOR, "#unit-detail details.exchange")
    assert [s.get_attribute("data-step") for s in shown] == [e["step"] for e in own]  # every exchange, in order
    last = shown[-1]
    last.find_element(By.TAG_NAME, "summary").click()
    summary = last.find_element(By.TAG_NAME, "summary").text
    assert own[-1]["role"] in summary and own[-1]["step"] in summary
    assert _shown(own[-1]["output"])[:200] in last.find_element(By.CSS_SELECTOR, ".output pre").text
    prompts = [m.text for m in last.find_elements(By.CSS_SELECTOR, ".msg:not(.output) pre")]
    assert [" ".join(p.split())[:100] for p in prompts] == [" ".join(str(m["content"]).split())[:100]
                                                           for m in own[-1]["messages"]]  # long ones stored once
    browser.save_screenshot(str(tmp_path / f"{case}.png"))
    _no_console_errors(browser)


def test_comparison_page_shows_the_paired_difference(browser, tmp_path):
    from selenium.webdriver.common.by import By

    base = ["--protocol", "atad", "--benchmark", "{REPO}/samples/atad/benchmark.jsonl", "--evaluate"]
    a = _run(tmp_path / "a", [*base, "examinee_a@{URL}"])
    b = _run(tmp_path / "b", [*base, "examinee_b@{URL}"])
    correct = [{r["unit_id"]: float(r["correct"]) for r in _jsonl(d / "results.jsonl")} for d in (a, b)]
    diff = sum(correct[1][u] - correct[0][u] for u in correct[0]) / len(correct[0])
    changed = sorted(u for u in correct[0] if correct[0][u] != correct[1][u])
    assert changed, "the two examinees answer alike: the stand-in no longer tells them apart"

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--compare", str(a), str(b), "--out", str(tmp_path)]) == 0
    (page,) = tmp_path.glob("compare-*.html")
    browser.get(page.resolve().as_uri())
    paired = {r.find_elements(By.TAG_NAME, "td")[0].text: [c.text for c in r.find_elements(By.TAG_NAME, "td")]
              for r in browser.find_elements(By.CSS_SELECTOR, "#paired tbody tr")}
    row = paired["correct"]
    assert row[3] == str(len(correct[0])) and float(row[6]) == pytest.approx(diff, abs=5e-4)
    assert float(row[7]) <= float(row[6]) <= float(row[8])
    units = [r.find_element(By.TAG_NAME, "td").text for r in browser.find_elements(By.CSS_SELECTOR,
                                                                                      "#unit-diffs tbody tr")]
    assert sorted(units) == changed
    browser.save_screenshot(str(tmp_path / "compare.png"))
    _no_console_errors(browser)
