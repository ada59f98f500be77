"""A run against a PostgreSQL server that asks for a password: the password is never written to the run folder,
and the resume command the run printed works with the password from libpq's environment (``PGPASSWORD``), its
password file (``PGPASSFILE``) or the DSN given again; without any, one line says what to set (exit 2)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from dyneval import gate
from dyneval.cli import main
from tests.pg_server import PgServer
from tests.standin_endpoint import StandIn

PASSWORD = "pw-only-this-test-knows"


@pytest.fixture(scope="module")
def locked() -> Iterator[PgServer]:
    server = PgServer(password=PASSWORD)
    yield server
    server.close()


@pytest.fixture
def no_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither the test's environment nor a password file of the machine's user gives one."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-file"))


def _stopped_run(locked: PgServer, out: Path, standin: StandIn, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """A run with the password in its DSN, stopped by its call budget; the resume command it printed."""
    code = main(
        [
            "--protocol",
            "interview",
            "--target",
            standin.spec("t"),
            "--evaluator",
            standin.spec("j"),
            "--limit",
            "3",
            "--max-questions",
            "1",
            "--concurrency",
            "1",
            "--max-calls",
            "4",
            "--out",
            str(out),
            "--postgres-dsn",
            locked.dsn(password=PASSWORD),
        ]
    )
    assert code == gate.EXIT_BUDGET
    said = [x for x in capsys.readouterr().out.splitlines() if "resume" in x and " with: " in x]
    command = shlex.split(said[-1].split(" with: ", 1)[1])  # the line printed as it stopped
    assert command[0] == "dyneval" and "--postgres-dsn" not in command
    return command[1:]


def _holding(out: Path, text: str) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.parametrize("given", ["PGPASSWORD", "PGPASSFILE", "--postgres-dsn"])
def test_a_resume_against_a_password_protected_server_works_from_the_printed_command(
    locked: PgServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_password: None,
    given: str,
) -> None:
    out = tmp_path / "runs"
    with StandIn() as standin:
        resume = _stopped_run(locked, out, standin, capsys)
        assert _holding(out, PASSWORD) == []
        more = ["--max-calls", "100"]  # "resume with a higher --max-calls", as the stopped run said
        if given == "PGPASSWORD":
            monkeypatch.setenv("PGPASSWORD", PASSWORD)
        elif given == "PGPASSFILE":
            secrets = tmp_path / "pgpass"
            secrets.write_text(f"127.0.0.1:{locked.port}:*:postgres:{PASSWORD}\n", encoding="utf-8")
            secrets.chmod(0o600)  # libpq ignores a password file others can read
            monkeypatch.setenv("PGPASSFILE", str(secrets))
        else:
            more += ["--postgres-dsn", locked.dsn(password=PASSWORD)]
        assert main([*resume, *more]) == gate.EXIT_OK
    assert _holding(out, PASSWORD) == []


def test_a_resume_with_no_password_to_be_had_says_what_to_set_in_one_line_and_exits_2(
    locked: PgServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_password: None
) -> None:
    out = tmp_path / "runs"
    with StandIn() as standin:
        resume = _stopped_run(locked, out, standin, capsys)
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
        assert main([*resume, "--max-calls", "100"]) == gate.EXIT_BAD_INPUT
        assert len(standin.requests) == 4  # the stopped run's, none since
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    [line] = [x for x in captured.err.splitlines() if x.strip()]
    assert "config.json" in line and "no password supplied" in line, line
    assert "PGPASSWORD" in line and "PGPASSFILE" in line and "--postgres-dsn" in line
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
