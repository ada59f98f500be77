"""A run's preparation mapped over its Ray unit runners (``services.spread`` in a Ray session), on a head and two
worker nodes started as separate ``ray start`` processes on this machine (``tests/ray_cluster.py``).

What must hold: every item comes back once with what its function returned, worked on in the workers' processes
(not the driver's), an item whose runner died is worked on again by another, a failure inside the function
reaches the driver as the exception it was, and what the libraries say in a runner lands in the run's
``library.log``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.ray_cluster import RayCluster, cluster_or_skip

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from dyneval.protocols.interview import InterviewProtocol  # noqa: E402
from dyneval.runtime.executors.ray import open_ray  # noqa: E402
from dyneval.runtime.runner import open_run  # noqa: E402
from dyneval.runtime.spread import LocalSpread  # noqa: E402
from dyneval.state.config import ModelSpec, RunConfig, StoreConfig  # noqa: E402
from dyneval.state.errors import InputError  # noqa: E402


def square_slowly(services: Any, item: int) -> tuple[int, int, str]:
    """An item's work: its square, the process that did it and the run it did it for."""
    time.sleep(0.3)
    return item * item, os.getpid(), services.run_dir.name


def warn_and_log(services: Any, item: int) -> int:
    """An item whose libraries speak: a warning and a log record, in the runner's process."""
    warnings.warn(f"warned-for-item-{item}", stacklevel=1)
    logging.getLogger("some.library").warning("logged-for-item-%d", item)
    return os.getpid()


def refuse_seven(services: Any, item: int) -> int:
    if item == 7:
        raise InputError("item 7 is malformed", field="--data")
    return item


@pytest.fixture(scope="module")
def cluster() -> Any:
    yield from cluster_or_skip(workers=2, cpus_per_worker=1)


@pytest.fixture
def session(cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path) -> Any:
    spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1")  # never called: the items make no request
    config = RunConfig(
        protocol="interview",
        out=str(tmp_path),
        models={"m": spec},
        roles={"target": "m", "evaluator": "m"},
        concurrency=4,
        stores=StoreConfig(postgres_dsn=fresh_postgres_db("ray_spread")),
    )
    protocol = InterviewProtocol()
    run = open_run(protocol, config, run_id=None, console=Console(quiet=True))
    run.run_dir.mkdir(parents=True)
    with open_ray(protocol, run, cluster.address) as opened:
        assert run.services.spread is opened.spread
        yield run, opened
    assert isinstance(run.services.spread, LocalSpread)  # the run's own again once the session ended


def test_spread_items_come_back_once_each_worked_on_in_both_worker_processes(session: Any) -> None:
    run, _ = session
    got = list(run.services.spread.map(square_slowly, list(range(24))))
    assert sorted(i for i, _ in got) == list(range(24))
    assert all(result[0] == i * i and result[2] == run.run_dir.name for i, result in got)
    pids = {result[1] for _, result in got}
    assert len(pids) == 2 and os.getpid() not in pids  # one runner per worker node's CPU, none on the driver


def test_an_item_whose_runner_died_is_worked_on_again_by_another(session: Any) -> None:
    run, opened = session
    runners = opened.runners
    victim = next(iter(runners.busy))
    items = list(range(16))
    got: list[tuple[int, Any]] = []

    def kill_once_items_run() -> None:
        while runners.busy.get(victim, 0) == 0:  # items sent to it
            time.sleep(0.01)
        ray.kill(victim)

    killer = threading.Thread(target=kill_once_items_run, daemon=True)
    killer.start()
    for i, result in run.services.spread.map(square_slowly, items):
        got.append((i, result))
    killer.join()
    assert sorted(i for i, _ in got) == items and all(r[0] == i * i for i, r in got)
    assert victim not in runners.busy and runners.busy  # replaced or absorbed: the map went on


def test_the_runners_warnings_and_log_records_go_to_the_runs_library_log(session: Any) -> None:
    run, _ = session
    pids = {pid for _, pid in run.services.spread.map(warn_and_log, list(range(6)))}
    log = (run.run_dir / "library.log").read_text(encoding="utf-8")
    assert all(f"warned-for-item-{i}" in log and f"logged-for-item-{i}" in log for i in range(6)), log
    assert os.getpid() not in pids  # said in the runners' processes, none on the driver


def test_a_failure_in_an_items_function_reaches_the_driver_as_raised(session: Any) -> None:
    run, _ = session
    with pytest.raises(InputError, match="item 7 is malformed"):
        list(run.services.spread.map(refuse_seven, list(range(12))))
