"""Shared fixtures: offline environment, the embedded llama.cpp server, fake services."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# Ray in this process (a driver of the test clusters, tests/ray_cluster.py) keeps 127.0.0.1 as its address: read
# when ray is imported, which test modules do as they are collected
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# The Ctrl-C tests send SIGINT to a run (in this process or a child). A shell that starts the suite as a background
# job hands it SIGINT ignored, which children inherit, so no run would stop: Python's own handler again, as in a
# foreground shell (a child then starts with the default disposition).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def stop_flag_down() -> None:
    """Every test starts with this process's stop flag down: a run stopped by its budget leaves it up until the
    next run starts (``runtime.runner.execute`` clears it), and a test that drives a session or a coordinator
    without ``execute`` would otherwise find its requests refused, depending on which test ran before it."""
    from dyneval.runtime import stop

    stop.clear()


@pytest.fixture(scope="session")
def embedded_url() -> Any:
    """A real llama.cpp OpenAI-compatible server on 127.0.0.1 with the embedded SmolLM2 model.

    Started once per test session; ``DYNEVAL_EMBEDDED_URL`` makes every ``local``
    spec in the process use it. Stopped after the session.
    """
    from dyneval.runtime.embedded import start_server

    server = start_server()
    previous = os.environ.get("DYNEVAL_EMBEDDED_URL")
    os.environ["DYNEVAL_EMBEDDED_URL"] = server.base_url
    yield server.base_url
    if previous is None:
        os.environ.pop("DYNEVAL_EMBEDDED_URL", None)
    else:
        os.environ["DYNEVAL_EMBEDDED_URL"] = previous
    server.stop()


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (real public datasets); tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


def make_services(
    tmp_path: Path, protocol: str = "test", chats: dict[str, Any] | None = None, params: dict[str, Any] | None = None
) -> Any:
    """Services with fake chat models per role and no retry sleeping (unit tests)."""
    from dyneval.runtime.events import EventLog
    from dyneval.runtime.services import Services
    from dyneval.state.config import RunConfig

    config = RunConfig(protocol=protocol, out=str(tmp_path), params=params or {})
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    return Services(
        config=config,
        run_dir=run_dir,
        events=EventLog(run_dir / "events.jsonl"),
        chat_overrides=chats or {},
        retry_sleep=lambda s: None,
    )


@pytest.fixture(scope="session")
def postgres_dsn() -> Any:
    """A throw-away PostgreSQL server on 127.0.0.1 (skips when the server binaries are absent)."""
    from tests.pg_server import PgServer

    server = PgServer()
    yield server.dsn()
    server.close()


@pytest.fixture
def fresh_postgres_db(postgres_dsn: str) -> Any:
    """``make(name)``: an empty database ``name`` on the throw-away server (dropped first), as a DSN."""
    import sqlalchemy as sa

    def make(name: str) -> str:
        admin = sa.create_engine(
            postgres_dsn.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
        admin.dispose()
        return postgres_dsn.rsplit("/", 1)[0] + f"/{name}"

    return make
