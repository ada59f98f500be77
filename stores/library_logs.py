"""Libraries that print their log records themselves, outside Python's logging tree.

Hugging Face's libraries (transformers, huggingface_hub, datasets) give their top logger a console handler of its
own when they are imported and stop its records from going up to the root logger: whatever an application does
with the root logger, their warnings land on the console (in the middle of a run's live display).
:func:`through_root_logger` does what their documentation proposes for an application that handles logs itself
(``transformers.utils.logging.disable_default_handler`` with ``enable_propagation``) for any logger: its console
handlers off, its records up to the root logger, where a run's handler takes them (the run's ``library.log``,
:mod:`runtime.library_output`) and, with no handler there, Python shows warnings and errors on stderr as before.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable

#: The loggers of the libraries dyneval imports that print their records themselves.
HUGGING_FACE = ("transformers", "huggingface_hub", "datasets")


def _console(handler: logging.Handler) -> bool:
    """A handler that writes to the process's stderr or stdout (a library's default ``StreamHandler()``)."""
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and any(handler.stream is c for c in consoles)
    )


def through_root_logger(names: Iterable[str]) -> Callable[[], None]:
    """Take the console handlers off the loggers ``names`` and let their records go up to the root logger (also
    for a logger that has no handler and does not pass its records up, whose records Python would print itself);
    the function returned puts back what this changed."""
    changed: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for name in names:
        logger = logging.getLogger(name)
        taken = [h for h in logger.handlers if _console(h)]
        if not taken and (logger.propagate or logger.handlers):
            continue
        for handler in taken:
            logger.removeHandler(handler)
        changed.append((logger, taken, logger.propagate))
        logger.propagate = True

    def undo() -> None:
        for logger, taken, propagate in changed:
            logger.propagate = propagate
            for handler in taken:
                logger.addHandler(handler)

    return undo
