"""Entity labels cached per chunk content hash, across runs and corpus versions (seed 000, Algorithm 3: the entities
extracted from each chunk, Table 11).

One JSONL file per extraction model (``<cache>/judgeagent/entities-<model>-<digest>.jsonl``, append-only, last
line wins): a changed corpus only sends its new chunks to the model, and a killed build labels again only what was
not kept.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from dyneval.stores.embedding_cache import text_key
from dyneval.stores.files import append_line, drop_torn_tail, read_records


class EntityCache:
    """Entity labels per chunk content hash (JSONL, append-only; last line wins)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        drop_torn_tail(path)  # a line a killed build cut would swallow the next label appended after it
        self.data: dict[str, dict[str, Any]] = {rec["h"]: rec for rec in read_records(path) if "h" in rec}

    def get(self, text: str) -> dict[str, Any] | None:
        return self.data.get(text_key(text))

    def put(self, text: str, entities: list[str], source: str) -> None:
        key = text_key(text)
        rec: dict[str, Any] = {"h": key, "entities": entities, "source": source}
        with self._lock:
            self.data[key] = rec
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_line(self.path, rec)
