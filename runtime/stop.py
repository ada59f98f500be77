"""The run-wide stop flag Ctrl-C (and SIGTERM) raises: the call layer sends no new request once it is set.

The signal handler (``runtime.signals``) sets it on SIGINT and SIGTERM; :class:`runtime.llm.RoleLLM` calls
:func:`raise_if_stopped` right before each request (after waiting for a slot and
after any retry back-off), so no request starts after the signal. The flag is
per process, like the signal.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from dyneval.state.errors import InfraError

_stop = threading.Event()
_as_infra_error = contextvars.ContextVar("stop_as_infra_error", default=False)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what Docker, Kubernetes, systemd, Slurm and Ray send to stop a process): handled as Ctrl-C."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM (``terminated``) or the spent budget (``budget``: what was spent) ended the run: a partial
    summary and report are written; ``resume`` continues it."""

    def __init__(
        self, run_id: str, resume: str, unfinished: int, total: int, budget: str | None = None, terminated: bool = False
    ) -> None:
        cause = f"its budget is spent ({budget})" if budget else "terminated (SIGTERM)" if terminated else "interrupted"
        super().__init__(f"run {run_id} stopped, {cause}: {unfinished} of {total} units unfinished")
        self.run_id, self.resume, self.unfinished, self.total = run_id, resume, unfinished, total
        self.budget, self.terminated = budget, terminated


class StopRequested(BaseException):
    """Raised in place of a new LLM request after Ctrl-C.

    A ``BaseException``, like ``KeyboardInterrupt``: a node's ``except Exception``
    must not turn it into a verdict; the node's writes are simply not saved.
    """


def request_stop() -> None:
    _stop.set()


def clear() -> None:
    _stop.clear()


def stopped() -> bool:
    return _stop.is_set()


def raise_if_stopped() -> None:
    if _stop.is_set():
        if _as_infra_error.get():
            raise InfraError("the run was interrupted (Ctrl-C): no new request is sent")
        raise StopRequested("the run was interrupted: no new request is sent")


def refuse(reason: str, kind: type[StopRequested]) -> NoReturn:
    """Refuse a request: ``kind`` (a :class:`StopRequested`), or ``InfraError`` within
    :func:`refused_as_infra_error`."""
    if _as_infra_error.get():
        raise InfraError(reason)
    raise kind(reason)


@contextmanager
def refused_as_infra_error() -> Iterator[None]:
    """Within: a refused request raises ``InfraError``, which report-time code handles as a failed call.

    The partial summary after Ctrl-C uses it: a metric that needs an LLM call
    (e.g. the interview's overall summary) falls back as if the endpoint failed.
    """
    token = _as_infra_error.set(True)
    try:
        yield
    finally:
        _as_infra_error.reset(token)


def exit_now(code: int) -> None:
    """Exit without joining threads still blocked in a request (exit handlers still run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # e.g. stop the embedded llama.cpp server
    os._exit(code)
