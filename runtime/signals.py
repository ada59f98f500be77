"""Ctrl-C and SIGTERM: one handler raises the stop flag (``runtime.stop``) at once and interrupts the main thread,
never inside an import; a second signal does not cut the bounded shutdown short."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from dyneval.runtime import stop

#: The signals that stop a run, and what their handler raises: Ctrl-C, and SIGTERM (Docker, Kubernetes, systemd,
#: Slurm and Ray stop a process with it), which stops the run the same way and exits 143 instead of 130.
STOPPING: dict[int, type[KeyboardInterrupt]] = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: stop.Terminated}
#: Seconds after which a signal that arrived during an import is delivered again (until no import is running).
REDELIVER_S = 0.02
#: The last signal :func:`on_stop_signal` handled.
_received: list[int] = []


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (a module's top-level code, a C extension's initialisation): an
    exception raised there fails the import itself, and a C extension's half-run init says only "initialization
    failed"."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib."):
            return True
        frame = frame.f_back
    return False


def on_stop_signal(signum: int, frame: FrameType | None) -> None:
    """Raise the stop flag (no new model request starts), then interrupt the main thread where it is:
    ``KeyboardInterrupt``, or :class:`stop.Terminated` for SIGTERM. Inside an import the signal is only recorded
    and sent to the main thread again :data:`REDELIVER_S` later, until the import has ended."""
    stop.request_stop()
    _received[:] = [signum]
    if importing(frame):
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(REDELIVER_S, signal.pthread_kill, (main, signum))
        timer.daemon = True  # never holds the exit up
        timer.start()
        return
    raise STOPPING[signum]()


def stopped_line(exc: KeyboardInterrupt, resume: str | None) -> str:
    """What a command a stop signal ended says: the signal, and the command that resumes its run (``None`` before
    the run has a folder)."""
    said = "terminated (SIGTERM)" if isinstance(exc, stop.Terminated) else "interrupted"
    return f"{said}; resume with: {resume}" if resume else f"{said} before the run started"


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM handled by :func:`on_stop_signal` within (the ``dyneval`` command's handler throughout).

    So every thread's next request is refused at once, even while the main thread still waits for a pool to wind
    down (e.g. calls of ``prepare()`` run through ``parallel_map``). A signal the process ignores stays ignored,
    and a SIGTERM handler of someone else's (a host application, a server embedding the graphs) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    ours = [
        sig
        for sig in STOPPING
        if signal.getsignal(sig) is not signal.SIG_IGN
        and (sig == signal.SIGINT or signal.getsignal(sig) in (signal.SIG_DFL, on_stop_signal))
    ]
    previous = {sig: signal.signal(sig, on_stop_signal) for sig in ours}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def raised_as_received() -> Iterator[None]:
    """Within: a ``KeyboardInterrupt`` a library raised in place of what the signal handler raised (Ray's
    ``ray.get`` and ``ray.wait`` do, for any signal) is the handler's own again: SIGTERM stays SIGTERM."""
    try:
        yield
    except KeyboardInterrupt as exc:
        raised = STOPPING.get(_received[0]) if _received else None
        if raised is not None and not isinstance(exc, raised):
            raise raised() from None
        raise


def ignore_signals() -> dict[int, Any]:
    """Ctrl-C and SIGTERM ignored from now on (the main thread only); the handlers they had."""
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPPING}


@contextmanager
def signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM does not cut the bounded shutdown (partial report) short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = ignore_signals()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
