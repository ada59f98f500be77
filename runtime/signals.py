"""Ctrl-C and SIGTERM while a run works: raise the stop flag (``runtime.stop``) in the handler itself, and keep a
second signal from cutting the bounded shutdown short."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from dyneval.runtime import stop

#: The signals that stop a run, and what their handler raises: Ctrl-C, and SIGTERM (Docker, Kubernetes, systemd,
#: Slurm and Ray stop a process with it), which stops the run the same way and exits 143 instead of 130.
STOPPING = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: stop.Terminated}
#: The last signal :func:`stop_on_signals` handled.
_received: list[int] = []


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise the stop flag in the signal handler itself, then interrupt as usual.

    So every thread's next request is refused at once, even while the main thread still waits for a pool to wind
    down (e.g. calls of ``prepare()`` run through ``parallel_map``). A signal the process ignores stays ignored,
    and a SIGTERM handler of someone else's (a host application, a server embedding the graphs) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    ours = {sig: raised for sig, raised in STOPPING.items() if signal.getsignal(sig) is not signal.SIG_IGN and
            (sig == signal.SIGINT or signal.getsignal(sig) in (signal.SIG_DFL, stop.on_sigterm))}

    def on_signal(signum: int, frame: Any) -> None:
        stop.request_stop()
        _received[:] = [signum]
        raise ours[signum]

    previous = {sig: signal.signal(sig, on_signal) for sig in ours}
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


@contextmanager
def signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM does not cut the bounded shutdown (partial report) short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
