"""The context graph's store: entity <-> chunk <-> document incidence in SQLite (seed 000, Appendix C, Algorithm 3).

Algorithm 3 gives node ``N[e] = (e, C, D)`` (the chunks and documents mentioning ``e``) and the neighbourhood
``E[e]``: the entities of the same chunk (line 16, ``S_e``) and of the same document (lines 18-22, ``P_e``).
As every chunk lies in one document, ``E[e]`` is simply every entity mentioned in a document that mentions ``e``,
``e`` itself excepted. So the store keeps the *mentions* (entity, chunk, document), never the clique edges, whose
number grows with the square of the entities per document.

Tables: ``document``, ``chunk`` (with its text), ``entity`` (key, first-seen name and label source, as
Algorithm 3's first sight creates the node) and ``mention``. Row ids are dense and 0-based, in the order things
were first added, so they index the vector matrices (:mod:`stores.vector_rows`). A document is added in one
transaction with its chunks and mentions: a killed build leaves whole documents only and resumes with the next.

:meth:`Incidence.read` loads the mentions once into compressed sparse rows (:class:`Mentions`):
entity -> chunks, entity -> documents, document -> entities; ``E[e]`` is then one boolean mask over the entities.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS document (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
                                     hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunk (id INTEGER PRIMARY KEY, name TEXT NOT NULL, doc INTEGER NOT NULL,
                                  text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entity (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, name TEXT NOT NULL,
                                   source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mention (entity INTEGER NOT NULL, chunk INTEGER NOT NULL, doc INTEGER NOT NULL,
                                    PRIMARY KEY (entity, chunk)) WITHOUT ROWID;
"""

#: ``(entities, source)`` of one chunk, as the extractor labelled it (Table 11).
ChunkLabels = tuple[Sequence[str], str]


def entity_key(name: str) -> str:
    """Normalised node key of an entity name (case, spacing and surrounding punctuation ignored)."""
    key = re.sub(r"\s+", " ", name).strip(" .,;:'\"()[]").lower()
    return re.sub(r"^(?:the|a|an) ", "", key)


def document_hash(name: str, title: str, chunks: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps([name, title, list(chunks)], ensure_ascii=False).encode()).hexdigest()


def _csr(rows: np.ndarray, cols: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of pairs already sorted by row."""
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return indptr, cols.astype(np.int32)


@dataclass
class Mentions:
    """The mentions as compressed sparse rows: entity -> chunks (ascending), entity -> documents,
    document -> entities. Memory is proportional to the mentions, not to the neighbourhoods."""

    n_entities: int
    entity_chunks: tuple[np.ndarray, np.ndarray]
    entity_docs: tuple[np.ndarray, np.ndarray]
    doc_entities: tuple[np.ndarray, np.ndarray]

    @staticmethod
    def _row(csr: tuple[np.ndarray, np.ndarray], i: int) -> np.ndarray:
        indptr, indices = csr
        return indices[indptr[i] : indptr[i + 1]]

    def chunks_of(self, entity: int) -> np.ndarray:
        return self._row(self.entity_chunks, entity)

    def docs_of(self, entity: int) -> np.ndarray:
        return self._row(self.entity_docs, entity)

    def entities_of_doc(self, doc: int) -> np.ndarray:
        return self._row(self.doc_entities, doc)

    def neighbour_mask(self, entity: int) -> np.ndarray:
        """Algorithm 3's ``E[e]`` as a boolean mask over the entities: every entity of a document of ``e``
        (which covers the entities of its chunks, line 16), ``e`` excepted."""
        mask = np.zeros(self.n_entities, dtype=bool)
        for doc in self.docs_of(entity):
            mask[self.entities_of_doc(int(doc))] = True
        mask[entity] = False
        return mask

    def share_a_chunk(self, a: int, b: int) -> bool:
        return bool(np.intersect1d(self.chunks_of(a), self.chunks_of(b), assume_unique=True).size)


class Incidence:
    """The SQLite incidence store of one context graph (a file, or memory when ``path`` is ``None``).

    Safe to share between threads (one connection behind a lock). Writing keeps the entity keys in memory
    (one dict, proportional to the entities); reading never does (:meth:`read`).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            ":memory:" if path is None else path, check_same_thread=False, isolation_level=None, timeout=120
        )
        if path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._keys: dict[str, int] | None = None  # entity key -> id, loaded by the first write

    # -- meta ----------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return row[0][0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- writing (Algorithm 3, lines 4-23) ----------------------------------------------------
    def document_hashes(self) -> list[str]:
        """The stored documents' content hashes, in the order they were added."""
        return [h for (h,) in self._query("SELECT hash FROM document ORDER BY id")]

    def document_names(self) -> set[str]:
        return {n for (n,) in self._query("SELECT name FROM document")}

    def add_document(self, name: str, title: str, chunks: Sequence[str], labels: Sequence[ChunkLabels]) -> None:
        """One document with its chunks (named ``name#i``) and their entities, in one transaction.

        A new entity key becomes a node with the name and source it is first seen with (line 10-12); every
        ``(entity, chunk)`` is a mention (lines 14-15). An entity whose key is empty is dropped.
        """
        with self._lock:
            if self._keys is None:
                self._keys = {k: i for i, k in self._db.execute("SELECT id, key FROM entity")}
            keys = self._keys
            new_keys: list[str] = []
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                doc = db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM document").fetchone()[0]
                db.execute(
                    "INSERT INTO document VALUES (?, ?, ?, ?)", (doc, name, title, document_hash(name, title, chunks))
                )
                first = db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM chunk").fetchone()[0]
                db.executemany(
                    "INSERT INTO chunk VALUES (?, ?, ?, ?)",
                    [(first + i, f"{name}#{i}", doc, text) for i, text in enumerate(chunks)],
                )
                mentions = []
                for i, (names, source) in enumerate(labels):
                    for entity in names:
                        k = entity_key(entity)
                        if not k:
                            continue
                        if k not in keys:
                            keys[k] = len(keys)
                            new_keys.append(k)
                            db.execute("INSERT INTO entity VALUES (?, ?, ?, ?)", (keys[k], k, entity.strip(), source))
                        mentions.append((keys[k], first + i, doc))
                db.executemany("INSERT OR IGNORE INTO mention VALUES (?, ?, ?)", mentions)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                for k in new_keys:
                    del keys[k]
                raise

    # -- reading -------------------------------------------------------------------------------
    def _query(self, sql: str, args: Iterable[object] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    def count(self, table: str) -> int:
        assert table in ("document", "chunk", "entity", "mention")
        return self._query(f"SELECT COUNT(*) FROM {table}")[0][0]

    def documents(self) -> list[tuple[str, str]]:
        """``(name, title)`` of every document, by id."""
        return self._query("SELECT name, title FROM document ORDER BY id")

    def chunk_index(self) -> tuple[list[str], np.ndarray]:
        """Chunk names by id and the document id of each."""
        rows = self._query("SELECT name, doc FROM chunk ORDER BY id")
        return [n for n, _ in rows], np.fromiter((d for _, d in rows), dtype=np.int32, count=len(rows))

    def entities(self) -> tuple[list[str], list[str], list[str]]:
        """Keys, names and sources of the entities, by id."""
        rows = self._query("SELECT key, name, source FROM entity ORDER BY id")
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]

    def chunk_text(self, chunk: int) -> str:
        return self._query("SELECT text FROM chunk WHERE id = ?", (chunk,))[0][0]

    def texts(self, kind: str, start: int, stop: int) -> list[str]:
        """Texts of the chunks (their text) or entities (their name) with ids in ``[start, stop)``, by id."""
        sql = {"chunks": "SELECT text FROM chunk", "entities": "SELECT name FROM entity"}[kind]
        return [t for (t,) in self._query(f"{sql} WHERE id >= ? AND id < ? ORDER BY id", (start, stop))]

    def read(self) -> Mentions:
        """The mentions as sparse rows (one pass over the table, no per-row Python object kept)."""
        n_entities, n_docs = self.count("entity"), self.count("document")
        with self._lock:
            cursor = self._db.execute("SELECT entity, chunk, doc FROM mention ORDER BY entity, chunk")
            flat = np.fromiter(chain.from_iterable(cursor), dtype=np.int64)
        triples = flat.reshape(-1, 3)
        ent, chunk, doc = triples[:, 0], triples[:, 1], triples[:, 2]
        # within an entity, chunks ascend and a document's chunks are consecutive ids: its documents ascend too
        first = np.ones(len(ent), dtype=bool)
        first[1:] = (ent[1:] != ent[:-1]) | (doc[1:] != doc[:-1])
        pair_ent, pair_doc = ent[first], doc[first]
        by_doc = np.argsort(pair_doc, kind="stable")
        return Mentions(
            n_entities=n_entities,
            entity_chunks=_csr(ent, chunk, n_entities),
            entity_docs=_csr(pair_ent, pair_doc, n_entities),
            doc_entities=_csr(pair_doc[by_doc], pair_ent[by_doc], n_docs),
        )

    def copy_to(self, path: Path) -> Incidence:
        """A copy of this store at ``path`` (SQLite's online backup), opened."""
        target = sqlite3.connect(path)
        with self._lock:
            self._db.backup(target)
        target.close()
        return Incidence(path)

    def close(self) -> None:
        with self._lock:
            self._db.close()
