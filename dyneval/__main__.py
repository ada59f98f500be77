"""``dyneval ...`` and ``python -m dyneval ...``: the command line (:mod:`dyneval.cli`) with a command's process
policies, which a host application importing dyneval does not get."""

from __future__ import annotations

import gc
import signal
import sys
import threading


def first_status(argv: list[str]) -> str | None:
    """The line a run prints before anything is imported: its libraries and first model take seconds before the
    run's own first line. ``None`` for help (printed at once) and for commands without ``--protocol``."""
    if "-h" in argv or "--help" in argv:
        return None
    protocol = next((a.split("=", 1)[1] for a in argv if a.startswith("--protocol=")), None)
    if protocol is None and "--protocol" in argv[:-1]:
        protocol = argv[argv.index("--protocol") + 1]
    if not protocol or protocol.startswith("-"):
        return None
    return f"dyneval {protocol}: loading the libraries (LangChain, LangGraph)..."


def run() -> None:
    """Run the command line on ``sys.argv`` and exit with its code.

    Ctrl-C and SIGTERM are handled from the first line on (:func:`dyneval.runtime.signals.on_stop_signal`: never
    inside an import, so a C extension's initialisation is not cut), and a signal that stops the command before
    :func:`dyneval.cli.main` took over exits 130 or 143 with one line, as one that stops a run does."""
    waiting = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # until handled: held
    if status := first_status(sys.argv[1:]):
        print(status, flush=True)
    from dyneval.runtime.signals import ignore_signals, on_stop_signal, stopped_line
    from dyneval.runtime.stop import Terminated, exit_now

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_stop_signal)
    stopped_by: KeyboardInterrupt | None = None
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, waiting)  # a signal held meanwhile is handled here
        # The collector's youngest generation is collected every 20000 allocations, not 700: importing LangChain,
        # LangGraph and the OpenAI types makes ~400 collections (0.2 s of a 1.4 s start-up), and a unit's call
        # makes thousands of short-lived objects (dyneval.runtime.runner freezes the start-up heap while units run).
        gc.set_threshold(20000, 20, 20)
        from dyneval.cli import main

        code = main()
    except KeyboardInterrupt as exc:  # before main() took over: nothing was started
        ignore_signals()
        print(stopped_line(exc, None), flush=True)
        stopped_by = exc
    ignore_signals()  # the command has ended: its exit code stands
    from dyneval.gate import EXIT_BUDGET, EXIT_INTERRUPTED, EXIT_TERMINATED  # loaded with the command line already

    if stopped_by is not None:
        code = EXIT_TERMINATED if isinstance(stopped_by, Terminated) else EXIT_INTERRUPTED
    gc.freeze()  # exit without the final collections' walk over every library object (1-2 s of a run's end)
    # Only the command exits past its threads: main() returns to an in-process caller (a test, a notebook), whose
    # idle thread pools are no request in flight. A stopped run exits past daemon threads too: the interpreter's
    # finalization tears modules down under a unit thread still in a request, which crashed a stopped run with
    # SIGSEGV once in ~240 (after its report was written). Nothing is lost: the run's logs are written with
    # unbuffered os.write (dyneval.stores.files.append_text) and its databases commit as they go.
    if code in (EXIT_BUDGET, EXIT_INTERRUPTED, EXIT_TERMINATED) and any(
        t.is_alive() for t in threading.enumerate() if t is not threading.main_thread()
    ):
        exit_now(code)  # stopped: a thread still in an import or a request must not hold the exit up
    sys.exit(code)


if __name__ == "__main__":
    run()
