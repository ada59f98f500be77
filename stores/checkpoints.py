"""Checkpointers: SQLite in the run directory by default, PostgreSQL when a DSN is given."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from langgraph.checkpoint.base import BaseCheckpointSaver


@contextmanager
def open_checkpointer(run_dir: Path, postgres_dsn: str | None = None) -> Iterator[BaseCheckpointSaver]:
    """Yield a ready checkpointer; closes its connection on exit."""
    if postgres_dsn:
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:  # optional extra
            raise ImportError("PostgreSQL checkpoints need: pip install -e '.[postgres]'") from exc
        with PostgresSaver.from_conn_string(postgres_dsn) as saver:
            saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()
