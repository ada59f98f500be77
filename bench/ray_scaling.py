"""Threads against ``--executor ray`` with 1 and 2 worker nodes on this machine: calls/s and CPU per unit as
ratios, all measured in this one run.

    python -m bench.ray_scaling [--units 200] [--concurrency 16] [--latencies 0,0.2]

The same interview batch (``--units`` seed questions, each its own unit) runs on the thread pool and on a Ray
cluster of a head and 1, then 2, worker nodes, each its own ``ray start`` process listening on 127.0.0.1 only
(``tests/ray_cluster.py``), against the stand-in endpoint (``tests/standin_endpoint.py`` with the golden runs'
replies, in its own process, ``--latencies`` seconds per request). Every run, threads included, checkpoints in
a fresh database of one throw-away PostgreSQL server (Ray requires it; the thread pool uses the same store so
only the executor differs). Per run: wall seconds of ``execute``, LLM calls (the run's usage), calls/s, and the
CPU seconds of each party over the run, sampled from ``/proc`` every 0.25 s (user + system; a process that ends
during the run keeps its last sample): the driver (this process, the sampling thread's own CPU left out) until
its end-of-run summary, report and viewer, those apart (``report``: once per run and after the calls, paid by the
thread pool too, so not what saturates as worker machines are added), the
Ray head's and the worker nodes' process trees, PostgreSQL, and the stand-in. CPU
per unit is everything but the stand-in (which a real endpoint would not charge to this machine). Before the
measured runs, each executor (each new cluster) runs ``2 x --concurrency`` units unmeasured, so the nodes' caches
are warm (files read, Python's bytecode written); each Ray run still starts its own unit runners (one process per
worker CPU, importing ``dyneval``), which is part of its wall time: a one-off cost per run, so ``--units`` should
be large enough that it does not dominate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

from dyneval.protocols.interview import InterviewProtocol  # noqa: E402
from dyneval.runtime import runner  # noqa: E402
from dyneval.runtime.embedded import free_port  # noqa: E402
from dyneval.runtime.executors.choice import ExecutorChoice  # noqa: E402
from dyneval.runtime.runner import execute, open_run  # noqa: E402
from dyneval.state.config import ModelSpec, RunConfig, StoreConfig  # noqa: E402
from tests.ray_cluster import RayCluster, ray_cluster, trees  # noqa: E402
from tests.ray_runs import interview_seeds  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
#: Room for the driver's and each unit runner's checkpointer pool and claims connection, beside the warm-up's.
MAX_CONNECTIONS = 500


def _cpu_ticks(pid: int) -> int | None:
    """User + system CPU ticks of ``pid`` and of the children it reaped (``/proc/PID/stat``); None once gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return sum(int(f) for f in text[text.rindex(")") + 2 :].split()[11:15])  # utime stime cutime cstime


#: A process's kind by its command line (Ray names an actor's process ``ray::Class`` or ``ray::Class.method``).
ACTOR_KINDS = {"ray::_UnitRunner": "runner", "ray::Coordinator": "coordinator"}
#: The parts on the driver's machine whose CPU a run pays once, however many worker machines it has.
CENTRAL = ("coordinator", "driver")


def _kind(pid: int, party: str) -> str:
    """What ``pid`` of ``party``'s tree is: one of :data:`ACTOR_KINDS`' kinds, or the party (``ray head`` and
    ``ray workers`` for Ray's own processes: GCS, raylets, agents, idle workers)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return party
    return next((kind for prefix, kind in ACTOR_KINDS.items() if title.startswith(prefix)), party)


class TreeCPU:
    """CPU seconds each kind of process spent between :meth:`start` and :meth:`stop`, sampled every 0.25 s (one
    scan of ``/proc``): a process belongs to the party whose tree holds it and is counted under its kind
    (:func:`_kind`: a Ray worker process becomes an actor's after it started, so its last kind counts). A process
    that ends meanwhile (a run's unit runners are killed as the run ends, and nobody reaps them into a parent's
    count) keeps what it had spent at its last sample, so it is undercounted by at most 0.25 s of CPU. The
    sampling thread's own CPU is kept apart (``sampler_s``), not charged to the driver."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.kind: dict[int, str] = {}
        self.sampler_s = 0.0
        self._started = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _once(self) -> None:
        found = trees(list(self.roots.values()))
        for party, root in self.roots.items():
            for pid in found[root]:
                ticks = _cpu_ticks(pid)
                if ticks is not None:  # a process born after the start spent all its CPU in this run
                    self.first.setdefault(pid, 0 if self._started else ticks)
                    self.last[pid] = ticks
                    if self.kind.get(pid, party) == party:  # an actor's process stays the actor's
                        self.kind[pid] = _kind(pid, party)

    def _sample(self) -> None:
        while not self._done.wait(0.25):
            self._once()
        self.sampler_s = time.thread_time()

    def start(self) -> None:
        self._once()  # what each process already spent is not this run's
        self._started = True
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        self._once()
        spent: dict[str, float] = {}
        for pid, ticks in self.last.items():
            spent[self.kind[pid]] = spent.get(self.kind[pid], 0.0) + (ticks - self.first[pid]) / TICK
        return spent


@contextlib.contextmanager
def postgres() -> Iterator[tuple[str, Path]]:
    """A throw-away PostgreSQL server on 127.0.0.1 (as ``tests/conftest.py``'s fixture starts one): its DSN and
    data directory; stopped and removed on exit."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    initdb, pg_ctl = (
        shutil.which(name) or next((str(d / name) for d in debian if (d / name).exists()), None)
        for name in ("initdb", "pg_ctl")
    )
    if not (initdb and pg_ctl):
        sys.exit("bench.ray_scaling: PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    folder = Path(tempfile.mkdtemp(prefix="dyneval-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        as_user = ["runuser", "-u", "postgres" if shutil.which("runuser") else "nobody", "--"]
        shutil.chown(folder, user=as_user[2])
    port, data = free_port(), folder / "data"
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"], check=True, capture_output=True
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections={MAX_CONNECTIONS}"
    subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-w", "-l", str(folder / "log"), "-o", options, "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", data
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def fresh_db(dsn: str, name: str) -> str:
    import sqlalchemy as sa

    admin = sa.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return dsn.rsplit("/", 1)[0] + f"/{name}"


@contextlib.contextmanager
def standin(latency: float) -> Iterator[tuple[str, int]]:
    """The stand-in with the golden runs' replies in its own process (``bench.speed --serve``): URL and pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.speed", "--serve", str(latency), ""], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc.stdout.readline().strip(), proc.pid  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.wait()


def one_run(
    label: str,
    data: str,
    url: str,
    dsn: str,
    out: Path,
    concurrency: int,
    choice: ExecutorChoice,
    parties: dict[str, int],
) -> dict[str, Any]:
    """One interview batch on ``choice``; wall, calls, CPU seconds by process kind over ``execute`` (:class:`TreeCPU`)
    and units per unit runner."""
    models = {role: ModelSpec(model=role, base_url=url, concurrency=256) for role in ("target", "evaluator")}
    config = RunConfig(
        protocol="interview",
        out=str(out),
        models=models,
        roles={r: r for r in models},
        concurrency=concurrency,
        stores=StoreConfig(postgres_dsn=dsn),
        params={"data": data},
    )
    protocol = InterviewProtocol()
    run = open_run(protocol, config, run_id=None, console=Console(quiet=True), executor=choice)
    sampler = TreeCPU({name: pid for name, pid in parties.items() if name != "driver"})
    finish, finishing = runner._finish, []

    def timed(*args: Any) -> dict[str, Any]:
        finishing.append(time.process_time())
        return finish(*args)

    sampler.start()
    driver, started = time.process_time(), time.perf_counter()
    runner._finish = timed  # type: ignore[assignment]
    try:
        summary = execute(protocol, run, skip_preflight=True)
    finally:
        runner._finish = finish
    wall, ended = time.perf_counter() - started, time.process_time()
    cpu = sampler.stop()
    cpu = {"driver": finishing[0] - driver - sampler.sampler_s, "report": ended - finishing[0], **cpu}
    counts = summary["status_counts"]
    if counts.get("ok", 0) != sum(counts.values()):
        records = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
        failed = next(r for r in records if r["status"] != "ok")
        print(f"{label}: {counts}; first not ok: {failed['unit_id']} {failed.get('error')}", file=sys.stderr)
    return {
        "label": label,
        "wall": wall,
        "calls": summary["usage"]["calls"],
        "units": sum(counts.values()),
        "ok": counts.get("ok", 0),
        "cpu": cpu,
        "per_runner": units_per_runner(run.run_dir / "events.jsonl"),
    }


def cluster_parties(cluster: RayCluster) -> dict[str, int]:
    """Each node's ``ray start`` process (the root of its tree) by party: ``ray head``, ``ray workers:NAME``."""
    return {
        ("ray head" if name == "head" else f"ray workers:{name}"): node.process.pid
        for name, node in cluster.nodes.items()
    }


def units_per_runner(events: Path) -> dict[str, int]:
    """Units each unit runner ended (the ``worker`` of a unit's last exchange), from the run's ``events.jsonl``."""
    last: dict[str, str] = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if "worker" in event:
            last[event["unit"]] = event["worker"]
    counts: dict[str, int] = {}
    for worker in last.values():
        counts[worker] = counts.get(worker, 0) + 1
    return counts


def per_call_ms(row: dict[str, Any]) -> dict[str, float]:
    """Milliseconds of CPU per LLM call by process kind (a node's Ray processes under ``ray head`` or
    ``ray workers``; the thread pool's one process under ``runner``, where it runs its units)."""
    out: dict[str, float] = {}
    for party, seconds in row["cpu"].items():
        kind = party.split(":")[0]
        if row["label"] == "threads" and kind == "driver":
            kind = "runner"
        out[kind] = out.get(kind, 0.0) + seconds * 1000 / max(row["calls"], 1)
    return out


def predict(ms: dict[str, float], cores: int) -> tuple[float, float, str, float]:
    """From one Ray run's CPU per call: calls/s one worker machine of ``cores`` cores gives (its unit runners and
    its Ray processes), the calls/s at which the first central part saturates (the coordinator and the driver are
    one process each, so one core each at most; the driver's machine, also of ``cores`` cores, holds them with
    PostgreSQL and the head's Ray processes), that part, and the worker machines it takes."""
    per_machine = cores * 1000 / max(ms.get("runner", 0.0) + ms.get("ray workers", 0.0), 1e-9)
    head = sum(ms.get(k, 0.0) for k in (*CENTRAL, "postgres", "ray head"))
    caps = {part: 1000 / ms[part] for part in CENTRAL if ms.get(part)}
    caps[f"driver's machine ({cores} cores)"] = cores * 1000 / max(head, 1e-9)
    part = min(caps, key=caps.__getitem__)
    return per_machine, caps[part], part, caps[part] / per_machine


KINDS = ("runner", "coordinator", "driver", "report", "postgres", "ray head", "ray workers", "stand-in")


#: What a unit runner imports and builds as it starts, beyond Ray (``_Worker``): timed in a fresh process.
STARTING = """
import time
import ray
started = time.process_time()
import langchain_openai
import langgraph.checkpoint.postgres
import psycopg_pool
import dyneval.runtime.executors.ray
from dyneval.protocols.interview import InterviewProtocol
InterviewProtocol().builder().compile()
print(time.process_time() - started)
"""


def runner_start_s() -> float:
    """CPU seconds a unit runner spends starting (:data:`STARTING`), the least of three fresh processes: every
    Ray run starts its runners anew, while the thread pool's process (this one) imported all of it before its
    measured runs."""
    return min(
        float(subprocess.run([sys.executable, "-c", STARTING], capture_output=True, text=True, check=True).stdout)
        for _ in range(3)
    )


def report(rows: list[dict[str, Any]], latency: float, cores: int, start_s: float) -> None:
    """The runs at one latency, the threads' first; ``runner x`` is a Ray runner's CPU per call against the
    thread pool's, and ``after start`` the same less each runner's start (``start_s``, :func:`runner_start_s`)."""
    base = next(r for r in rows if r["label"] == "threads")
    base_rate, base_ms = base["calls"] / base["wall"], per_call_ms(base)
    print(f"\nstand-in latency {latency:g} s; CPU in ms per LLM call by process kind")
    print(
        f"{'executor':<15} {'ok/units':>9} {'calls':>6} {'wall s':>6} {'calls/s':>7} {'x thr':>5} "
        + " ".join(f"{k:>11}" for k in KINDS)
        + f" {'central':>7} {'runner x':>8} {'after start':>11} {'units/runner max/min':>20}"
    )
    for r in rows:
        rate, ms = r["calls"] / r["wall"], per_call_ms(r)
        central = sum(ms.get(k, 0.0) for k in CENTRAL) if r["label"] != "threads" else 0.0
        spread = r["per_runner"]
        balance = f"{max(spread.values())}/{min(spread.values())}" if spread else "-"
        started = start_s * 1000 * len(spread) / max(r["calls"], 1)  # ms per call
        print(
            f"{r['label']:<15} {r['ok']:>4}/{r['units']:<4} {r['calls']:>6} {r['wall']:>6.1f} {rate:>7.1f} "
            f"{rate / base_rate:>5.2f} "
            + " ".join(f"{ms.get(k, 0.0):>11.3f}" for k in KINDS)
            + f" {central:>7.3f} {ms.get('runner', 0.0) / base_ms['runner']:>8.2f}"
            + f" {(ms.get('runner', 0.0) - started) / base_ms['runner']:>11.2f} {balance:>20}"
        )
    for r in rows:
        if r["label"] == "threads":
            continue
        per_machine, cap, part, machines = predict(per_call_ms(r), cores)
        curve = ", ".join(f"N={n}: {min(n * per_machine, cap):.0f}" for n in (1, 2, 5, 10, 20, 40))
        print(
            f"{r['label']}: predicted calls/s on N worker machines of {cores} cores: {curve}; "
            f"saturates at N = {machines:.1f} ({part}, {cap:.0f} calls/s)"
        )


def fixed_and_marginal(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per central kind, PostgreSQL and the head's Ray processes, over every Ray run of the bench: its CPU split
    into a part per second of the run (``a``, ms/s: what the process costs while the run lasts, e.g. an idle Ray
    actor's own threads) and a part per LLM call (``b``, ms), fitted as CPU = a x wall + b x calls by non-negative
    least squares (``scipy.optimize.nnls``). The runs differ in calls/s (latency, worker nodes), which separates
    the two. Only the per-call part grows with the worker machines, so it is what saturates a central process."""
    from scipy.optimize import nnls

    ray_rows = [r for r in rows if r["label"] != "threads"]
    if len({round(r["calls"] / r["wall"]) for r in ray_rows}) < 2:
        return {}  # one call rate: the two parts cannot be told apart
    design = [[r["wall"], r["calls"]] for r in ray_rows]
    fits: dict[str, tuple[float, float]] = {}
    for kind in (*CENTRAL, "postgres", "ray head"):
        (a, b), _ = nnls(design, [r["cpu"].get(kind, 0.0) for r in ray_rows])
        fits[kind] = (a * 1000, b * 1000)
    return fits


def report_fit(rows: list[dict[str, Any]], cores: int, per_machine: float) -> None:
    """The per-second and per-call parts of the central processes (:func:`fixed_and_marginal`) and the calls/s at
    which each saturates from them (one core each, less its per-second part), beside the driver's machine."""
    fits = fixed_and_marginal(rows)
    if not fits:
        return
    print("\ncentral CPU split over all Ray runs (CPU = a x wall + b x calls, non-negative least squares):")
    for kind, (a, b) in fits.items():
        cap = (1000 - a) / b if b else float("inf")
        print(f"  {kind:<12} a = {a:6.1f} ms/s   b = {b:6.3f} ms/call   saturates at {cap:,.0f} calls/s")
    central_b = sum(fits[k][1] for k in CENTRAL)
    head_a = sum(a for a, _ in fits.values())
    head_b = sum(b for _, b in fits.values())
    machine = (cores * 1000 - head_a) / head_b if head_b else float("inf")
    print(
        f"  central per call (coordinator + driver, b only): {central_b:.3f} ms; the driver's machine "
        f"({cores} cores, with PostgreSQL and Ray's head processes) saturates at {machine:,.0f} calls/s = "
        f"{machine / per_machine:.1f} worker machines of {per_machine:.0f} calls/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=200, help="interview units per run (default 200)")
    parser.add_argument("--concurrency", type=int, default=16, help="units in flight (default 16)")
    parser.add_argument("--latencies", default="0,0.2", help="stand-in seconds per request, comma-separated")
    parser.add_argument("--workers", default="1,2", help="worker nodes of the Ray clusters, comma-separated")
    parser.add_argument("--cores", type=int, default=2, help="cores of a machine in the prediction (default 2)")
    args = parser.parse_args()
    latencies = [float(x) for x in args.latencies.split(",")]
    load = os.getloadavg()[0]
    rows: dict[float, list[dict[str, Any]]] = {lat: [] for lat in latencies}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ray-scaling-")))
        data = interview_seeds(work / "seeds.jsonl", args.units)
        dsn, pg_data = stack.enter_context(postgres())
        pg_pid = int((pg_data / "postmaster.pid").read_text().split()[0])
        standins = {lat: stack.enter_context(standin(lat)) for lat in latencies}
        n = 0

        def db() -> str:
            nonlocal n
            n += 1
            return fresh_db(dsn, f"bench_{n}")

        warm = interview_seeds(work / "warm.jsonl", 2 * args.concurrency)
        first_url = next(iter(standins.values()))[0]
        one_run("warm-up", warm, first_url, db(), work / "warm", args.concurrency, ExecutorChoice(), {"driver": 0})
        for lat, (url, pid) in standins.items():
            parties = {"driver": 0, "postgres": pg_pid, "stand-in": pid}
            rows[lat].append(
                one_run("threads", data, url, db(), work / f"t{n}", args.concurrency, ExecutorChoice(), parties)
            )
        for workers in (int(x) for x in args.workers.split(",")):
            with ray_cluster(workers=workers, cpus_per_worker=1) as cluster:
                # not measured: the worker processes start and import dyneval on their first units
                one_run(
                    "warm-up",
                    warm,
                    first_url,
                    db(),
                    work / f"warm{n}",
                    args.concurrency,
                    ExecutorChoice("ray", cluster.address),
                    {"driver": 0},
                )
                for lat, (url, pid) in standins.items():
                    parties = {"driver": 0, **cluster_parties(cluster), "postgres": pg_pid, "stand-in": pid}
                    rows[lat].append(
                        one_run(
                            f"ray, {workers} worker{'s' * (workers > 1)}",
                            data,
                            url,
                            db(),
                            work / f"r{n}",
                            args.concurrency,
                            ExecutorChoice("ray", cluster.address),
                            parties,
                        )
                    )
                if wide := cluster.beyond_loopback(os.getpid()):
                    sys.exit(f"bench.ray_scaling: the cluster listened beyond 127.0.0.1: {wide}")
    print(
        f"interview, {args.units} units, --concurrency {args.concurrency}, {os.cpu_count()} cores; "
        f"1-min load average at the start: {load:.2f}"
    )
    start_s = runner_start_s()
    print(f"a unit runner's start (imports, graph; beyond Ray's import): {start_s:.2f} s of CPU")
    for lat in latencies:
        report(rows[lat], lat, args.cores, start_s)
    every = [r for lat in latencies for r in rows[lat]]
    one_worker = [r for r in every if r["label"] == "ray, 1 worker"]
    if one_worker:
        report_fit(every, args.cores, min(predict(per_call_ms(r), args.cores)[0] for r in one_worker))


if __name__ == "__main__":
    main()
