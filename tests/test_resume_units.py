"""Resume never finalizes half-done work, and re-judges units whose verdicts are ungraded."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from rich.console import Console

import dyneval.runtime.executors.threads as threads
from dyneval.runtime import stop
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from tests.fakes import ScriptedChat, last_text
from tests.toy_protocol import ToyProtocol


class Killed(BaseException):
    """Stands in for ``kill -9`` (not caught by the runner)."""


def _open(out: Path, chats: dict, run_id: str | None = None, **params):
    config = RunConfig(protocol="toy", out=str(out), params={"units": 3, **params}, concurrency=1)
    return open_run(
        ToyProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _outcome(records: list[dict]) -> dict[str, tuple]:
    return {r["unit_id"]: (r["status"], r.get("answer"), r.get("verdict"), r.get("tallied")) for r in records}


def _chats():
    target = ScriptedChat(lambda m, t: "answer to " + last_text(m))
    judge = ScriptedChat(lambda m, t: {"correct": "question 1" in last_text(m)})
    return {"target": target, "evaluator": judge}


def test_unit_killed_after_its_node_wrote_but_before_the_next_checkpoint_is_not_final(tmp_path, monkeypatch):
    """LangGraph leaves a task whose writes are saved out of ``snapshot.next``; the unit is still unfinished."""
    reference = _chats()
    execute(ToyProtocol(), _open(tmp_path / "ref", reference), skip_preflight=True)
    expected = _outcome(_records(next(p for p in (tmp_path / "ref").iterdir() if p.is_dir())))

    class KillAfterAsk(SqliteSaver):
        """Dies when q1's checkpoint after ``ask`` is stored: ask's writes are saved, judge never started."""

        def put(self, config, checkpoint, metadata, new_versions):
            if config["configurable"]["thread_id"].endswith("/q1") and metadata.get("step") == 1:
                raise Killed()
            return super().put(config, checkpoint, metadata, new_versions)

    real_open = threads.open_checkpointer

    @contextmanager
    def killing_checkpointer(run_dir, dsn=None):
        with real_open(run_dir, dsn) as saver:
            yield KillAfterAsk(saver.conn)

    chats = _chats()
    run = _open(tmp_path / "out", chats)
    monkeypatch.setattr(threads, "open_checkpointer", killing_checkpointer)
    with pytest.raises(Killed):
        execute(ToyProtocol(), run, skip_preflight=True)
    monkeypatch.setattr(threads, "open_checkpointer", real_open)
    assert not stop.stopped()  # only Ctrl-C leaves the stop flag up
    assert "q1" not in [r["unit_id"] for r in _records(run.run_dir)]
    assert "question 1" in [last_text(m) for m, _ in chats["target"].calls]

    execute(ToyProtocol(), _open(tmp_path / "out", chats, run_id=run.run_dir.name), skip_preflight=True)
    records = _records(run.run_dir)
    assert sorted(r["unit_id"] for r in records) == ["q0", "q1", "q2"]  # one record each, none early
    assert _outcome(records) == expected
    # ask's saved writes were reused: question 1 went to the target once across both sessions
    assert sorted(last_text(m) for m, _ in chats["target"].calls) == ["question 0", "question 1", "question 2"]


def test_ungraded_unit_keeps_its_results_and_is_rejudged_on_resume_without_asking_the_target_again(tmp_path):
    judge_ok = {"q1": False}

    def judge(m, t):
        if "question 1" in str(m[0].content) and not judge_ok["q1"]:
            return {"unexpected": 1}  # invalid twice (call + repair): the judge fails
        return {"correct": "question 1" in str(m[0].content)}

    target = ScriptedChat(lambda m, t: "answer to " + last_text(m))
    chats = {"target": target, "evaluator": ScriptedChat(judge)}
    run = _open(tmp_path, chats, ungraded_on_judge_failure=True)
    summary = execute(ToyProtocol(), run, skip_preflight=True)
    by_id = {r["unit_id"]: r for r in _records(run.run_dir)}
    assert by_id["q1"]["status"] == "ungraded" and by_id["q1"]["answer"] == "answer to question 1"
    assert by_id["q1"]["ungraded_verdicts"] == 1
    assert summary["status_counts"] == {"ok": 2, "ungraded": 1}
    assert summary["ungraded_verdicts"] == 1

    # resumed with the judge still failing: judged again (call + repair), still ungraded, target not asked
    summary = execute(
        ToyProtocol(),
        _open(tmp_path, chats, run_id=run.run_dir.name, ungraded_on_judge_failure=True),
        skip_preflight=True,
    )
    assert summary["status_counts"] == {"ok": 2, "ungraded": 1}
    assert len(chats["evaluator"].calls) == 2 + 2 + 2
    assert len(target.calls) == 3

    judge_ok["q1"] = True
    summary = execute(
        ToyProtocol(),
        _open(tmp_path, chats, run_id=run.run_dir.name, ungraded_on_judge_failure=True),
        skip_preflight=True,
    )
    assert summary["status_counts"] == {"ok": 3}
    latest = {r["unit_id"]: r for r in _records(run.run_dir)}
    assert (latest["q1"]["status"], latest["q1"]["verdict"], latest["q1"]["tallied"]) == ("ok", True, True)
    assert len(chats["evaluator"].calls) == 2 + 2 + 2 + 1
    assert len(target.calls) == 3  # only the judge step was redone
    assert summary["metrics"]["accuracy"] == pytest.approx(1 / 3)


def test_rejudged_unit_record_counts_every_call_made_for_it(tmp_path):
    """A re-judge forks the thread from a checkpoint whose config has no ``unit_id``: the fork's calls must still be
    filed under the unit (its record, ``--export`` and the viewer read them by unit id), not under the thread id."""
    judge_ok = {"q1": False}

    def judge(m, t):
        if "question 1" in str(m[0].content) and not judge_ok["q1"]:
            return {"unexpected": 1}
        return {"correct": True}

    chats = {"target": ScriptedChat(lambda m, t: "answer to " + last_text(m)), "evaluator": ScriptedChat(judge)}
    run = _open(tmp_path, chats, ungraded_on_judge_failure=True)
    execute(ToyProtocol(), run, skip_preflight=True)
    judge_ok["q1"] = True
    summary = execute(
        ToyProtocol(),
        _open(tmp_path, chats, run_id=run.run_dir.name, ungraded_on_judge_failure=True),
        skip_preflight=True,
    )
    assert summary["status_counts"] == {"ok": 3}
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    latest = {r["unit_id"]: r for r in _records(run.run_dir)}
    assert {e["unit"] for e in events} == set(latest) == {"q0", "q1", "q2"}
    assert sum(r["usage"]["calls"] for r in latest.values()) == len(events)
    assert latest["q1"]["usage"]["calls"] == 1 + 2 + 1  # the target, the failed judging (call + repair), the re-judge
