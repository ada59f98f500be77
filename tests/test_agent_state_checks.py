"""``--state-check MODULE:FN`` (docs/agents.md, "Checking the agent's state"): the user's function of the agent's
final state and the unit's item, run on each of a unit's agent threads, recorded beside the protocol's verdicts and
summarized as a share with its interval; a check that raises is ungraded with its reason, never a wrong verdict.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from dyneval import cli
from dyneval.runtime.agents.state_check import verdict
from tests.golden_runs import _clean_environment, respond
from tests.standin_endpoint import StandIn
from tests.test_agent_targets import records


def _interview(tmp_path: Path, check: str) -> tuple[int, Path, str]:
    """Two interview sessions of the toy agent with ``--state-check CHECK``."""
    with StandIn(respond=respond) as standin, _clean_environment():
        argv = ["--protocol", "interview", "--target", "graph:tests.toy_agents:graph", "--evaluator", standin.spec("j")]
        argv += ["--limit", "2", "--max-questions", "1", "--state-check", check, "--out", str(tmp_path)]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = cli.main([*argv, "--skip-preflight"])
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return code, run_dir, out.getvalue()


def test_a_state_check_runs_on_every_agent_thread_and_is_summarized_with_its_interval(tmp_path):
    code, run_dir, console = _interview(tmp_path, "tests.toy_agents:looked_up")
    assert code == 0, console
    found = records(run_dir)
    for record in found:  # the session's thread and the single-turn answer's, each with the check's verdict
        assert record["status"] == "ok" and set(record["state_checks"]) == set(record["agent_threads"])
        assert len(record["state_checks"]) == 2
        for thread, checked in record["state_checks"].items():
            asked = record["agent_threads"][thread]["messages"] // 4  # the toy's 4 messages per turn
            assert checked == {"verdict": "correct", "reason": f"{asked} lookups for {asked} messages"}
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["state_check"] == {"check": "tests.toy_agents:looked_up", "share": 1.0, "n": 4, "ungraded": 0}
    interval = metrics["intervals"]["state_check.share"]  # two threads per session: clustered by session
    assert interval["n"] == 4 and interval["units"] == 2 and interval["method"] == "clopper-pearson-clustered"
    assert "State check" in console and "4 checked threads" in (run_dir / "report.md").read_text()


def test_a_check_that_raises_is_ungraded_with_its_reason_and_the_units_verdicts_stand(tmp_path):
    check = tmp_path / "checks.py"
    check.write_text("def check(state, item):\n    raise KeyError('retrieved_docs')\n")
    code, run_dir, console = _interview(tmp_path / "runs", f"{check}:check")
    assert code == 0, console  # the check is not the target's: its failure fails no unit
    for record in records(run_dir):
        assert record["status"] == "ok" and record["seed_interactions"]
        assert {c["verdict"] for c in record["state_checks"].values()} == {"ungraded"}
        assert all(
            c["reason"] == "the check raised KeyError: 'retrieved_docs'" for c in record["state_checks"].values()
        )
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["state_check"]["share"] is None and metrics["state_check"]["ungraded"] == 4


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (True, {"verdict": "correct", "reason": ""}),
        ((False, "no citation"), {"verdict": "wrong", "reason": "no citation"}),
        ({"correct": True, "reason": "cited"}, {"verdict": "correct", "reason": "cited"}),
        ("yes", {"verdict": "ungraded"}),
        ({"reason": "forgot the verdict"}, {"verdict": "ungraded"}),
        ((1, "an int"), {"verdict": "ungraded"}),
    ],
)
def test_a_checks_verdict_is_a_bool_a_pair_or_a_dict_and_anything_else_is_ungraded(returned, expected):
    got = verdict(lambda state, item: returned, {"messages": []}, {})
    assert {k: got[k] for k in expected} == expected
    if expected["verdict"] == "ungraded":
        assert got["reason"].startswith("the check returned ") and "not a bool" in got["reason"]


def test_a_rescore_carries_each_units_agent_threads_and_state_checks_and_their_metric_from_its_source(tmp_path, capsys):
    """A re-score replays the agent's turns from the source's log and reads no agent state (an in-memory agent's
    may be gone): every unit, each trial ``UNIT~tK`` included, keeps its source record's ``agent_threads`` and
    ``state_checks``, and ``metrics.state_check`` is the source's; a re-score naming another check is refused."""
    check = tmp_path / "checks.py"  # the session's thread (two turns and more) passes, the single-turn one fails
    check.write_text("def check(state, item):\n    return len(state['messages']) > 4, 'more than one turn'\n")
    out = tmp_path / "runs"
    with StandIn(respond=respond) as standin, _clean_environment():
        argv = ["--protocol", "interview", "--out", str(out), "--skip-preflight"]

        def run(*extra):
            before = set(out.iterdir()) if out.exists() else set()
            with contextlib.redirect_stdout(io.StringIO()) as console:
                code = cli.main([*argv, *extra])
            made = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")]
            return code, made, console.getvalue()

        code, (source,), console = run(
            *["--target", "graph:tests.toy_agents:graph", "--evaluator", standin.spec("judge1"), "--limit", "2"],
            *["--max-questions", "1", "--trials", "2", "--state-check", f"{check}:check"],
        )
        assert code == 0, console
        code, (rescored,), console = run("--rescore", source.name, "--grader", standin.spec("judge2"))
        assert code == 0, console
        capsys.readouterr()
        code, made, console = run(
            "--rescore", source.name, "--grader", standin.spec("judge2"), "--state-check", "tests.toy_agents:looked_up"
        )
    assert code == 2 and made == [], console  # another check: refused in one line naming it, no run made
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--state-check" in err and "carries its state checks" in err

    units = {r["unit_id"]: r for r in records(source)}
    again = {r["unit_id"]: r for r in records(rescored)}
    assert set(again) == set(units) and {u.rpartition("~")[2] for u in units} == {"t1", "t2"}
    for unit, record in units.items():
        assert {v["verdict"] for v in record["state_checks"].values()} == {"correct", "wrong"}
        assert again[unit]["state_checks"] == record["state_checks"], unit
        assert again[unit]["agent_threads"] == record["agent_threads"], unit
    summaries = [json.loads((d / "summary.json").read_text())["metrics"] for d in (source, rescored)]
    assert summaries[1]["state_check"] == summaries[0]["state_check"]
    assert summaries[0]["state_check"]["share"] == 0.5
    assert summaries[1]["intervals"]["state_check.share"] == summaries[0]["intervals"]["state_check.share"]
    events = [json.loads(line) for line in (rescored / "events.jsonl").read_text().splitlines()]
    assert not any(e.get("agent") for e in events)  # the agent was sent nothing: its turns were replayed
