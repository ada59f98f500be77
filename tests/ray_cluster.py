"""A real multi-node Ray cluster on this machine for tests: a head and worker nodes, each started by its own
``ray start --block`` process, joined over the machine's address, with one temp dir set on the head.

Each worker node carries a custom resource named after it (``worker1``, ``worker2``: 1000 units), so a task can
be placed on one (``resources={"worker1": 1}``) and :meth:`RayCluster.kill` can kill exactly that node's
processes (the ``ray start`` process, its raylet and agents, and the raylet's worker processes) mid-run, as a
machine that dies would. No ``ray stop``: it would stop every Ray process on the machine, other tests' too.

Ray picks the node address itself: ``--node-ip-address 127.0.0.1`` is resolved to the machine's own address
(Ray's ``resolve_ip_for_localhost``), which is still this machine. Every port is a free one (several clusters
may run side by side), and token authentication is off (``RAY_AUTH_MODE=disabled``: a local ``ray.init()``
elsewhere may have left a token in ``~/.ray``). Ray's own node health check is kept: a killed node is declared
dead about 15 s later (a tighter check declared live nodes dead while the machine's 2 cores were busy). Usage
statistics are off and no dashboard is started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dyneval.runtime.embedded import free_port

RAY = str(Path(sys.executable).with_name("ray"))
REPO = Path(__file__).resolve().parents[1]
#: Units of a worker node's own resource: a task asking for 1 fits 1000 times on it.
NODE_RESOURCE_UNITS = 1000


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    node_id: str = ""


@dataclass
class RayCluster:
    """A running cluster: ``address`` (``HOST:PORT`` for ``ray.init`` and ``--ray-address``), its nodes by name
    (``head``, ``worker1`` ...), and the environment its processes were started with."""

    address: str
    temp_dir: Path
    env: dict[str, str]
    nodes: dict[str, RayNode] = field(default_factory=dict)

    @property
    def workers(self) -> list[str]:
        return [name for name in self.nodes if name != "head"]

    def kill(self, name: str) -> None:
        """Kill worker node ``name`` at once (SIGKILL to all its processes) and wait until Ray declares it dead."""
        import ray

        node = self.nodes[name]
        _kill_tree(node.process.pid)
        node.process.wait()
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            time.sleep(0.2)

    def alive(self) -> set[str]:
        """Names of the nodes Ray reports alive."""
        import ray

        ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        return {name for name, node in self.nodes.items() if node.node_id in ids}


def _tree(root: int) -> list[int]:
    """``root`` and every process descending from it (Ray's workers put themselves in their own process groups,
    so a process group does not catch them), found by their parent ids in ``/proc``."""
    return trees([root])[root]


def trees(roots: list[int]) -> dict[int, list[int]]:
    """:func:`_tree` of each root, from one scan of ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out = {}
    for root in roots:
        found, todo = [], [root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        out[root] = found
    return out


def _start(name: str, args: list[str], env: dict[str, str], temp_dir: Path, attempts: int = 3) -> RayNode:
    """``ray start ARGS --block`` in its own session; returns once the node says it started. A node that gives
    up (Ray waits 30 s for a raylet to register, which a machine whose cores are busy can miss) is started again,
    up to ``attempts`` times; then ``RuntimeError`` with the end of its log."""
    for attempt in range(1, attempts + 1):
        log = temp_dir / f"{name}-{attempt}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([RAY, "start", *args, "--block", "--disable-usage-stats"], env=env,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while b"Ray runtime started" not in log.read_bytes() and process.poll() is None:
            time.sleep(0.2)
        if process.poll() is None:
            return RayNode(name, process, log)
        _kill_tree(process.pid)
    raise RuntimeError(f"ray start ({name}) exited with {process.returncode} {attempts} times: "
                       f"{log.read_text(errors='replace')[-1500:]}")


def _kill_tree(root: int) -> None:
    for pid in _tree(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def ray_cluster(workers: int = 2, cpus_per_worker: int = 1, object_store_bytes: int = 100_000_000,
                env: dict[str, str] | None = None) -> Iterator[RayCluster]:
    """A head (no CPU: tasks run on the workers) and ``workers`` worker nodes ``worker1`` ..., and this process
    connected to them (``ray.init``); everything killed and removed on exit. ``env``: extra variables for every
    node's processes (e.g. what a task reads). A cluster that cannot start raises ``RuntimeError``."""
    import ray

    auth_mode = os.environ.get("RAY_AUTH_MODE")
    temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    # the repository on the workers' path: tasks defined in test modules are imported there by name
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    # no token authentication: a token file a local ray.init() left in ~/.ray must not lock this cluster's nodes
    # and driver out of each other
    node_env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "PYTHONPATH": path,
                **(env or {})}
    port = free_port()

    def common() -> list[str]:
        """Options of every node; its agents' ports are its own (two nodes on one port: one dies)."""
        return ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(object_store_bytes),
                "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port())]

    cluster = RayCluster(address="", temp_dir=temp_dir, env=node_env)
    try:
        cluster.nodes["head"] = _start("head", [
            "--head", "--port", str(port), "--num-cpus", "0", "--include-dashboard=false",
            "--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port()),
            "--temp-dir", str(temp_dir), *common()], node_env, temp_dir)
        head_log = cluster.nodes["head"].log.read_text(errors="replace")
        host = head_log.split("ray start --address='", 1)[1].split("'", 1)[0].rsplit(":", 1)[0]
        cluster.address = f"{host}:{port}"
        for i in range(1, workers + 1):
            name = f"worker{i}"
            # worker ports are picked free within a range: one per node (two nodes never race for a port),
            # below the kernel's ephemeral ports, where free_port() finds the others
            low = 10002 + 1000 * ((os.getpid() % 9) * 2 + i - 1)
            cluster.nodes[name] = _start(name, [
                "--address", cluster.address, "--num-cpus", str(cpus_per_worker),
                "--resources", f'{{"{name}": {NODE_RESOURCE_UNITS}}}',
                "--min-worker-port", str(low), "--max-worker-port", str(low + 999), *common()], node_env, temp_dir)
        os.environ["RAY_AUTH_MODE"] = node_env["RAY_AUTH_MODE"]  # read by ray.init: as the nodes were started
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        _identify(cluster, workers)
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_mode
        for node in reversed(list(cluster.nodes.values())):
            _kill_tree(node.process.pid)
            node.process.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _identify(cluster: RayCluster, workers: int) -> None:
    """Wait until all nodes are alive, and learn each one's Ray node id (by its resource; the head by its own)."""
    import ray

    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        if len(alive) == workers + 1:
            break
        if any(n["Alive"] is False for n in ray.nodes()):
            raise RuntimeError("ray start: a node died while the cluster started: "
                               + "; ".join(n.log.read_text(errors="replace")[-500:] for n in cluster.nodes.values()))
        time.sleep(0.2)
    for n in alive:
        resources = n["Resources"]
        name = "head" if "node:__internal_head__" in resources else next(
            (w for w in cluster.workers if w in resources), None)
        if name is not None:
            cluster.nodes[name].node_id = n["NodeID"]


def cluster_or_skip(**options: Any) -> Iterator[RayCluster]:
    """:func:`ray_cluster` for a pytest fixture (``yield from cluster_or_skip()``): the test is skipped, with
    the reason, where Ray is not installed or cannot start."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
    try:
        with ray_cluster(**options) as cluster:
            yield cluster
    except RuntimeError as exc:
        if "ray start" in str(exc):
            pytest.skip(f"Ray cannot start here: {exc}")
        raise
