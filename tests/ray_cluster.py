"""A real multi-node Ray cluster on this machine for tests: a head and worker nodes, each started by its own
``ray start --block`` process, joined over 127.0.0.1, with one temp dir set on the head.

Each worker node carries a custom resource named after it (``worker1``, ``worker2``: 1000 units), so a task can
be placed on one (``resources={"worker1": 1}``) and :meth:`RayCluster.kill` can kill exactly that node's
processes (the ``ray start`` process, its raylet and agents, and the raylet's worker processes) mid-run, as a
machine that dies would. No ``ray stop``: it would stop every Ray process on the machine, other tests' too.

**Loopback only.** Every Ray process of the cluster (GCS, raylets and their object managers, workers, dashboard
and runtime-env agents) and the driver listen on 127.0.0.1 and nowhere else (:meth:`RayCluster.beyond_loopback`
checks it with ``ss``). Ray binds its servers to loopback only when the node's address is exactly 127.0.0.1;
``ray start --node-ip-address 127.0.0.1`` alone does not give that, because Ray replaces a loopback address by the
machine's network address (``resolve_ip_for_localhost``), so the nodes listened on every interface. Tried with
the installed Ray (2.60):

- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps 127.0.0.1 (every server then binds it), but ``ray start`` then
  refuses any node that joins a head: enough for a driver and a one-node cluster, which is why this process sets
  it (``tests/conftest.py`` before the test modules import Ray, :func:`ray_cluster` for a script) as does
  ``--executor ray`` for a cluster of its own or at a loopback address
  (``runtime.executors.ray_address.keep_on_loopback``), and the nodes here must not;
- a network namespace of the test's own (``unshare -n``: privileges) was not used: it would keep the nodes off
  the machine's network, but also away from the PostgreSQL server and stand-in endpoints on the host's
  loopback, which the workers call;
- so each node runs Ray's own ``ray start`` through ``tests/ray_node.py``, which leaves out only that
  resolution: the head and every worker node keep 127.0.0.1, and the cluster's address is ``127.0.0.1:PORT``.

Every port is a free one (several clusters may run side by side), and token authentication is off
(``RAY_AUTH_MODE=disabled``: a local ``ray.init()`` elsewhere may have left a token in ``~/.ray``). Ray's own node
health check is kept: a killed node is declared dead about 15 s later (a tighter check declared live nodes dead
while the machine's 2 cores were busy). Usage statistics are off and no dashboard is started.
"""

from __future__ import annotations

import ipaddress
import os
import re
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
from dyneval.runtime.executors.ray_address import LOOPBACK_SWITCH, keep_on_loopback

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

    def kill_raylet(self, name: str) -> None:
        """Kill only the raylet of worker node ``name`` (SIGKILL), as when it crashes: its workers and agents end
        with it, and so does the node's ``ray start`` process."""
        raylet = next(pid for pid in _tree(self.nodes[name].process.pid) if _command(pid) == "raylet")
        os.kill(raylet, signal.SIGKILL)

    def alive(self) -> set[str]:
        """Names of the nodes Ray reports alive."""
        import ray

        ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        return {name for name, node in self.nodes.items() if node.node_id in ids}

    def actor_processes(self, *classes: str) -> list[int]:
        """The processes of the cluster's nodes that hold an actor of one of ``classes`` (Ray titles such a process
        ``ray::CLASS`` or ``ray::CLASS.METHOD``)."""
        titles = tuple(f"ray::{name}" for name in classes)
        return [pid for pid in self.processes() if _cmdline(pid).startswith(titles)]

    def processes(self, *drivers: int) -> set[int]:
        """Every process of the cluster's nodes, this process (a driver) and the process trees of ``drivers``."""
        found = trees([node.process.pid for node in self.nodes.values()] + list(drivers))
        return {os.getpid()} | {pid for pids in found.values() for pid in pids}

    def beyond_loopback(self, *drivers: int) -> list[str]:
        """``ss``' line for every TCP or UDP socket that a process of :meth:`processes` listens on at an address
        other than loopback (none, if the cluster keeps to 127.0.0.1)."""
        return beyond_loopback(self.processes(*drivers))


def beyond_loopback(pids: set[int]) -> list[str]:
    """``ss``' line for every listening TCP or UDP socket of ``pids`` whose address is not a loopback one (``*``,
    ``0.0.0.0`` and ``[::]`` are every interface)."""
    listening = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, check=True).stdout
    out = []
    for line in listening.splitlines():
        fields = line.split()
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if owners & pids and not _loopback(fields[4].rsplit(":", 1)[0]):
            out.append(" ".join(fields))
    return out


def _loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False  # *: every interface
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ").strip()
    except OSError:
        return ""


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
        fields = text[text.rindex(")") + 2 :].split()
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
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.ray_node", "start", *args, "--block", "--disable-usage-stats"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while b"Ray runtime started" not in log.read_bytes() and process.poll() is None:
            time.sleep(0.2)
        if process.poll() is None:
            return RayNode(name, process, log)
        _kill_tree(process.pid)
    raise RuntimeError(
        f"ray start ({name}) exited with {process.returncode} {attempts} times: "
        f"{log.read_text(errors='replace')[-1500:]}"
    )


def _kill_tree(root: int) -> None:
    for pid in _tree(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def ray_cluster(
    workers: int = 2, cpus_per_worker: int = 1, object_store_bytes: int = 100_000_000, env: dict[str, str] | None = None
) -> Iterator[RayCluster]:
    """A head (no CPU: tasks run on the workers) and ``workers`` worker nodes ``worker1`` ..., and this process
    connected to them (``ray.init``); everything killed and removed on exit. ``env``: extra variables for every
    node's processes (e.g. what a task reads). A cluster that cannot start raises ``RuntimeError``."""
    keep_on_loopback(None)  # this process, a driver of the cluster, reaches it at 127.0.0.1 (if Ray is not loaded)
    import ray

    auth_mode = os.environ.get("RAY_AUTH_MODE")
    temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    # the repository on the workers' path: tasks defined in test modules are imported there by name
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    # no token authentication: a token file a local ray.init() left in ~/.ray must not lock this cluster's nodes
    # and driver out of each other
    node_env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": path,
        **(env or {}),
    }
    node_env.pop(LOOPBACK_SWITCH, None)  # it would make `ray start` refuse the worker nodes (tests/ray_node.py)
    if ray.util.get_node_ip_address() != "127.0.0.1":
        raise RuntimeError(
            f"this process imported Ray without {LOOPBACK_SWITCH}=0, so it would reach the cluster at "
            "the machine's network address, where nothing listens: set it before importing ray"
        )
    port = free_port()

    def common() -> list[str]:
        """Options of every node; its agents' ports are its own (two nodes on one port: one dies)."""
        return [
            "--node-ip-address",
            "127.0.0.1",
            "--object-store-memory",
            str(object_store_bytes),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--metrics-export-port",
            str(free_port()),
            "--runtime-env-agent-port",
            str(free_port()),
        ]

    cluster = RayCluster(address="", temp_dir=temp_dir, env=node_env)
    try:
        cluster.nodes["head"] = _start(
            "head",
            [
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "0",
                "--include-dashboard=false",
                "--dashboard-port",
                str(free_port()),
                "--ray-client-server-port",
                str(free_port()),
                "--temp-dir",
                str(temp_dir),
                *common(),
            ],
            node_env,
            temp_dir,
        )
        cluster.address = f"127.0.0.1:{port}"
        for i in range(1, workers + 1):
            name = f"worker{i}"
            # worker ports are picked free within a range: one per node (two nodes never race for a port),
            # below the kernel's ephemeral ports, where free_port() finds the others
            low = 10002 + 1000 * ((os.getpid() % 9) * 2 + i - 1)
            cluster.nodes[name] = _start(
                name,
                [
                    "--address",
                    cluster.address,
                    "--num-cpus",
                    str(cpus_per_worker),
                    "--resources",
                    f'{{"{name}": {NODE_RESOURCE_UNITS}}}',
                    "--min-worker-port",
                    str(low),
                    "--max-worker-port",
                    str(low + 999),
                    *common(),
                ],
                node_env,
                temp_dir,
            )
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
            raise RuntimeError(
                "ray start: a node died while the cluster started: "
                + "; ".join(n.log.read_text(errors="replace")[-500:] for n in cluster.nodes.values())
            )
        time.sleep(0.2)
    for n in alive:
        resources = n["Resources"]
        name = (
            "head"
            if "node:__internal_head__" in resources
            else next((w for w in cluster.workers if w in resources), None)
        )
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
