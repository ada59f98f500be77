"""The Ray driver's drains of its workers' exchanges (``runtime/executors/ray.py``: ``RayExecutor``, ``DRAIN_S``),
driven without a cluster: units that end within ``DRAIN_S`` of each other share one drain (a database statement
each), and no unit's record is kept before the drain that counts its exchanges."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dyneval.runtime import stop
from dyneval.runtime.events import EventLog
from dyneval.runtime.executors import ray as ray_executor
from dyneval.runtime.protocol import Unit
from dyneval.stores.results import ResultStore

CALLS_PER_UNIT = 3


class Runners:
    """Unit runners whose units end as soon as they are sent, each having logged its exchanges in the database
    (here: ``written``, which only a drain moves into the driver's log)."""

    def __init__(self, written: list[dict[str, Any]]) -> None:
        self.written = written

    def send(self, method: str, unit: Unit, params: dict[str, Any]) -> str:
        self.written += [{"unit": unit.id, "role": "target", "model": "m", "step": "s"}] * CALLS_PER_UNIT
        return unit.id

    def result(self, ref: str) -> dict[str, Any]:
        return {"unit_id": ref, "meta": {}, "status": "ok"}


class Session:
    def __init__(self, run: Any) -> None:
        self.run, self.written, self.drains = run, [], 0
        self.runners = Runners(self.written)

    def drain(self) -> None:
        self.drains += 1
        for event in self.written:
            self.run.services.events.log(event)
        self.written.clear()


def test_units_ending_together_share_one_drain_and_each_record_counts_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "_ended", lambda refs, timeout: refs[:1])  # one unit ends per look, at once
    stop.clear()
    config = SimpleNamespace(concurrency=4, stores=SimpleNamespace(postgres_dsn="postgresql://unused"))
    run = SimpleNamespace(
        config=config, params={}, run_dir=tmp_path, services=SimpleNamespace(events=EventLog(tmp_path / "events.jsonl"))
    )
    session = Session(run)
    results = ResultStore(tmp_path / "results.jsonl")
    executor = ray_executor.RayExecutor(session, results)  # type: ignore[arg-type]
    executor.queued = [Unit(f"u{i}", {}) for i in range(50)][::-1]  # as submit leaves them, none written before
    executor._top_up()
    records = list(executor.ended())
    assert sorted(r["unit_id"] for r in records) == sorted(f"u{i}" for i in range(50))
    assert {r["usage"]["calls"] for r in records} == {CALLS_PER_UNIT}  # none kept before its calls were drained
    saved = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["usage"]["calls"] for r in saved} == {CALLS_PER_UNIT} and len(saved) == 50
    assert session.drains <= 3  # 50 units ended well within DRAIN_S: not one drain each
