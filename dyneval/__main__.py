"""``dyneval ...`` and ``python -m dyneval ...``: the command line (:mod:`dyneval.cli`) with a command's process
policies, which a host application importing dyneval does not get."""

from __future__ import annotations

import gc
import signal
import sys


def run() -> None:
    """Run the command line on ``sys.argv`` and exit with its code."""
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
