"""``--executor ray`` on a real multi-node Ray cluster on this machine (a head and two worker nodes, each its own
``ray start`` process: ``tests/ray_cluster.py``), a throw-away PostgreSQL and the stand-in endpoint, which
answers from the request content only and here also counts the requests in flight per model.

What must hold whatever worker ran a unit and whichever node died: every unit has exactly one final record (in
``results.jsonl`` and in the claims table), the results equal a thread-pool run's, no model ever has more
requests in flight than its ``concurrency`` across the whole cluster, and the run's usage counts exactly the
requests the endpoint saw. SIGTERM to the driver stops every worker's requests for the run and leaves a run that
``--resume`` finishes.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.golden_runs import VOLATILE as GOLDEN_VOLATILE
from tests.golden_runs import respond
from tests.standin_endpoint import StandIn

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from dyneval.protocols.interview import InterviewProtocol  # noqa: E402
from dyneval.protocols.judgeagent import JudgeAgentProtocol  # noqa: E402
from dyneval.runtime.cluster import NAMESPACE, coordinator_name  # noqa: E402
from dyneval.runtime.executors.choice import ExecutorChoice  # noqa: E402
from dyneval.runtime.runner import execute, open_run  # noqa: E402
from dyneval.state.config import ModelSpec, RunConfig, StoreConfig  # noqa: E402
from dyneval.stores.event_batches import EventBatches  # noqa: E402
from dyneval.stores.unit_claims import UnitClaims  # noqa: E402
from tests.ray_cluster import RayCluster, cluster_or_skip  # noqa: E402
from tests.ray_runs import interview_seeds  # noqa: E402
from tests.ray_runs import records as _records  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: Requests each model takes at once, whichever worker sends them.
MODEL_CONCURRENCY = 2
#: Keys of unit records and metrics that are measurements of one run, not results: its timings, and its usage and
#: JudgeAgent's efficiency (tokens and seconds: a unit a killed node ran repeats the calls its last checkpoint did
#: not hold).
VOLATILE = GOLDEN_VOLATILE | {"usage", "efficiency"}
#: Model calls in the interview's largest graph step (single_turn_judge: the target's answer, then one grader).
CALLS_IN_LARGEST_INTERVIEW_STEP = 2


class CountingStandIn(StandIn):
    """The stand-in, counting the requests it serves per model (and the most at once), behind a gate the test
    can close: a request waits at the gate before it is counted, and one whose client is gone when the gate
    opens (its worker node was killed) is dropped uncounted, as an endpoint never reached would be."""

    def __init__(self, latency_s: float) -> None:
        super().__init__(respond=respond, latency_s=latency_s)
        self.count_lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.served = 0
        self.open = threading.Event()
        self.open.set()
        handler = self.server.RequestHandlerClass
        standin = self

        class Gated(handler):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))  # all the client sends
                standin.open.wait()
                if _peer_gone(self.connection):
                    self.close_connection = True
                    return
                connection, self.rfile = self.rfile, io.BytesIO(body)  # the stand-in's own handler reads it
                try:
                    super().do_POST()
                finally:
                    self.rfile = connection  # the connection's next request

        self.server.RequestHandlerClass = Gated

    def handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = str(body.get("model"))
        with self.count_lock:
            self.now[model] += 1
            self.peak[model] = max(self.peak[model], self.now[model])
            self.served += 1
        try:
            return super().handle(body)
        finally:
            with self.count_lock:
                self.now[model] -= 1

    def in_flight(self) -> int:
        with self.count_lock:
            return sum(self.now.values())

    def reset(self) -> None:
        with self.count_lock:
            self.now.clear()
            self.peak.clear()
            self.served = 0


def _peer_gone(conn: socket.socket) -> bool:
    """The client closed its end (its process died) while its request waited: nothing more will come from it,
    so a readable socket with nothing to read means closed."""
    timeout = conn.gettimeout()
    conn.setblocking(False)  # not select(): in a long test session the descriptor can be above its 1024
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False  # nothing to read: the client is still there, waiting
    except OSError:
        return True
    finally:
        conn.settimeout(timeout)


@pytest.fixture
def cluster() -> Any:
    """A cluster of its own for each test: a test kills one of its nodes, or stops its work."""
    yield from cluster_or_skip(workers=2, cpus_per_worker=1)


@pytest.fixture(scope="module")
def standin() -> Any:
    with CountingStandIn(latency_s=0.02) as server:
        yield server


def _config(protocol: str, standin: StandIn, out: Path, dsn: str | None, params: dict[str, Any]) -> RunConfig:
    models = {
        role: ModelSpec(model=role, base_url=standin.url, concurrency=MODEL_CONCURRENCY)
        for role in ("target", "evaluator")
    }
    return RunConfig(
        protocol=protocol,
        out=str(out),
        models=models,
        roles={r: r for r in models},
        concurrency=6,
        stores=StoreConfig(postgres_dsn=dsn),
        params=params,
    )


def _results(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["unit_id"]: _stable(r) for r in records}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _run(protocol: Any, config: RunConfig, executor: ExecutorChoice) -> tuple[Path, dict[str, Any]]:
    run = open_run(protocol, config, run_id=None, console=Console(quiet=True), executor=executor)
    summary = execute(protocol, run)
    return run.run_dir, summary


CASES = {
    "interview": (InterviewProtocol, lambda tmp: {"data": interview_seeds(tmp / "seeds.jsonl")}, 40),
    "judgeagent": (JudgeAgentProtocol, lambda tmp: {"batch_size": 2}, 8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_units_on_two_worker_nodes_one_killed_end_once_each_as_on_threads_within_limits_and_counted(
    case: str, cluster: RayCluster, standin: CountingStandIn, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    cls, params, units = CASES[case]
    params = params(tmp_path)
    standin.reset()
    threads_dir, threads_summary = _run(
        cls(), _config(case, standin, tmp_path / "threads", None, params), ExecutorChoice()
    )
    dsn = fresh_postgres_db(f"ray_{case}")
    standin.reset()
    config = _config(case, standin, tmp_path / "ray", dsn, params)
    run_box: dict[str, Path] = {}
    at_gate: dict[str, int] = {}
    killed, ended = threading.Event(), threading.Event()

    def kill_one_node_mid_run() -> None:
        """Once a third of the threads run's requests were served: close the gate, let the runners send what they
        will (a unit whose graph step waits at the gate keeps that step's earlier exchanges until its checkpoint
        write), kill worker1 (its units hold leases, their checkpoints are in PostgreSQL), open."""
        _until(lambda: standin.served >= threads_summary["usage"]["calls"] // 3 or ended.is_set())
        standin.open.clear()
        _until(lambda: standin.in_flight() == 0 and "run" in run_box or ended.is_set())
        _until(lambda: _logged_settled(run_box["run"]) or ended.is_set())
        if ended.is_set():  # the run ended first (the assertions below say why)
            standin.open.set()
            return
        at_gate["in_flight"] = run.services.in_flight()  # the live line's count: the requests held at the gate
        at_gate["unlogged"] = standin.served - _logged(run_box["run"])
        cluster.kill("worker1")
        killed.set()
        standin.open.set()

    killer = threading.Thread(target=kill_one_node_mid_run, daemon=True)
    killer.start()
    protocol = cls()
    run = open_run(
        protocol, config, run_id=None, console=Console(quiet=True), executor=ExecutorChoice("ray", cluster.address)
    )
    run_box["run"] = run.run_dir
    try:
        summary = execute(protocol, run)
    finally:
        ended.set()
    killer.join()
    statuses = Counter(r["status"] for r in _records(run.run_dir))
    assert statuses == {"ok": units}, [r.get("error") for r in _records(run.run_dir) if r["status"] != "ok"][:3]
    assert killed.is_set() and cluster.alive() == {"head", "worker2"}
    assert 1 <= at_gate["in_flight"] <= 2 * MODEL_CONCURRENCY  # counted on the workers, shown at the driver

    records = _records(run.run_dir)
    assert sorted(r["unit_id"] for r in records) == sorted({r["unit_id"] for r in records})  # one line per unit
    assert len(records) == units and all(r["status"] == "ok" for r in records)
    with UnitClaims(dsn) as claims:
        finals = claims.final_records(run.run_dir.name)
    assert sorted(finals) == sorted(r["unit_id"] for r in records)
    assert _results(records) == _results(_records(threads_dir))
    assert _stable(summary["metrics"]) == _stable(threads_summary["metrics"])
    assert max(standin.peak.values()) <= MODEL_CONCURRENCY, standin.peak
    # usage counts what the log holds; the only requests it lacks are those the killed node had served and not yet
    # sent (docs/scale-out.md: at most one graph step's calls per unit in flight), which its units then repeated
    assert summary["usage"]["calls"] == _logged(run.run_dir)
    assert 0 <= standin.served - _logged(run.run_dir) <= at_gate["unlogged"]


def _logged(run_dir: Path) -> int:
    path = run_dir / "events.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _logged_settled(run_dir: Path, quiet_s: float = 1.0) -> bool:
    """Whether the run's log held the same number of exchanges for ``quiet_s`` (the batches on their way came)."""
    import time

    before = _logged(run_dir)
    time.sleep(quiet_s)
    return _logged(run_dir) == before


def _until(condition: Any) -> None:
    import time

    while not condition():
        time.sleep(0.05)


def test_sigterm_to_the_driver_stops_every_worker_and_leaves_a_run_resume_finishes(
    cluster: RayCluster, standin: CountingStandIn, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    dsn = fresh_postgres_db("ray_sigterm")
    seeds = interview_seeds(tmp_path / "seeds.jsonl")
    out = tmp_path / "out"
    args = [
        "--protocol",
        "interview",
        "--data",
        seeds,
        "--target",
        f"target@{standin.url}",
        "--evaluator",
        f"evaluator@{standin.url}",
        "--concurrency",
        "4",
        "--postgres-dsn",
        dsn,
        "--out",
        str(out),
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
    ]
    standin.reset()
    env = cluster.env  # the nodes' environment: this checkout on the path, Ray's settings
    driver = subprocess.Popen(
        [sys.executable, "run.py", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    _until(lambda: any(out.glob("*/results.jsonl")) and len(_records(next(out.glob("*/results.jsonl")).parent)) >= 5)
    driver.send_signal(signal.SIGTERM)
    output = driver.communicate()[0].decode()
    assert driver.returncode == 143, output
    run_dir = next(out.glob("*/summary.json")).parent  # index.html sits beside the run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"]["signal"] == "SIGTERM" and summary["interrupted"]["unfinished_units"] > 0
    served = standin.served
    assert _cluster_quiet(standin, served)
    with pytest.raises(ValueError):  # the run's coordinator is gone with it: no worker is granted a request
        ray.get_actor(coordinator_name(run_dir.name), namespace=NAMESPACE)
    resumed = subprocess.run(
        [sys.executable, "run.py", *args, "--resume", run_dir.name], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = _records(run_dir)
    finished = [r for r in records if r["status"] == "ok"]
    assert len(finished) == len({r["unit_id"] for r in finished}) == 40


def test_sigkill_of_the_driver_leaves_no_actor_loses_no_logged_call_and_resume_counts_every_unit_in_full(
    cluster: RayCluster, standin: CountingStandIn, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    """The driver killed outright: its unit runners may finish the units they hold before Ray removes them, and
    each exchange they log is written to the run's database, which the resume appends to ``events.jsonl`` before
    anything runs (it used to wait in an event sink actor for the driver's next drain and die with it, so a resumed
    run found those units' final records with their calls missing: usage undercounted). A unit whose call a
    runner made but had not written when Ray removed it is continued by the resume, which makes that call again.
    Ray ends every actor of the killed driver (the coordinator was detached and stayed, 148 MB, on a long-lived
    cluster), and the resume makes its own."""
    seeds = interview_seeds(tmp_path / "seeds.jsonl")
    standin.reset()
    threads_dir, _ = _run(
        InterviewProtocol(),
        _config("interview", standin, tmp_path / "threads", None, {"data": seeds}),
        ExecutorChoice(),
    )
    needed = {r["unit_id"]: r["usage"]["calls"] for r in _records(threads_dir)}
    dsn = fresh_postgres_db("ray_sigkill")
    out, concurrency = tmp_path / "out", 4
    args = [
        "--protocol",
        "interview",
        "--data",
        seeds,
        "--target",
        f"target@{standin.url}",
        "--evaluator",
        f"evaluator@{standin.url}",
        "--concurrency",
        str(concurrency),
        "--postgres-dsn",
        dsn,
        "--out",
        str(out),
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        "--skip-preflight",
    ]
    standin.reset()
    driver = subprocess.Popen(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=cluster.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _until(lambda: any(out.glob("*/results.jsonl")) and len(_records(next(out.glob("*/results.jsonl")).parent)) >= 5)
    driver.kill()
    driver.wait()
    assert any(_cluster_quiet(standin, standin.served) for _ in range(10))  # Ray removes the driver's runners
    run_dir = next(out.glob("*/results.jsonl")).parent
    assert _actors_end(cluster, run_dir.name), "the killed driver's coordinator or runners still run"
    # served, but not written by the runner that made it when Ray removed it: a runner writes its exchanges in
    # batches, before each checkpoint write, so that is at most the calls of one graph step per unit in flight, and
    # the interview's largest step (single_turn_judge: the target's answer, then the grader) makes two
    unlogged = standin.served - _logged(run_dir) - _waiting(dsn, run_dir.name, run_dir / "events.jsonl")
    assert 0 <= unlogged <= concurrency * CALLS_IN_LARGEST_INTERVIEW_STEP
    resumed = subprocess.run(
        [sys.executable, "run.py", *args, "--resume", run_dir.name],
        cwd=REPO,
        env=cluster.env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = _records(run_dir)
    assert sorted(r["unit_id"] for r in records) == sorted(needed) and {r["status"] for r in records} == {"ok"}
    short = {
        r["unit_id"]: (r["usage"]["calls"], needed[r["unit_id"]])
        for r in records
        if r["usage"]["calls"] < needed[r["unit_id"]]
    }
    assert not short, f"units whose record counts fewer calls than the unit makes (counted, made): {short}"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["usage"]["calls"] == _logged(run_dir) == standin.served - unlogged


def _waiting(dsn: str, run_id: str, log: Path) -> int:
    """Exchanges the run's workers wrote to its database that ``log`` (the run's ``events.jsonl``) lacks: those
    no driver took yet, and those a driver took that its log does not hold (taken rows stay unmarked until the
    next drain)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT events FROM dyneval_event_batches WHERE run_id = %s AND events IS NOT NULL AND log_offset IS NULL",
            (run_id,),
        ).fetchall()
    with EventBatches(dsn, run_id) as batches:
        taken = batches.left(log)
    return sum(text.count("\n") for (text,) in rows) + taken.count("\n")


def _actors_end(cluster: RayCluster, run_id: str) -> bool:
    """Whether the run's coordinator (by its name) and every process of the run's actors are gone, within a
    minute (Ray ends a dead driver's actors once it sees the driver gone)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get_actor(coordinator_name(run_id), namespace=NAMESPACE)
        except ValueError:
            if not cluster.actor_processes("Coordinator", "_UnitRunner"):
                return True
        time.sleep(0.2)
    return False


def _cluster_quiet(standin: CountingStandIn, served: int) -> bool:
    """No request of the stopped run reaches the endpoint any more: a worker's request refused by the
    coordinator never leaves it, so after the units the stop interrupted, the count stays."""
    import time

    time.sleep(3)  # several of the workers' request cycles (20 ms each)
    return standin.served == served and standin.in_flight() == 0


def test_a_budget_holds_for_the_whole_cluster_and_stops_the_run_as_on_threads(
    cluster: RayCluster, standin: CountingStandIn, fresh_postgres_db: Any, tmp_path: Path, capsys: Any
) -> None:
    from dyneval import cli

    out, limit, concurrency = tmp_path / "out", 30, 4
    standin.reset()
    dsn = fresh_postgres_db("ray_budget")
    code = cli.main(
        [
            "--protocol",
            "interview",
            "--data",
            interview_seeds(tmp_path / "seeds.jsonl"),
            "--target",
            f"target@{standin.url}",
            "--evaluator",
            f"evaluator@{standin.url}",
            "--skip-preflight",
            "--concurrency",
            str(concurrency),
            "--postgres-dsn",
            dsn,
            "--out",
            str(out),
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            "--max-calls",
            str(limit),
        ]
    )
    assert code == cli.EXIT_BUDGET, capsys.readouterr().out
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    # each worker may start one request whose usage the coordinator did not have yet (as threads may in one process)
    assert limit <= summary["usage"]["calls"] == standin.served <= limit + concurrency
    assert summary["interrupted"]["budget"] and f"--max-calls {limit}" in summary["interrupted"]["budget"]
    assert summary["interrupted"]["unfinished_units"] > 0
    # the run's unit runners end with it: a long-lived cluster keeps no connection of a finished run (it used to
    # keep every run's pools, and the third run on one cluster met PostgreSQL's 'too many clients')
    assert _connections_gone(dsn), "the run's worker processes still hold PostgreSQL connections"


def _connections_gone(dsn: str) -> bool:
    """Whether every connection to ``dsn``'s database but this check's own closed (within a minute: the runners
    are killed as the run ends, and PostgreSQL sees their sockets close)."""
    import time

    import psycopg

    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
            if others == 0 or time.monotonic() > deadline:
                return others == 0
            time.sleep(0.2)
