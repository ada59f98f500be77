"""``--trials K`` (docs/agents.md, "Repeated trials"): each unit run K times on fresh threads, pass^1..pass^K and the
flip rate in summary.json, the console, the report and the viewer, with their intervals and denominators.

The hand-made case is ATAD's evaluation of the sample benchmark (7 problems, answers compared in code) by the coin
agent of :mod:`tests.toy_agents`, which answers each problem right or wrong in each trial as its
``TRIAL_PATTERN`` says, and raises in one trial (a failed trial: left out, never counted as a failure).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections import Counter
from math import comb
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from dyneval.gate import EXIT_BELOW_THRESHOLD, EXIT_BUDGET, EXIT_UNITS_FAILED
from dyneval.results.headline import number
from dyneval.results.trials import ItemTrials, estimates
from tests import toy_agents
from tests.golden_runs import REPO, _clean_environment, _tool_call, respond
from tests.standin_endpoint import StandIn, content_key
from tests.test_agent_targets import records

COIN = "graph:tests.toy_agents:coin"
BENCHMARK = str(REPO / "samples/atad/benchmark.jsonl")

# By hand, from TRIAL_PATTERN (c right of n graded trials; T5's second trial failed, so n = 3 there):
#   T1 1111 c=4 n=4 | T2 0000 c=0 n=4 | T3 1010 c=2 n=4 | T4 1110 c=3 n=4 | T5 1x01 c=2 n=3 | T6 0001 c=1 n=4
#   T7 1100 c=2 n=4
HAND = {
    "pass^1": (4 / 4 + 0 / 4 + 2 / 4 + 3 / 4 + 2 / 3 + 1 / 4 + 2 / 4) / 7,
    "pass^2": (6 / 6 + 0 / 6 + 1 / 6 + 3 / 6 + 1 / 3 + 0 / 6 + 1 / 6) / 7,  # C(c, 2) / C(n, 2)
    "pass^3": (4 / 4 + 0 + 0 + 1 / 4 + 0 / 1 + 0 + 0) / 7,  # C(c, 3) / C(n, 3)
    "pass^4": (1 + 0 + 0 + 0 + 0 + 0) / 6,  # T5 has only 3 graded trials: not among the items of pass^4
    "flip_rate": 5 / 7,  # T3, T4, T5, T6, T7 answered both ways
}
HAND_N = {"pass^1": 7, "pass^2": 7, "pass^3": 7, "pass^4": 6, "flip_rate": 7}


def _run(argv: list[str]) -> tuple[int, str]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    return code, out.getvalue() + err.getvalue()


def _run_dir(out: Path) -> Path:
    (found,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return found


def test_four_trials_give_the_hand_counted_pass_k_and_flip_rate_and_a_stopped_run_resumes_trial_by_trial(tmp_path):
    out = tmp_path / "runs"
    argv = ["--protocol", "atad", "--evaluate", COIN, "--benchmark", BENCHMARK, "--trials", "4", "--out", str(out)]
    with _clean_environment():
        code, console = _run([*argv, "--max-calls", "9", "--concurrency", "2"])  # stopped by its budget
        assert code == EXIT_BUDGET, console
        run_dir = _run_dir(out)
        stopped = len(records(run_dir))
        code, console = _run([*argv, "--max-calls", "1000", "--resume", run_dir.name])
    assert code == EXIT_UNITS_FAILED, console  # the trial the agent failed
    assert 0 < stopped < 28

    # every trial of every problem ran once: none lost, none repeated, each on a thread of its own
    final = records(run_dir)
    ids = [r["unit_id"] for r in final]
    assert len(ids) == len(set(ids)) == 28
    assert {(r["meta"]["trial_of"], r["meta"]["trial"]) for r in final} == {
        (f"ans-m0-b0-{item}-final", t) for item in toy_agents.TRIAL_PATTERN for t in range(1, 5)
    }
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    turns = Counter(e["agent"]["thread_id"] for e in events if e.get("agent"))
    assert sorted(turns) == sorted(f"{run_dir.name}/{i}" for i in ids) and set(turns.values()) == {1}
    failed = [r for r in final if r["status"] != "ok"]
    assert [(r["unit_id"], r["status"]) for r in failed] == [("ans-m0-b0-T5-sample-final~t2", "model_error")]

    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = summary["metrics"]
    trials = metrics["trials"]
    assert trials["k"] == 4 and trials["failed_trials"] == 1
    coin = trials["subjects"][COIN]
    assert coin["items"] == 7 and coin["graded_trials"] == 27 and coin["ungraded_trials"] == 0
    for name, value in HAND.items():
        assert coin[name] == pytest.approx(value), name
        assert coin["n"][name] == HAND_N[name], name
        interval = metrics["intervals"][f"trials.{COIN}.{name}"]
        assert interval["low"] <= value <= interval["high"] and interval["n"] == HAND_N[name]
        assert interval["method"] == ("clopper-pearson" if name == "flip_rate" else "clopper-pearson-clustered")
    # the protocol's own metrics are the first trials' (as without --trials): T1 T3 T4 T5 T7 right in trial 1
    assert metrics["table1"][COIN]["avg"] == pytest.approx(100 * 5 / 7)

    # shown where headline metrics are: the console summary, the report, the viewer
    for name in ("pass^1", "pass^4", "flip rate"):
        assert f"{name} of" in console and f"{number(HAND[name.replace(' ', '_')])} [" in console
    report = (run_dir / "report.md").read_text()
    assert f"pass^2 of {COIN}" in report and "0 ungraded verdicts and 1 failed trial left out" in report
    from dyneval.results.view.data import run_parts

    headline = {h["name"]: h for h in run_parts(run_dir)["headline"]}
    assert headline[f"flip rate of {COIN}"]["value"] == pytest.approx(5 / 7)
    assert headline[f"pass^4 of {COIN}"]["denominator"].startswith("6 items with 4 or more graded trials")


def test_a_model_target_takes_trials_too_and_fail_under_gates_on_pass_k(tmp_path):
    """A model that answers alike every time (the stand-in answers from the request alone) flips on no item, and
    its pass^k equals its pass^1 for every k; ``--fail-under`` names a pass^k as any headline metric."""
    with StandIn(respond=respond) as standin, _clean_environment():
        model = standin.spec("examinee")
        argv = ["--protocol", "atad", "--evaluate", model, "--benchmark", BENCHMARK, "--trials", "2"]
        code, console = _run(
            [*argv, "--out", str(tmp_path), "--skip-preflight", "--fail-under", "trials.*.pass^2=1.01"]
        )
    assert code == EXIT_BELOW_THRESHOLD, console
    assert f"trials.{model}.pass^2 = " in " ".join(console.split())
    measured = json.loads((_run_dir(tmp_path) / "summary.json").read_text())["metrics"]["trials"]["subjects"][model]
    assert measured["flip_rate"] == 0 and measured["pass^2"] == measured["pass^1"] and measured["n"]["pass^2"] == 7


def test_pass_k_is_the_unbiased_estimate_over_items_with_enough_graded_trials():
    """An ungraded trial (None) is no failure: the item keeps its other trials, and leaves pass^k for k above them."""
    items = [
        ItemTrials("a", [True, True, False, None]),  # c=2, n=3
        ItemTrials("b", [False, False, False, False]),  # c=0, n=4
        ItemTrials("c", [None, None, None, True]),  # c=1, n=1: in pass^1 only, in no flip rate
    ]
    found = estimates(items, 4)
    assert found["pass^1"].estimate == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert found["pass^2"].estimate == pytest.approx((comb(2, 2) / comb(3, 2) + 0) / 2)
    assert found["pass^3"].estimate == pytest.approx(0) and found["pass^3"].n == 2
    assert found["pass^4"].n == 1
    assert found["flip_rate"].estimate == pytest.approx(1 / 2) and found["flip_rate"].n == 2


def test_a_rescore_of_a_trials_run_rejudges_every_trial_from_its_log_and_counts_pass_k_from_the_new_verdicts(
    tmp_path,
):
    """Two interview sessions run twice, graded correct every time by judge1, then re-scored by a grader that
    grades a request correct the first time it sees it and wrong the second: each session's two trials (the same
    answer, replayed) now split, so pass^1 = 0.5, pass^2 = 0 and every item flips, and no target request is sent.
    No retry or follow-up depends on the grade (``--max-retries 0 --max-questions 1``), so no trial diverges."""
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def grades(body: dict[str, Any]) -> dict[str, Any] | None:
        tools = body.get("tools") or []
        if tools and tools[0]["function"]["name"] == "Grade":
            with lock:
                asked[body["model"] + content_key(body)] += 1
                first = asked[body["model"] + content_key(body)] == 1
            correct = first or body["model"] == "judge1"
            return _tool_call(body, "Grade", {"correct": correct, "error_type": "N/A", "reason": "stand-in"})
        return respond(body)

    out = tmp_path / "runs"
    with StandIn(respond=grades) as standin, _clean_environment():
        argv = ["--protocol", "interview", "--out", str(out), "--skip-preflight"]
        code, console = _run(
            [*argv, "--target", standin.spec("target"), "--evaluator", standin.spec("judge1")]
            + ["--limit", "2", "--trials", "2", "--task", "generic", "--max-retries", "0", "--max-questions", "1"]
        )
        assert code == 0, console
        source = _run_dir(out)
        standin.requests.clear()
        code, console = _run([*argv, "--rescore", source.name, "--grader", standin.spec("judge2")])
        assert code == 0, console
        sent = Counter(r.model for r in standin.requests)
    assert set(sent) == {"judge1", "judge2"}, sent  # the interviewer and the new grader; the target replayed
    (rescored,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_") and p != source]

    # one record per trial unit, each re-judged (none diverged), each trial's answers replayed from its own unit
    units = {r["unit_id"]: r for r in records(rescored)}
    assert sorted(units) == sorted(r["unit_id"] for r in records(source)) and len(units) == 4
    assert {u.rpartition("~t")[2] for u in units} == {"1", "2"} and {r["status"] for r in units.values()} == {"ok"}
    events = [json.loads(line) for line in (rescored / "events.jsonl").read_text().splitlines()]
    replayed = [e for e in events if e["role"] == "target"]
    assert {e["unit"] for e in replayed} == set(units) and all(e["cached"] for e in replayed)

    trials = {
        run: json.loads((run / "summary.json").read_text())["metrics"]["trials"]["subjects"]
        for run in (source, rescored)
    }
    ((subject, before),) = trials[source].items()
    after = trials[rescored][subject]
    assert (before["pass^1"], before["pass^2"], before["flip_rate"]) == (1.0, 1.0, 0.0)
    assert (after["pass^1"], after["pass^2"], after["flip_rate"]) == (0.5, 0.0, 1.0)
    assert after["items"] == 2 and after["graded_trials"] == 4 and after["n"]["pass^2"] == 2
