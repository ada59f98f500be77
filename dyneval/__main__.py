"""``dyneval ...`` and ``python -m dyneval ...``: the command line (:mod:`dyneval.cli`) with a command's process
policies, which a host application importing dyneval does not get."""

from __future__ import annotations

import gc
import signal
import sys


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
    """Run the command line on ``sys.argv`` and exit with its code."""
    if status := first_status(sys.argv[1:]):
        print(status, flush=True)
    # The collector's youngest generation is collected every 20000 allocations, not 700: importing LangChain,
    # LangGraph and the OpenAI types makes ~400 collections (0.2 s of a 1.4 s start-up), and a unit's call makes
    # thousands of short-lived objects (dyneval.runtime.runner freezes the start-up heap while units run).
    gc.set_threshold(20000, 20, 20)
    from dyneval.runtime.stop import on_sigterm

    signal.signal(signal.SIGTERM, on_sigterm)  # SIGTERM stops a run as Ctrl-C does, with its partial report
    from dyneval.cli import main

    code = main()
    gc.freeze()  # exit without the final collections' walk over every library object (1-2 s of a run's end)
    sys.exit(code)


if __name__ == "__main__":
    run()
