"""The response cache in real runs (issue 15): a second run of the same setup sends nothing and gets the same
results; hits are logged and counted; a malformed reply is never replayed; without --cache every call is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.run_files import unit_records
from tests.standin_endpoint import Faults, StandIn


def _interview(out: Path, standin: StandIn, *extra: str) -> Path:
    from dyneval import cli as run

    before = set(out.iterdir()) if out.exists() else set()
    argv = [
        "--protocol",
        "interview",
        "--limit",
        "2",
        "--out",
        str(out),
        "--skip-preflight",
        "--target",
        standin.spec("target"),
        "--evaluator",
        standin.spec("evaluator"),
        *extra,
    ]
    assert run.main(argv) == 0
    (run_dir,) = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")]
    return run_dir


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_a_second_run_with_the_cache_sends_no_request_and_gets_the_same_results(tmp_path):
    cache = ["--cache", "--cache-dir", str(tmp_path / "cache")]
    with StandIn() as standin:
        first = _interview(tmp_path / "runs", standin, *cache)
        sent = len(standin.requests)
        assert sent > 0 and not any(e["cached"] for e in _events(first))
        standin.requests.clear()
        second = _interview(tmp_path / "runs", standin, *cache)
        assert standin.requests == []
    assert unit_records(second) == unit_records(first)
    events = _events(second)
    assert events and all(e["cached"] and e["latency_s"] == 0 for e in events)
    usage = json.loads((second / "summary.json").read_text())["usage"]
    first_usage = json.loads((first / "summary.json").read_text())["usage"]
    assert usage["calls"] == 0 and usage["cache_hits"] == first_usage["calls"] > 0
    assert usage["tokens_saved_by_cache"] == first_usage["prompt_tokens"] + first_usage["completion_tokens"]


def test_without_the_cache_flag_every_call_is_sent_again(tmp_path):
    with StandIn() as standin:
        _interview(tmp_path / "runs", standin)
        sent = len(standin.requests)
        standin.requests.clear()
        _interview(tmp_path / "runs", standin)
        assert len(standin.requests) == sent


def test_a_malformed_reply_is_not_stored_so_the_next_run_asks_again(tmp_path):
    cache = ["--cache", "--cache-dir", str(tmp_path / "cache")]
    with StandIn(faults=Faults(malformed=1.0, seed=3)) as standin:  # one endpoint: its URL is in the key
        _interview(tmp_path / "runs", standin, *cache)
        malformed = {r.key for r in standin.requests if r.structured and not r.repair}
        texts = {r.key for r in standin.requests if not r.structured}
        assert malformed and texts
        standin.faults = Faults()
        standin.requests.clear()
        _interview(tmp_path / "runs", standin, *cache)
        sent = {r.key for r in standin.requests}
    # every structured first attempt came back malformed, so none was stored: each is asked again;
    # the text replies were stored and reused (the sessions then go further, with new requests)
    assert malformed <= sent and not texts & sent


@pytest.mark.parametrize(
    "flag, value, says",
    [("--cache-expiry-hours", "0", "greater than 0"), ("--cache-expiry-hours", "soon", "invalid float")],
)
def test_a_bad_cache_setting_is_one_line_and_exit_2(tmp_path, capsys, flag, value, says):
    from dyneval import cli as run

    assert run.main(["--protocol", "interview", "--out", str(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and says in err
