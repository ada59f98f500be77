"""Libraries' own output during a run goes to the run's ``library.log``, not into the live display.

Two channels carry it. :mod:`warnings` (LangChain's deprecation notices from the response cache's SQLite lookups,
sentence-transformers') from whichever thread loads or calls a library; and Python's :mod:`logging` (transformers',
huggingface_hub's, chromadb's, psycopg's loggers). Printed to stderr either would tear the progress display apart.
While a run executes, every warning and every log record that reaches the root logger is appended to
``<run>/library.log`` (once the run's folder exists) with where it came from; a logger that prints its records
itself (a console handler of its own, :mod:`stores.library_logs`) passes them up to the root logger for the run's
time. The Ray executor's unit runners route their process's output to the same file
(:mod:`runtime.executors.ray`). transformers' "Loading weights" bar is turned off where the embedding model loads
(:func:`stores.vectors.lazy_sentence_transformer`).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from dyneval.stores.library_logs import through_root_logger

#: The file inside the run folder that receives the libraries' warnings and log records.
LIBRARY_LOG = "library.log"


class _LibraryLog(logging.Handler):
    """Appends warnings and log records to ``path`` once its folder exists; before, a record goes where Python
    would have put it without this handler (stderr for warnings and errors, when the root logger has no other)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.writing = threading.Lock()  # warnings come from every thread, not through Handler.handle's lock
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"))

    def append(self, text: str) -> bool:
        """``text`` appended to the log; False while the run's folder does not exist (a refused start, a plan)."""
        if not self.path.parent.is_dir():
            return False
        with self.writing, self.path.open("a", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.append(self.format(record)):
                return
        except Exception:  # noqa: BLE001 - logging's own convention: a handler never raises
            self.handleError(record)
            return
        alone = all(h is self for h in logging.getLogger().handlers)
        if alone and logging.lastResort is not None and record.levelno >= logging.lastResort.level:
            logging.lastResort.handle(record)


@contextmanager
def library_output_to(path: Path) -> Iterator[None]:
    """Append every warning raised and every log record the root logger receives while this is open to ``path``
    (shown as usual while its folder does not exist: a refused start or a plan removes the run folder). Loggers
    that exist now and print their records themselves pass them up for the time being; the libraries dyneval
    imports during a run are so set where it imports them (:data:`stores.library_logs.HUGGING_FACE`)."""
    log = _LibraryLog(path)
    root = logging.getLogger()
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def to_log(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            text = warnings.formatwarning(message, category, filename, lineno, line)
            if not log.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}"):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = to_log
        loggers = list(root.manager.loggerDict.items())
        put_back = through_root_logger(name for name, logger in loggers if isinstance(logger, logging.Logger))
        root.addHandler(log)
        try:
            yield
        finally:
            root.removeHandler(log)
            put_back()
