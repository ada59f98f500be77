"""A throw-away PostgreSQL server on 127.0.0.1 for tests: the session's (``postgres_dsn`` in ``conftest.py``) and
the ones a test stops, restarts or protects with a password."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def _binary(name: str) -> str | None:
    """On PATH, else where Debian's postgresql package puts it (not on PATH): .ci/run installs that package."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    return shutil.which(name) or next((str(d / name) for d in debian if (d / name).exists()), None)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class PgServer:
    """``initdb`` and ``pg_ctl start`` on a free loopback port (skips the test when the binaries are absent);
    ``password``: the superuser ``postgres`` needs it (SCRAM), else every local connection is trusted."""

    def __init__(self, password: str | None = None) -> None:
        from dyneval.runtime.embedded import free_port

        initdb, self.pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if not (initdb and self.pg_ctl):
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.folder = Path(tempfile.mkdtemp(prefix="dyneval-pg-"))  # pytest's tmp tree is closed to other users
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            user = "postgres" if shutil.which("runuser") and _user_exists("postgres") else "nobody"
            self.as_user = ["runuser", "-u", user, "--"]
            shutil.chown(self.folder, user=user)
        self.port = free_port()
        self.data = self.folder / "data"
        auth = ["-A", "trust"]
        if password is not None:
            secret = self.folder / "password"
            secret.write_text(password + "\n", encoding="utf-8")
            if self.as_user:
                shutil.chown(secret, user=self.as_user[2])
            auth = ["-A", "scram-sha-256", f"--pwfile={secret}"]
        subprocess.run(
            [*self.as_user, initdb, "-D", str(self.data), *auth, "-U", "postgres"], check=True, capture_output=True
        )
        self.start()

    def dsn(self, database: str = "postgres", password: str | None = None) -> str:
        user = "postgres" if password is None else f"postgres:{password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *action: str) -> None:
        subprocess.run(
            [
                *self.as_user,
                str(self.pg_ctl),
                "-D",
                str(self.data),
                "-w",
                "-l",
                str(self.folder / "log"),
                "-o",
                f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1",
                *action,
            ],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: every connection is ended, and the server is down when this returns."""
        self._ctl("-m", "fast", "stop")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is ended, and the server is back when this returns."""
        self._ctl("-m", "fast", "restart")

    def close(self) -> None:
        """Stop the server (if it runs) and remove its files."""
        subprocess.run(
            [*self.as_user, str(self.pg_ctl), "-D", str(self.data), "-m", "fast", "stop"], capture_output=True
        )
        shutil.rmtree(self.folder, ignore_errors=True)
