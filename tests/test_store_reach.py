"""Every store a run needs is reached before anything of the run is made (``runtime.reach``): a store out of reach
fails in one line with exit 6 within the stated bound, a malformed address in one line with exit 2, and neither
leaves a run folder (nor ``--out``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dyneval import gate
from dyneval.cli import main
from dyneval.runtime.embedded import free_port
from dyneval.runtime.reach import BOUND_S
from dyneval.stores.postgres import CONNECT_TIMEOUT_S

#: Roles on a port nothing listens on: never asked, the stores are reached first.
MODELS = ["--target", "t@http://127.0.0.1:9/v1", "--evaluator", "j@http://127.0.0.1:9/v1"]


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    """The run's modules imported before any command is timed (a user's command pays for them before the reach)."""
    from dyneval.protocols import protocol_class
    from dyneval.runtime import runner  # noqa: F401

    for name in ("interview", "llmeval", "judgeagent"):
        protocol_class(name)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel completes them) and never answers: a server that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def _run(out: Path, protocol: str, *extra: str) -> tuple[int, float]:
    started = time.perf_counter()
    code = main(["--protocol", protocol, *MODELS, "--out", str(out), "--limit", "1", *extra])
    return code, time.perf_counter() - started


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "protocol, flag, extra",
    [
        ("interview", "--postgres-dsn", ["--postgres-dsn", "postgresql://postgres@127.0.0.1:{closed}/x"]),
        ("interview", "--postgres-dsn", ["--postgres-dsn", "host=127.0.0.1 port={closed} dbname=x", "--dry-run"]),
        (
            "interview",
            "--postgres-dsn",
            ["--postgres-dsn", "postgresql://postgres@127.0.0.1:{closed}/x", "--executor", "ray"],
        ),
        ("llmeval", "--bank-db", ["--bank-db", "postgresql://postgres@127.0.0.1:{closed}/bank"]),
    ],
    ids=["checkpoints", "checkpoints-dry-run", "checkpoints-ray", "llmeval-bank"],
)
def test_a_store_that_refuses_connections_fails_in_one_line_with_exit_6_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str, flag: str, extra: list[str]
) -> None:
    """Refused at once: the 3 attempts take their waits only; Ray is not started, and a dry run needs its stores as
    a run does."""
    import ray

    closed = free_port()
    out = tmp_path / "runs"
    code, took = _run(out, protocol, *[arg.replace("{closed}", str(closed)) for arg in extra])
    assert code == gate.EXIT_INFRA == 6
    line = _one_line(capsys)
    assert line.startswith("error: ") and f"({flag}) does not answer after 3 attempts" in line, line
    assert not out.exists()
    assert took < BOUND_S  # in fact the waits, 1.5-3 s, and the command's own work
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    "protocol, flag, store",
    [
        ("interview", "--postgres-dsn", "postgresql://postgres@127.0.0.1:{port}/x"),
        ("judgeagent", "--chroma-url", "http://127.0.0.1:{port}"),
    ],
    ids=["postgresql", "chroma"],
)
def test_a_store_that_never_answers_fails_with_exit_6_within_the_stated_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], silent_port: int, protocol: str, flag: str, store: str
) -> None:
    """A server that accepts and hangs: each attempt ends at its timeout, the third one fails the command."""
    out = tmp_path / "runs"
    code, took = _run(out, protocol, flag, store.format(port=silent_port))
    assert code == gate.EXIT_INFRA
    assert f"({flag}) does not answer after 3 attempts" in _one_line(capsys)
    assert not out.exists()
    assert 3 * CONNECT_TIMEOUT_S <= took <= BOUND_S + 5  # + the command's own work on a loaded machine


@pytest.mark.parametrize(
    "protocol, flag, value, says",
    [
        ("llmeval", "--bank-db", "garbage://x", "not a garbage:// address"),
        ("interview", "--postgres-dsn", "host=127.0.0.1 dbnme=x", 'invalid connection option "dbnme"'),
        ("interview", "--postgres-dsn", "postgresql://u:secret@[::1/x", "not a PostgreSQL DSN libpq can read"),
        ("interview", "--postgres-dsn", "postgresql://u@127.0.0.1:notaport/x", "a number from 1 to 65535"),
    ],
)
def test_a_malformed_store_address_is_bad_input_in_one_line_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str, flag: str, value: str, says: str
) -> None:
    out = tmp_path / "runs"
    code, took = _run(out, protocol, flag, value)
    assert code == gate.EXIT_BAD_INPUT == 2
    line = _one_line(capsys)
    assert flag in line and says in line and "secret" not in line, line
    assert not out.exists()
    assert took < 5  # no attempt to connect


def test_a_chroma_server_is_reached_by_the_protocols_that_keep_vectors_and_by_no_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interview keeps no vectors: a Chroma server named in a shared configuration is none of its business;
    JudgeAgent's context graph is kept there, so it does not start without it."""
    chroma = f"http://127.0.0.1:{free_port()}"
    code, _ = _run(tmp_path / "interview", "interview", "--chroma-url", chroma, "--dry-run")
    assert code == gate.EXIT_OK and capsys.readouterr().err == ""
    out = tmp_path / "judgeagent"
    code, took = _run(out, "judgeagent", "--chroma-url", chroma)
    assert code == gate.EXIT_INFRA
    assert _one_line(capsys).startswith(f"error: Chroma server {chroma} (--chroma-url) does not answer after 3 ")
    assert not out.exists() and took < BOUND_S
