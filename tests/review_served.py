"""The review page served in a thread for a test, on 127.0.0.1 at a free port, as ``dyneval --review`` serves it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from rich.console import Console

from dyneval.results.review.command import bind, prepare
from dyneval.results.review.server import Review, create_app


def review_of(run_dir: Path, *options: str) -> Review:
    """The review ``dyneval --review RUN_DIR OPTIONS`` prepares (its console discarded)."""
    review, _ = prepare(str(run_dir), str(run_dir.parent), list(options), Console(file=None, quiet=True))
    return review


@contextlib.contextmanager
def served(review: Review) -> Iterator[str]:
    """The page's address while ``review`` is served (stopped, and its thread joined, on exit)."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(review), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
