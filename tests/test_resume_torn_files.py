"""A kill that cuts a run file mid-line costs at most that line: it is dropped, reported, never merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from dyneval.runtime.events import EventLog
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.results import ResultStore
from tests.fakes import ScriptedChat, last_text
from tests.toy_protocol import ToyProtocol


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_results_record_appended_after_a_torn_line_is_kept_and_the_torn_line_reported(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"unit_id": "a", "status": "ok"}) + "\n" + '{"unit_id": "b", "sta')  # killed
    store = ResultStore(path)
    store.append({"unit_id": "c", "status": "ok"})
    assert {uid: r["status"] for uid, r in store.latest().items()} == {"a": "ok", "c": "ok"}
    assert [r["unit_id"] for r in _lines(path)] == ["a", "c"]  # every line whole: nothing swallowed
    assert store.notes and "results.jsonl" in store.notes[0] and "dropped" in store.notes[0]


def test_whole_last_record_missing_only_its_newline_is_kept(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"unit_id": "a", "status": "ok"}))
    store = ResultStore(path)
    store.append({"unit_id": "b", "status": "ok"})
    assert [r["unit_id"] for r in _lines(path)] == ["a", "b"] and store.notes == []


def test_event_appended_after_a_torn_event_line_starts_on_a_fresh_line(tmp_path):
    path = tmp_path / "events.jsonl"
    event = dict(
        unit="u1",
        role="target",
        model="m",
        step="s",
        messages=[],
        output="x",
        prompt_tokens=3,
        completion_tokens=1,
        latency_s=0.1,
    )
    EventLog(path).record(**event)
    with path.open("a") as fh:
        fh.write('{"ts": 1, "unit": "u1", "role": "tar')  # killed mid-write
    log = EventLog(path)
    log.load_existing()
    log.record(**{**event, "unit": "u2"})
    assert [e["unit"] for e in _lines(path)] == ["u1", "u2"]
    assert log.usage("u1").calls == 1 and log.usage("u2").calls == 1
    assert any("events.jsonl" in n for n in log.notes)


def _chats():
    return {
        "target": ScriptedChat(lambda m, t: "answer to " + last_text(m)),
        "evaluator": ScriptedChat(lambda m, t: {"correct": True}),
    }


def _open(out: Path, chats: dict, run_id: str | None = None, units: int = 3):
    config = RunConfig(protocol="toy", out=str(out), params={"units": units}, concurrency=1)
    return open_run(
        ToyProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )


def test_resume_of_a_run_whose_result_line_was_torn_records_that_unit_from_its_checkpoint(tmp_path):
    chats = _chats()
    run = _open(tmp_path, chats)
    execute(ToyProtocol(), run, skip_preflight=True)
    path = run.run_dir / "results.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-9])  # the last record cut by a kill
    torn_unit = json.loads(data.splitlines()[-1])["unit_id"]
    calls = len(chats["target"].calls) + len(chats["evaluator"].calls)

    summary = execute(ToyProtocol(), _open(tmp_path, chats, run.run_dir.name), skip_preflight=True)
    assert summary["status_counts"] == {"ok": 3}
    assert len(chats["target"].calls) + len(chats["evaluator"].calls) == calls  # its graph had reached END
    assert sorted(r["unit_id"] for r in _lines(path)) == ["q0", "q1", "q2"]  # the torn unit recorded again
    assert _lines(path)[-1]["unit_id"] == torn_unit
    assert any("results.jsonl" in n for n in summary["file_notes"]), summary["file_notes"]


def test_cut_units_file_is_planned_again_and_reported_instead_of_a_traceback(tmp_path):
    chats = _chats()
    run = _open(tmp_path, chats)
    execute(ToyProtocol(), run, skip_preflight=True)
    units = run.run_dir / "units.jsonl"
    units.write_bytes(units.read_bytes()[:-20])  # cut by a kill (a version that wrote it in place)

    summary = execute(ToyProtocol(), _open(tmp_path, chats, run.run_dir.name), skip_preflight=True)
    assert summary["status_counts"] == {"ok": 3}
    assert [u["id"] for u in _lines(units)] == ["q0", "q1", "q2"]
    assert any("units.jsonl" in n and "planned again" in n for n in summary["file_notes"])
    assert not list(run.run_dir.glob(".*.tmp"))  # written atomically: no temp file left


def test_cut_units_file_that_no_longer_matches_the_inputs_is_one_input_error(tmp_path):
    chats = _chats()
    run = _open(tmp_path, chats)
    execute(ToyProtocol(), run, skip_preflight=True)
    units = run.run_dir / "units.jsonl"
    lines = units.read_text().splitlines()
    units.write_text(lines[0].replace("question 0", "question zero") + "\n" + lines[1][:10])
    with pytest.raises(InputError, match="units.jsonl.*cannot be resumed"):
        execute(ToyProtocol(), _open(tmp_path, chats, run.run_dir.name), skip_preflight=True)
    assert run.run_dir.is_dir()  # a resumed run's directory is never removed


def test_a_run_file_line_nested_past_the_parsers_depth_is_skipped_with_a_note_not_a_traceback(tmp_path):
    """Run folders read back (--irt-runs, --compare, the viewer) may come from anywhere: a line nested 10,000 levels
    deep is not a record."""
    from dyneval.stores.files import read_records

    path = tmp_path / "results.jsonl"
    path.write_text('{"unit_id": "a"}\n' + '{"x": ' + "[" * 10_000 + "]" * 10_000 + "}\n" + '{"unit_id": "b"}\n')
    problems: list[str] = []
    assert [r["unit_id"] for r in read_records(path, problems)] == ["a", "b"]
    assert problems == ["results.jsonl: line 2 is not a whole JSON record; skipped"]
