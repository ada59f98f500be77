"""Every store a run needs, reached before anything of the run is made: its PostgreSQL checkpoints
(``--postgres-dsn``), the databases its protocol opens (llmeval's ``--bank-db``) and its Chroma server
(``--chroma-url``, for the protocols that keep vectors).

A malformed address (an unknown scheme, a DSN libpq cannot read, a port that is not one) is :class:`InputError`
(exit 2), as is a server that answers but refuses the connection (a password missing or wrong, no such database
or user): one line naming the flag or the file it came from, and for a password what to set. A server that does
not answer is tried 3 times, 0.5-1 s and 1-2 s apart, each attempt waiting at most
:data:`stores.postgres.CONNECT_TIMEOUT_S` (5 s): after at most 18 s it is :class:`InfraError` (exit 6), one line.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from dyneval.runtime.protocol import Protocol, Run
from dyneval.state.errors import InfraError, InputError, RetryPolicy, one_line
from dyneval.stores.postgres import CONNECT_TIMEOUT_S, is_disconnect, server_of

#: 3 attempts, 0.5-1 s and 1-2 s apart.
START = RetryPolicy(max_retries=2, base_delay_s=1.0, max_delay_s=2.0)
#: Seconds the reach of one store takes at most: its attempts at their timeout, and the longest waits between them.
BOUND_S = (START.max_retries + 1) * CONNECT_TIMEOUT_S + sum(
    min(START.max_delay_s, START.base_delay_s * 2**k) for k in range(START.max_retries)
)

#: Words of libpq's and the server's messages that say the server answered and refused us: bad input, not a fault.
_REFUSALS = ("password", "authentication", "pg_hba.conf", "does not exist", "permission denied")


def reach_stores(protocol: Protocol, run: Run) -> None:
    """Reach every store ``run`` needs, or raise (see the module's docstring)."""
    stores = run.config.stores
    if stores.postgres_dsn:
        reach_postgres("--postgres-dsn", stores.postgres_dsn)
    for flag, location in protocol.databases(run).items():
        from dyneval.stores.bank_location import bank_server  # SQLAlchemy: loaded by a run that opens a database

        try:
            server = bank_server(location)
        except InputError as exc:
            raise InputError(exc.message, field=flag) from None
        if server:
            reach_postgres(flag, server)
    if stores.chroma_url and protocol.uses_chroma:
        reach_chroma(stores.chroma_url)


def reach_postgres(flag: str, dsn: str) -> None:
    """Connect to the PostgreSQL server of ``dsn`` (given by ``flag``) once, or raise."""
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise InputError("a PostgreSQL store needs psycopg: pip install 'dyneval[postgres]'", field=flag) from None
    try:
        ports = str(conninfo_to_dict(dsn).get("port") or "")
    except psycopg.ProgrammingError as exc:  # its message may quote the DSN, password and all, unless it names a key
        said = str(exc).strip() if "invalid connection option" in str(exc) else "a missing '=', quote or bracket"
        raise InputError(
            f"not a PostgreSQL DSN libpq can read ({said}): use postgresql://USER@HOST:PORT/DB or "
            "'host=HOST dbname=DB'",
            field=flag,
        ) from None
    if any(not (port.isdigit() and 0 < int(port) < 65536) for port in ports.split(",") if port):
        raise InputError(f"the port of a PostgreSQL DSN is a number from 1 to 65535, not {ports!r}", field=flag)
    server = server_of(dsn)

    def give_up(attempts: int, exc: Exception) -> InfraError:
        return InfraError(f"PostgreSQL {server} ({flag}) does not answer after {attempts} attempts: {_libpq_said(exc)}")

    try:
        START.call(
            lambda _: psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close(),
            retry_on=lambda exc: is_disconnect(exc) and not _refused(exc),
            give_up=give_up,
        )
    except psycopg.OperationalError as exc:  # not retried: the server refused us
        said = _libpq_said(exc)
        hint = (
            (
                "; give the password in PGPASSWORD, in a password file (~/.pgpass, or the file PGPASSFILE names) "
                f"or in {flag} given again: dyneval never writes it to the run folder"
            )
            if "password" in said
            else ""
        )
        raise InputError(f"PostgreSQL {server} refused the connection: {said}{hint}", field=flag) from None


def reach_chroma(url: str) -> None:
    """Ask the Chroma server at ``url`` for its heartbeat once, or raise."""
    import httpx

    from dyneval.stores.vectors import is_server_fault

    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname or "127.0.0.1"
    where = f"{parts.scheme}://{host}:{parts.port or 8000}"  # as stores.vectors.chroma_client connects

    def give_up(attempts: int, exc: Exception) -> InfraError:
        return InfraError(
            f"Chroma server {where} (--chroma-url) does not answer after {attempts} attempts: {one_line(exc)}"
        )

    try:
        START.call(
            lambda _: httpx.get(f"{where}/api/v2/heartbeat", timeout=CONNECT_TIMEOUT_S).raise_for_status(),
            retry_on=is_server_fault,
            give_up=give_up,
        )
    except httpx.HTTPStatusError as exc:  # an answer that no retry changes (e.g. 404: not a Chroma server)
        raise InputError(
            f"{where} is not a Chroma server this client can use: GET /api/v2/heartbeat answered "
            f"{exc.response.status_code}",
            field="--chroma-url",
        ) from None


def _refused(exc: BaseException) -> bool:
    return any(word in str(exc) for word in _REFUSALS)


def _libpq_said(exc: BaseException) -> str:
    """What libpq or the server said, without psycopg's ``connection to server at ... failed:`` preamble."""
    said = " ".join(str(exc).split()).rsplit("failed: ", 1)[-1]
    return said.removeprefix("FATAL: ").strip()
