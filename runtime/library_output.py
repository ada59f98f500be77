"""Libraries' own output during a run goes to the run's ``library.log``, not into the live display.

LangChain's deprecation notices (the response cache's SQLite lookups), transformers' and sentence-transformers'
warnings arrive through :mod:`warnings` from whichever thread loads or calls them; printed to stderr they tear the
progress display apart. While a run executes, every warning is appended to ``<run>/library.log`` (once the run's
folder exists) with where it was raised. (transformers' "Loading weights" bar is turned off where the embedding
model loads, :func:`stores.vectors.lazy_sentence_transformer`.)
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

#: The file inside the run folder that receives the libraries' warnings.
LIBRARY_LOG = "library.log"


@contextmanager
def library_output_to(path: Path) -> Iterator[None]:
    """Append every warning raised while this is open to ``path`` (shown as usual while its folder does not exist:
    a refused start or a plan removes the run folder)."""
    lock = threading.Lock()
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
            if not path.parent.is_dir():
                shown(message, category, filename, lineno, file, line)
                return
            text = warnings.formatwarning(message, category, filename, lineno, line)
            with lock, path.open("a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}")

        warnings.showwarning = to_log
        yield
