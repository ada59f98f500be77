"""Reaching the Ray cluster of ``--executor ray`` (``runtime/executors/ray_address.py``): an address that does not
answer ends the command within its stated bound with exit 6 and one line, a malformed one with exit 2, before any
run folder exists; SIGTERM while the driver connects exits 143 without a traceback; and a cluster the command
starts on this machine listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from dyneval.runtime.embedded import free_port
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.executors.ray_address import LOOPBACK_SWITCH, REACH_S
from dyneval.state.config import RunConfig, StoreConfig
from dyneval.state.errors import InfraError, InputError
from tests.golden_runs import respond
from tests.ray_cluster import beyond_loopback, trees
from tests.ray_runs import REPO, driver_command, interview_seeds
from tests.standin_endpoint import StandIn


def _env(**extra: str) -> dict[str, str]:
    """This checkout's environment without Ray's loopback switch (the command sets what it needs itself) and with
    token authentication off (a local Ray would leave a token in ~/.ray)."""
    env = {k: v for k, v in os.environ.items() if k not in (LOOPBACK_SWITCH, "RAY_ADDRESS")}
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", **extra}


def _closed_port() -> int:
    """A loopback port nothing listens on (free_port's socket is closed when it returns)."""
    return free_port()


def test_an_address_that_does_not_answer_ends_the_command_with_exit_6_and_one_line_before_any_run_folder(
    postgres_dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    address = f"127.0.0.1:{_closed_port()}"
    done = subprocess.run(
        driver_command("http://127.0.0.1:9/v1", postgres_dsn, out, "--ray-address", address, "--skip-preflight"),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 6, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: the Ray cluster at {address} (--ray-address) does not answer"
    ), done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not out.exists()


def test_reaching_a_closed_address_gives_up_within_its_stated_bound(postgres_dsn: str, tmp_path: Path) -> None:
    config = RunConfig(protocol="interview", out=str(tmp_path), stores=StoreConfig(postgres_dsn=postgres_dsn))
    started = time.monotonic()
    with pytest.raises(InfraError, match=f"no connection within {REACH_S:g} s"):
        ExecutorChoice("ray", f"127.0.0.1:{_closed_port()}").check(config)
    assert time.monotonic() - started < REACH_S + 2  # Ray's own connect went on for minutes


@pytest.mark.parametrize(
    "address", ["head.internal", "head:port", "head:70000", ":6379", "ray://head:10001", "user@head:6379"]
)
def test_a_malformed_address_is_bad_input_naming_the_flag(address: str, postgres_dsn: str, tmp_path: Path) -> None:
    config = RunConfig(protocol="interview", out=str(tmp_path), stores=StoreConfig(postgres_dsn=postgres_dsn))
    with pytest.raises(InputError, match=r"--ray-address: .* is not HOST:PORT"):
        ExecutorChoice("ray", address).check(config)


def test_a_malformed_ray_address_variable_is_bad_input_naming_it(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "head.internal")  # what ray.init would use with no --ray-address
    config = RunConfig(protocol="interview", out=str(tmp_path), stores=StoreConfig(postgres_dsn=postgres_dsn))
    with pytest.raises(InputError, match=r"^RAY_ADDRESS: 'head.internal' is not HOST:PORT"):
        ExecutorChoice("ray").check(config)


def test_sigterm_while_the_driver_connects_exits_143_at_once_without_a_traceback(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A port that accepts connections but is no Ray head: the reach passes, and ``ray.init`` then waits on it
    (for minutes, up to 30 s per attempt without looking at signals)."""
    out = tmp_path / "out"
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:
        silent.settimeout(120)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        driver = subprocess.Popen(
            driver_command("http://127.0.0.1:9/v1", postgres_dsn, out, "--ray-address", address, "--skip-preflight"),
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        accepted = [silent.accept()[0] for _ in range(2)]  # the reach, then Ray's own connection
        driver.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        stdout, stderr = driver.communicate(timeout=120)
        waited = time.monotonic() - sent
        for conn in accepted:
            conn.close()
    assert driver.returncode == 143, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert waited < 20, waited  # Ray's SIGTERM handler ran only after its connect attempt (30 s), then exit 15
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"]["signal"] == "SIGTERM"


def test_a_cluster_the_command_starts_itself_listens_on_loopback_only(fresh_postgres_db: Any, tmp_path: Path) -> None:
    """No --ray-address: the driver starts Ray on this machine (GCS, raylet, workers, agents: its own process
    tree); while its units run, none of them listens beyond 127.0.0.1."""
    out = tmp_path / "out"
    seeds = interview_seeds(tmp_path / "seeds.jsonl", 21)
    with StandIn(respond=respond, latency_s=0.2) as standin:
        driver = subprocess.Popen(
            driver_command(
                standin.url,
                fresh_postgres_db("ray_local"),
                out,
                "--data",
                seeds,
                "--concurrency",
                "2",
                "--skip-preflight",
            ),
            cwd=REPO,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not any(p.stat().st_size for p in out.glob("*/results.jsonl")):  # runners are up, units ending
                assert driver.poll() is None, "the run ended before any unit did"
                time.sleep(0.2)
            ray_processes = {pid for pids in trees([driver.pid]).values() for pid in pids}
            assert len(ray_processes) > 3  # GCS, raylet, unit runners ... are the driver's
            assert beyond_loopback(ray_processes) == []
        finally:
            driver.send_signal(signal.SIGTERM)
            driver.wait(timeout=120)
