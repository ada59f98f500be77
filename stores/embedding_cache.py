"""Embedding vectors cached by text content, across runs and corpus versions.

One SQLite file per embedding model (``<cache>/embeddings-<model>.sqlite``): ``sha256(text) -> float32 vector``.
A knowledge base that gained or changed a few documents gets a new context graph (its key hashes the corpus),
but only the texts that were never embedded with that model are embedded again.

The cache is the caller's: where the embedding itself runs elsewhere (a context-graph build on a Ray cluster's
workers, :meth:`EmbeddingCache.embed_batches` with an ``embed_map``), only the vectors travel back and are kept here.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: ``embed_map(parts) -> (index, vectors)`` for every part (a list of texts), in any order: the vectors of each
#: part's texts, one row per text, computed wherever the caller's workers are.
EmbedMap = Callable[[list[list[str]]], Iterator[tuple[int, Any]]]


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
                part = list(keys[i : i + 500])
                rows = self._db.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                ).fetchall()
                found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        rows = [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one transaction per batch, not one per row
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.execute("COMMIT")

    def stored(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` have a vector (their vectors not read)."""
        found: set[str] = set()
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i : i + 500])
                found.update(
                    k
                    for (k,) in self._db.execute(
                        f"SELECT key FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                    )
                )
        return found

    def to_embed(self, batches: Sequence[Sequence[str]]) -> list[list[str]]:
        """Per batch, the texts :meth:`embed` would send if the batches were embedded one after the other: those
        neither cached nor in an earlier batch, each once."""
        seen = self.stored(list(dict.fromkeys(text_key(t) for batch in batches for t in batch)))
        parts = []
        for batch in batches:
            part = []
            for text in batch:
                if (key := text_key(text)) not in seen:
                    seen.add(key)
                    part.append(text)
            parts.append(part)
        return parts

    def keep(self, texts: Sequence[str], vectors: Any) -> None:
        """Store the vectors of ``texts`` (one row each, in order)."""
        self.put_many({text_key(t): np.asarray(v, dtype=np.float32) for t, v in zip(texts, vectors)})

    def _vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        keys = [text_key(t) for t in texts]
        known = self.get_many(list(dict.fromkeys(keys)))
        return [known[k] for k in keys]

    def embed(self, texts: Sequence[str], embed: Callable[[list[str]], Any]) -> list[np.ndarray]:
        """Vectors of ``texts`` in order: cached ones looked up, the rest embedded in one batch call and kept."""
        [missing] = self.to_embed([texts])
        if missing:
            self.keep(missing, embed(missing))
        return self._vectors(texts)

    def embed_batches(
        self, batches: Iterable[Sequence[str]], embed: Callable[[list[str]], Any], embed_map: EmbedMap | None = None
    ) -> Generator[tuple[Sequence[str], list[np.ndarray]], None, None]:
        """``(texts, vectors)`` of each batch in turn, each embedding call the same as :meth:`embed` on the batches
        one after the other makes. Without ``embed_map`` a batch is embedded when it is asked for; with it, every
        batch's texts to embed go out at once (one part per batch), each part's vectors are kept here as it
        comes back, in whatever order, and a batch is given once all of its vectors are kept."""
        if embed_map is None:
            for texts in batches:
                yield texts, self.embed(texts, embed)
            return
        batches = list(batches)
        parts = self.to_embed(batches)
        sent = [k for k, part in enumerate(parts) if part]
        waiting = set(sent)
        results = embed_map([parts[k] for k in sent])
        try:
            for k, texts in enumerate(batches):
                while waiting and min(waiting) <= k:  # an earlier batch may hold this one's texts
                    i, vectors = next(results)
                    self.keep(parts[sent[i]], vectors)
                    waiting.discard(sent[i])
                yield texts, self._vectors(texts)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()  # a consumer that stopped early: the parts still out are given up
