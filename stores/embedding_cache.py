"""Embedding vectors cached by text content, across runs and corpus versions.

One SQLite file per embedding model (``<cache>/embeddings-<model>.sqlite``): ``sha256(text) -> float32 vector``.
A knowledge base that gained or changed a few documents gets a new context graph (its key hashes the corpus),
but only the texts that were never embedded with that model are embedded again.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def embedder_label(embed: Any) -> str:
    """A stable name of an embedding function: its configuration (model, normalisation ...) when it has one,
    else its ``label`` or class name."""
    get_config = getattr(embed, "get_config", None)
    try:
        config = get_config() if callable(get_config) else None
    except Exception:  # noqa: BLE001 - a legacy function without a config: fall back to the class
        config = None
    if isinstance(config, dict) and config:
        return json.dumps(config, sort_keys=True, default=str)
    return str(getattr(embed, "label", None) or type(embed).__qualname__)


class EmbeddingCache:
    """``text -> vector`` for one embedding model, safe to share between threads."""

    def __init__(self, folder: Path, model: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-")[-60:] or "model"
        digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:8]
        self.path = folder / f"embeddings-{slug}-{digest}.sqlite"
        self._lock = threading.Lock()
        # two builds (threads or processes) may share the file: wait for the other's write instead of failing
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=120)
        for pause in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):  # SQLite does not wait on a lock for this pragma
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                if pause is None:
                    raise
                time.sleep(pause)
        self._db.execute("PRAGMA synchronous=NORMAL")  # a vector lost in a crash is only embedded again
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i:i + 500])
                rows = self._db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                                        part).fetchall()
                found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        rows = [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one transaction per batch, not one per row
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.execute("COMMIT")

    def embed(self, texts: Sequence[str], embed: Callable[[list[str]], Any]) -> list[np.ndarray]:
        """Vectors of ``texts`` in order: cached ones looked up, the rest embedded in one batch call and kept."""
        keys = [text_key(t) for t in texts]
        known = self.get_many(list(dict.fromkeys(keys)))
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in known))
        if missing:
            fresh = {text_key(t): np.asarray(v, dtype=np.float32) for t, v in zip(missing, embed(missing))}
            self.put_many(fresh)
            known.update(fresh)
        return [known[k] for k in keys]
