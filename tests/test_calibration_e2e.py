"""End to end: a run judged by a grader that errs at set rates, 60 of its answers labelled with the truth on the
review page in a real headless Chromium, then ``dyneval --calibration``: the judge-calibrated interval contains the
run's true share correct and the raw one does not, and the calibrated estimate is nearer the truth than the raw.

The run: an interview (``--max-questions 1 --max-retries 0``: one judged answer per seed question, seed 004,
Algorithm 1) of :data:`UNITS` questions "what is i + i?" against the stand-in endpoint. The target answers right
when ``i`` is a multiple of 4 and wrong otherwise, so the true share correct is exactly 1/4. The stand-in grader
reads the answer from its prompt and says "correct" with probability :data:`SENSITIVITY` on a right answer and
"wrong" with probability :data:`SPECIFICITY` on a wrong one, drawn from a hash of the request (the same request,
the same verdict). Its verdicts average about ``0.25 * 0.95 + 0.75 * 0.3 = 0.46``, so the raw interval
(Clopper-Pearson over 120 answers, half-width about 0.09) lies above the truth; the Rogan-Gladen correction with
Se/Sp measured on 60 labels (half the run) brings it back.

Rates and sizes are chosen so that the three properties hold together with probability at least 0.99 over the
grader's draws and the review's random sample (the sample is seeded by the run id, which differs on every run):
:func:`test_the_chosen_rates_and_sizes_give_the_property_with_probability_099` measures it with the same
statistics functions, the same sampling order and the same bootstrap seed as the real run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dyneval import cli
from dyneval.results.calibration.estimates import calibrated_share
from dyneval.results.calibration.metrics import JUDGED
from dyneval.results.review.items import Item
from dyneval.results.review.labels import label_file
from dyneval.results.review.sample import review_order
from dyneval.results.stats import clustered
from tests.review_served import review_of, served
from tests.standin_endpoint import StandIn, _Draw, _text, content_key
from tests.test_review_browser import KEY, _next, _open, _press, _visible, _wait
from tests.test_review_browser import _text as _shown
from tests.test_viewer_browser import _driver

pytestmark = pytest.mark.integration

UNITS, LABELS = 120, 60
SENSITIVITY, SPECIFICITY = 0.95, 0.7
TRUE_SHARE = 0.25
REVIEWER = "truth"
_ASKED = re.compile(r"Question (\d+): what is")
_GRADED = re.compile(r"Question: Question (\d+): what is .*?Model's response: It is (\d+)\.", re.S)


def _question(i: int) -> str:
    return f"Question {i}: what is {i} + {i}?"


def _right(i: int) -> bool:
    """Whether the target answers question ``i`` right (the truth the reviewer labels with)."""
    return i % 4 == 0


TRUTH = {_question(i): "correct" if _right(i) else "wrong" for i in range(UNITS)}


def _judge_says(right: bool, draw: float) -> bool:
    """The stand-in grader's verdict (True = correct) on an answer, from a uniform draw in [0, 1)."""
    return draw < SENSITIVITY if right else draw >= SPECIFICITY


def _respond(body: dict[str, Any]) -> dict[str, Any] | None:
    """The target's answer (right on every fourth question) and the erring grader's verdict; nothing else is asked."""
    tools = body.get("tools") or []
    text = "\n".join(_text(m.get("content")) for m in body.get("messages") or [])
    if not tools:
        i = int(_ASKED.findall(text)[-1])
        return {"role": "assistant", "content": f"It is {2 * i if _right(i) else 2 * i + 1}."}
    name = tools[0]["function"]["name"]
    graded = _GRADED.search(text)
    assert name == "Grade" and graded, f"an unexpected request: {name}"
    says = _judge_says(int(graded[2]) == 2 * int(graded[1]), _Draw(content_key(body)).rng.random())
    args = {"correct": says, "error_type": "N/A" if says else "Calculation", "reason": "stand-in grader"}
    call = {"id": "call_grade", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _property(verdicts: Sequence[bool], truth: Sequence[bool], run_id: str, seed: int) -> tuple[bool, bool, bool]:
    """(the calibrated interval contains the true share, the raw one does not, the calibrated estimate is nearer
    it than the raw) for a run of one judged answer per unit with these verdicts, labelled with the truth on the
    review's first :data:`LABELS` items, as ``--calibration`` computes them (the raw interval over units, the
    bootstrap seeded with the run's seed)."""
    items = [
        Item(key=str(i), unit=str(i), judge="", question="", verdict="correct" if v else "wrong")
        for i, v in enumerate(verdicts)
    ]
    labelled = [int(item.key) for item in review_order(items, run_id)[:LABELS]]
    correct = [int(v) for v in verdicts]
    raw = clustered(correct, [1] * len(correct), "answers", "units")
    assert raw is not None and raw.low is not None and raw.high is not None
    calibrated = calibrated_share(
        correct,
        [1] * len(correct),
        [correct[i] for i in labelled],
        [int(truth[i]) for i in labelled],
        rng=np.random.default_rng(seed),
    )
    share = sum(truth) / len(truth)
    if calibrated.value is None or calibrated.low is None or calibrated.high is None:
        return False, not raw.low <= share <= raw.high, False
    nearer = abs(calibrated.value - share) < abs(raw.estimate - share)
    return calibrated.low <= share <= calibrated.high, not raw.low <= share <= raw.high, nearer


def test_the_chosen_rates_and_sizes_give_the_property_with_probability_099():
    """Over 400 simulated runs (fresh grader draws, a fresh run id for the review's sample): the three properties hold
    in at least 99 % of them (measured over 5000 other simulated runs: all three held in 4998)."""
    truth = [_right(i) for i in range(UNITS)]
    rng = np.random.default_rng(36)
    runs = 400
    held = 0
    for n in range(runs):
        verdicts = [_judge_says(t, d) for t, d in zip(truth, rng.random(UNITS), strict=True)]
        held += all(_property(verdicts, truth, f"simulated-{n}", seed=0))
    assert held / runs >= 0.99, held


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("calibration-e2e")
    data = folder / "questions.jsonl"
    rows = [
        {"id": f"q{i:03d}", "question": _question(i), "answer": str(2 * i), "task": "generic"} for i in range(UNITS)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with StandIn(respond=_respond) as standin:
        code = cli.main(
            ["--protocol", "interview", "--data", str(data), "--out", str(folder / "out"), "--skip-preflight"]
            + ["--target", standin.spec("target"), "--evaluator", standin.spec("interviewer")]
            + ["--grader", standin.spec("grader"), "--concurrency", "4"]
            + ["--max-questions", "1", "--max-retries", "0", "--no-modify", "--no-feedback", "--no-summarize"]
            + ["--no-single-turn-judge"]
        )
    assert code == 0
    (run,) = [p for p in (folder / "out").iterdir() if p.is_dir() and not p.name.startswith("_")]
    return run


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = _driver(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def _label_with_the_truth(browser: Any, done: int) -> None:
    """Answer the item shown with its truth by its key, wait for the judge's verdict to be shown, open the next."""
    _press(browser, KEY[TRUTH[_shown(browser, "question")]])
    _wait(
        browser, lambda d: _visible(d, "judge") and _shown(d, "progress-text").startswith(f"{done + 1} /"), "no verdict"
    )
    _next(browser, done)


def test_labels_given_on_the_review_page_calibrate_the_run_so_its_interval_covers_the_truth(run_dir, browser, capsys):
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    answers = [a for r in records for a in r["seed_interactions"]]
    assert len(records) == UNITS and len(answers) == UNITS  # one judged answer each: the true share is exactly 1/4
    assert all(a["verdict"] in ("correct", "wrong") and a["graded_by"] == "grader" for a in answers)
    with served(review_of(run_dir, "--sample", str(LABELS), "--reviewer", REVIEWER)) as url:
        _open(browser, url, 0)
        for done in range(LABELS):
            _label_with_the_truth(browser, done)
        _wait(browser, lambda d: _visible(d, "end"), "no end screen")
    labels = label_file(run_dir, REVIEWER)
    given = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines()]
    assert len(given) == LABELS and all(g["label"] == TRUTH[g["question"]] for g in given)

    assert cli.main(["--calibration", str(labels), "--run", run_dir.name, "--out", str(run_dir.parent)]) == 0
    cal = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["metrics"]["judge_calibration"]
    entry = cal["metrics"][JUDGED]
    raw, calibrated = entry["raw"], entry["calibrated"]
    assert calibrated["labels"] == LABELS
    assert calibrated["low"] <= TRUE_SHARE <= calibrated["high"], entry
    assert not raw["low"] <= TRUE_SHARE <= raw["high"], entry
    assert abs(calibrated["estimate"] - TRUE_SHARE) < abs(raw["estimate"] - TRUE_SHARE), entry
    assert f"judge-calibrated ({LABELS} labels)" in capsys.readouterr().out
    assert "Score@1" in cal["metrics"]["score@1"]["name"]  # the paper's metric: here the same answers
    assert f"Score@1: judge-calibrated ({LABELS} labels)" in (run_dir / "report.md").read_text(encoding="utf-8")
