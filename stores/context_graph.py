"""The JudgeAgent context graph once built (seed 000, Appendix C, Algorithms 3 and 4): its nodes, neighbourhoods,
vectors and knowledge paths, read from an entity <-> chunk <-> document incidence store beside the Chroma collections.

* **Nodes and neighbours** (Algorithm 3): node = (entity, chunk ids, document ids); entities sharing a chunk or a
  document are neighbours (``relation`` = ``chunk`` or ``document``). The graph is stored as its mentions
  (:mod:`stores.incidence`, SQLite), never as the clique edges of each document: ``E[e]`` is computed from them
  when a hop asks for it.
* **Vectors**: ``<graph folder>/vectors-<model>/`` holds the entity and chunk vectors, one float32 row per id,
  memory-mapped (:mod:`stores.vector_rows`), and a Chroma client in ``<graph folder>/chroma`` the chunk and
  entity-name embeddings (for lookups by similarity). :meth:`ContextGraph.index` fills both, through the
  content-keyed vector cache (:mod:`stores.embedding_cache`) in batches of :data:`CHUNK_BATCH` and
  :data:`ENTITY_BATCH` texts (a build embeds its chunks in the same batches:
  :mod:`stores.context_graph_build`, which makes or opens the graph of a knowledge base).
* **Path sampling** (Algorithm 4) with a caller-supplied seeded ``random.Random``: each hop ranks the unvisited
  neighbours (or the entity's chunks) with one matrix product over their vector rows.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dyneval.stores.embedding_cache import EmbeddingCache, EmbedMap, embedder_label
from dyneval.stores.incidence import Incidence, entity_key
from dyneval.stores.knowledge_base import Document
from dyneval.stores.vector_rows import VectorRows

STORE_FILE = "incidence.sqlite"
CHUNK_BATCH = 64  # texts per embedding call
ENTITY_BATCH = 128
KINDS = ("chunks", "entities")

#: ``progress(stage, advance, total)``: ``advance`` more items of ``stage`` done, of ``total``. It may raise to
#: stop the build between two steps (the run's stop flag).
Progress = Callable[[str, int, int], None]
#: ``spread(items) -> (index, result)`` for every item, in any order, as the caller's workers end them:
#: ``("label", texts)`` gives ``[(entities, source), ...]`` (one extraction call over ``texts``, as ``extract``),
#: ``("embed", texts)`` one vector per text (the build's embedding model). Nothing is written where it runs.
BuildMap = Callable[[list[tuple[str, list[str]]]], Iterator[tuple[int, Any]]]


def no_progress(stage: str, advance: int, total: int) -> None:
    """No progress display."""


@dataclass
class PathStep:
    entity: str
    chunk: str
    entity_candidates: list[str] = field(default_factory=list)
    chunk_candidates: list[str] = field(default_factory=list)


def top_k(
    query: np.ndarray, matrix: np.ndarray, name_of: Callable[[int], str], k: int, row_norms: np.ndarray | None = None
) -> list[int]:
    """Rows of ``matrix`` by cosine similarity to ``query`` (rounded to 6 places), ties broken by ``name_of(row)``
    (deterministic): the ``k`` first. ``row_norms``: the rows' norms, when known.

    One product over all rows, summed by NumPy's own loop: each row's sum in a fixed order, on one thread (a
    threaded BLAS splits a product by the threads it finds, which changes the last bits and is much slower on a
    busy machine). The exact rounding and the name order are applied only to the rows whose vectorised rounding
    is within 3e-6 of the ``k``-th best (NumPy's and Python's rounding differ by at most 1e-6), so a hop over
    10,000 neighbours sorts a handful of them (all of those tied with the ``k``-th), not all.
    """
    if not len(matrix):
        return []
    norms = (np.linalg.norm(matrix, axis=1) if row_norms is None else row_norms) * np.linalg.norm(query)
    sims = np.einsum("ij,j->i", matrix, query) / np.where(norms == 0, 1.0, norms).astype(np.float32)
    rows = np.arange(len(sims))
    if len(sims) > 4 * k:
        approx = np.round(sims.astype(np.float64), 6)
        kth = -np.partition(-approx, k - 1)[k - 1]
        rows = np.flatnonzero(approx >= kth - 3e-6)
    ranked = sorted(zip(rows.tolist(), sims[rows].tolist()), key=lambda rs: (-round(rs[1], 6), name_of(rs[0])))
    return [r for r, _ in ranked[:k]]


class ChunkTable(Mapping[str, dict[str, str]]):
    """``chunk id -> {"doc", "text"}``: the ids and documents in memory, each text read from the store when
    asked for (a path needs a few; the knowledge base may hold millions of characters)."""

    def __init__(self, store: Incidence, doc_names: list[str]) -> None:
        self.store = store
        self.names, self.doc_ids = store.chunk_index()
        self._doc_names = doc_names
        self._ids = {name: i for i, name in enumerate(self.names)}

    def __getitem__(self, name: str) -> dict[str, str]:
        i = self._ids[name]
        return {"doc": self._doc_names[self.doc_ids[i]], "text": self.store.chunk_text(i)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._ids


class ContextGraph:
    """Nodes ``(entity, chunk ids, document ids)`` linked by shared chunks or documents (Appendix C,
    Algorithm 3), read from an :class:`~stores.incidence.Incidence` store; hops (Algorithm 4) rank vector rows
    (:class:`~stores.vector_rows.VectorRows`) bound by :meth:`attach` and filled by :meth:`index`."""

    def __init__(self, store: Incidence, key: str = "", folder: Path | None = None) -> None:
        self.store, self.key, self.folder = store, key, folder
        self.keys, self._names, self._sources = store.entities()
        self._index = {k: i for i, k in enumerate(self.keys)}
        documents = store.documents()
        self.docs = dict(documents)  # doc id -> title
        self._doc_names = [name for name, _ in documents]
        self.chunks = ChunkTable(store, self._doc_names)
        self.mentions = store.read()
        self._embed: Any = None
        self._embed_map: EmbedMap | None = None
        self._vectors_cache: EmbeddingCache | None = None
        self._chroma: Callable[[], Any] | None = None
        self._client: Any = None
        self._collections: dict[str, Any] = {}
        self._rows: dict[str, VectorRows] = {}
        self._questions: dict[str, np.ndarray] = {}
        self._entity_ids: dict[int, str] = {}
        self._lock = threading.Lock()

    # -- construction (Algorithm 3) -------------------------------------------------------------
    @classmethod
    def construct(
        cls,
        docs: Sequence[Document],
        labels: dict[str, tuple[list[str], str]],
        key: str = "",
        folder: Path | None = None,
    ) -> ContextGraph:
        """Algorithm 3 given the entity labels of every chunk id (``chunk id -> (entities, source)``), stored in
        ``folder`` (in memory without one)."""
        store = Incidence(folder / STORE_FILE if folder else None)
        for doc in docs:
            store.add_document(
                doc.id,
                doc.title,
                doc.chunks,
                [labels.get(f"{doc.id}#{i}", ([], "none")) for i in range(len(doc.chunks))],
            )
        store.set_meta("key", key)
        return cls(store, key=key, folder=folder)

    @classmethod
    def open(cls, folder: Path) -> ContextGraph:
        """The graph stored in ``folder`` (by :meth:`construct` or
        :func:`stores.context_graph_build.open_context_graph`)."""
        store = Incidence(folder / STORE_FILE)
        return cls(store, key=store.meta("key") or "", folder=folder)

    # -- Algorithm 3's nodes and neighbourhoods -------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._index

    def node(self, key: str) -> dict[str, Any]:
        """``N[e]``: the entity's first-seen name and label source, its chunk ids and document ids (in the order
        they were added)."""
        i = self._index[key]
        return {
            "name": self._names[i],
            "source": self._sources[i],
            "chunks": [self.chunks.names[c] for c in self.mentions.chunks_of(i)],
            "docs": [self._doc_names[d] for d in self.mentions.docs_of(i)],
        }

    def name(self, key: str) -> str:
        return self._names[self._index[key]]

    def neighbours(self, key: str) -> set[str]:
        """Algorithm 3's ``E[e]``: the entities sharing a chunk or a document with ``key``."""
        return {self.keys[j] for j in np.flatnonzero(self.mentions.neighbour_mask(self._index[key]))}

    def degree(self, key: str) -> int:
        return int(self.mentions.neighbour_mask(self._index[key]).sum())

    def relation(self, a: str, b: str) -> str | None:
        """``chunk`` when ``a`` and ``b`` share a chunk, ``document`` when they share only a document, else
        ``None`` (not neighbours)."""
        i, j = self._index[a], self._index[b]
        if i == j or not self.mentions.neighbour_mask(i)[j]:
            return None
        return "chunk" if self.mentions.share_a_chunk(i, j) else "document"

    def to_networkx(self, max_edges: int = 100_000) -> Any:
        """The graph as a networkx ``Graph`` for inspection (nodes with ``name``, ``chunks``, ``docs``,
        ``source``; edges with ``relation``), refused beyond ``max_edges`` edges: the store exists so that the
        cliques are never materialized."""
        import networkx as nx

        g: nx.Graph[str] = nx.Graph()
        for key in self.keys:
            g.add_node(key, **self.node(key))
        for i, key in enumerate(self.keys):
            for j in np.flatnonzero(self.mentions.neighbour_mask(i)):
                if j > i:
                    g.add_edge(
                        key, self.keys[j], relation="chunk" if self.mentions.share_a_chunk(i, int(j)) else "document"
                    )
            if g.number_of_edges() > max_edges:
                raise ValueError(f"the context graph has more than {max_edges} edges: too large to export")
        return g

    # -- vectors (rows for hops, Chroma for lookups) ----------------------------------------------
    def attach(
        self,
        chroma: Callable[[], Any],
        embed: Any,
        vectors: EmbeddingCache | None = None,
        spread: BuildMap | None = None,
    ) -> None:
        """Bind the Chroma client (``chroma()`` makes it, on first use: a graph whose vectors are all stored
        samples paths without opening Chroma), the embedding function and the content-keyed vector cache (vectors
        filled by :meth:`index`; with ``spread``, :meth:`index` has the texts the cache lacks embedded there)."""
        self._chroma, self._embed, self._vectors_cache = chroma, embed, vectors
        self._embed_map = None if spread is None else (lambda parts: spread([("embed", p) for p in parts]))
        self._client, self._collections = None, {}
        model = hashlib.sha256(embedder_label(embed).encode("utf-8")).hexdigest()[:8]
        self._model = model
        self._rows = {
            kind: VectorRows(self.folder / f"vectors-{model}" if self.folder else None, kind) for kind in KINDS
        }

    def _collection_name(self, kind: str) -> str:
        return f"ja-{self.key[:20] or 'graph'}-{self._model}-{kind}"  # vectors of another model never mix in

    def _collection(self, kind: str) -> Any:
        with self._lock:
            if kind not in self._collections:  # opened once: each opening is a round trip to the Chroma store
                if self._client is None:
                    assert self._chroma is not None, "attach() the graph before using its vectors"
                    self._client = self._chroma()
                self._collections[kind] = self._client.get_or_create_collection(
                    self._collection_name(kind), embedding_function=self._embed, metadata={"hnsw:space": "cosine"}
                )
            return self._collections[kind]

    @staticmethod
    def entity_id(key: str) -> str:
        return "e-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:20]

    def _ids(self, kind: str, start: int, stop: int) -> list[str]:
        if kind == "chunks":
            return self.chunks.names[start:stop]
        return [self.entity_id(k) for k in self.keys[start:stop]]

    def _metadatas(self, kind: str, start: int, stop: int) -> list[dict[str, str]]:
        if kind == "chunks":
            return [{"doc": self._doc_names[d]} for d in self.chunks.doc_ids[start:stop]]
        return [{"key": k} for k in self.keys[start:stop]]

    def index(self, progress: Progress = no_progress) -> None:
        """Vector rows and Chroma entries of every chunk and entity name (idempotent, resumable).

        Rows missing from the vector files are embedded a batch at a time (texts already in the vector cache are
        looked up, not embedded again), added to Chroma and appended; rows stored but missing from Chroma (a graph
        grown from a copy of another's store) are added from the files. ``progress`` hears
        ``("embedding chunks" | "embedding entities", batch size, rows missing)`` after each batch. Nothing is
        read when every row is stored and Chroma was filled (the store remembers it).
        """
        for kind, batch in (("chunks", CHUNK_BATCH), ("entities", ENTITY_BATCH)):
            total = len(self.chunks) if kind == "chunks" else len(self.keys)
            rows = self._rows[kind]
            marker = f"chroma:{self._collection_name(kind)}"
            if rows.count == total and self.store.meta(marker) == str(total):
                continue
            collection = self._collection(kind)
            stored = rows.count
            have = set(collection.get(include=[])["ids"]) if collection.count() < stored else None
            missing = total - stored
            if have is not None:
                missing += sum(i not in have for i in self._ids(kind, 0, stored))
                for start in range(0, stored, batch):
                    stop = min(start + batch, stored)
                    ids = self._ids(kind, start, stop)
                    part = [n for n, i in enumerate(ids) if i not in have]
                    if part:
                        stored_texts = self.store.texts(kind, start, stop)
                        stored_vecs = np.asarray(rows.matrix()[start:stop])
                        metas = self._metadatas(kind, start, stop)
                        collection.upsert(
                            ids=[ids[n] for n in part],
                            embeddings=[stored_vecs[n] for n in part],
                            documents=[stored_texts[n] for n in part],
                            metadatas=[metas[n] for n in part],
                        )
                        progress(f"embedding {kind}", len(part), missing)
            starts = range(stored, total, batch)
            with closing(self._embedded(kind, [(start, min(start + batch, total)) for start in starts])) as vectors:
                for start, (texts, vecs) in zip(starts, vectors):
                    stop = min(start + batch, total)
                    collection.upsert(
                        ids=self._ids(kind, start, stop),
                        embeddings=vecs,
                        documents=texts,
                        metadatas=self._metadatas(kind, start, stop),
                    )
                    rows.append(vecs)
                    progress(f"embedding {kind}", stop - start, missing)
            self.store.set_meta(marker, str(total))

    def _embedded(
        self, kind: str, spans: list[tuple[int, int]]
    ) -> Generator[tuple[Sequence[str], list[np.ndarray]], None, None]:
        """``(texts, vectors)`` of rows ``start:stop`` of ``kind`` for each span in turn, each batch's texts read when
        it is embedded (through the vector cache when there is one, on the spread's workers when attached so)."""
        texts = (self.store.texts(kind, start, stop) for start, stop in spans)
        if self._vectors_cache is None:
            return ((t, [np.asarray(v, dtype=np.float32) for v in self._embed(t)]) for t in texts)
        return self._vectors_cache.embed_batches(texts, self._embed, self._embed_map)

    def _matrix(self, kind: str) -> np.ndarray:
        matrix = self._rows[kind].matrix() if self._rows else None
        total = len(self.chunks) if kind == "chunks" else len(self.keys)
        if matrix is None or len(matrix) < total:
            raise RuntimeError(f"the context graph's {kind} have no vectors yet: attach() and index() it first")
        return matrix

    def embed_text(self, text: str) -> np.ndarray:
        if text not in self._questions:
            vec = np.asarray(self._embed([text])[0], dtype=np.float32)
            with self._lock:
                self._questions[text] = vec
        return self._questions[text]

    # -- lookups (also exposed as LangChain tools in tools/knowledge.py) ------------------------
    def entity_lookup(self, text: str, k: int = 5) -> list[dict[str, Any]]:
        """Graph entities most similar to ``text`` (exact key match first)."""
        if not self.keys:
            return []
        exact = entity_key(text)
        res = self._collection("entities").query(
            query_embeddings=[self.embed_text(text)], n_results=min(k, len(self.keys))
        )
        found = [
            (m["key"], round(1 - d, 4))
            for m, d in zip(res["metadatas"][0], res["distances"][0])
            if m["key"] in self._index
        ]
        if exact in self._index and (not found or found[0][0] != exact):
            found = [(exact, 1.0)] + [f for f in found if f[0] != exact][: k - 1]
        return [
            {
                "entity": key,
                "name": self.name(key),
                "similarity": sim,
                "chunks": len(self.mentions.chunks_of(self._index[key])),
                "neighbours": self.degree(key),
            }
            for key, sim in found
        ]

    def most_similar_entity(self, text: str) -> str | None:
        """The graph entity closest to ``text``: its own node when ``text`` names one (what :meth:`entity_lookup`
        ranks first), found without embedding ``text``."""
        if entity_key(text) in self._index:
            return entity_key(text)
        found = self.entity_lookup(text, k=1)
        return found[0]["entity"] if found else None

    def nearest_neighbours(self, entity: str, k: int = 5, exclude: Iterable[str] = ()) -> list[str]:
        """The ``k`` neighbours of ``entity`` most similar to it, skipping ``exclude`` (Algorithm 4, line 13):
        ``E[e]`` as a mask, one matrix product over the candidates' vector rows."""
        i = self._index[entity]
        mask = self.mentions.neighbour_mask(i)
        for other in exclude:
            if other in self._index:
                mask[self._index[other]] = False
        cands = np.flatnonzero(mask)
        if not cands.size:
            return []
        vecs = self._matrix("entities")
        ranked = top_k(
            np.asarray(vecs[i]),
            np.asarray(vecs[cands]),
            lambda r: self._entity_id(int(cands[r])),
            k,
            row_norms=self._rows["entities"].norms(cands),
        )
        return [self.keys[cands[r]] for r in ranked]

    def _entity_id(self, i: int) -> str:
        """:meth:`entity_id` of entity ``i``, computed once."""
        found = self._entity_ids.get(i)
        if found is None:
            found = self._entity_ids[i] = self.entity_id(self.keys[i])
        return found

    def nearest_chunks(self, entity: str, query: str, k: int = 5) -> list[str]:
        """The ``k`` chunks of ``entity`` most similar to ``query`` (Algorithm 4, line 15)."""
        ids = self.mentions.chunks_of(self._index[entity])
        names = self.chunks.names
        ranked = top_k(
            self.embed_text(query),
            np.asarray(self._matrix("chunks")[ids]),
            lambda r: names[ids[r]],
            k,
            row_norms=self._rows["chunks"].norms(ids),
        )
        return [names[ids[r]] for r in ranked]

    def search_chunks(self, query: str, k: int = 5, entity: str | None = None) -> list[dict[str, Any]]:
        """Chunks most similar to ``query`` (optionally only chunks of ``entity``)."""
        if entity:
            key = entity if entity in self._index else self.most_similar_entity(entity)
            if key is None:
                return []
            return [{"chunk": i, **self.chunks[i]} for i in self.nearest_chunks(key, query, k)]
        n = min(k, len(self.chunks))
        if n == 0:
            return []
        res = self._collection("chunks").query(query_embeddings=[self.embed_text(query)], n_results=n)
        return [
            {"chunk": i, **self.chunks[i], "similarity": round(1 - d, 4)}
            for i, d in zip(res["ids"][0], res["distances"][0])
        ]

    # -- Algorithm 4 ----------------------------------------------------------------------------
    def sample_path(
        self, seeds: Sequence[tuple[str, str]], hops: int, rng: random.Random, k: int = 5
    ) -> dict[str, Any]:
        """Algorithm 4, lines 8-19: a knowledge path of up to ``hops`` chunks.

        ``seeds`` are ``(entity text, question)`` pairs extracted from the batch's
        questions. One is drawn at random; the most similar graph entity starts the
        path with a random chunk of its own; each further hop draws one of the ``k``
        unvisited neighbours most similar to the current entity, then one of that
        entity's ``k`` chunks most similar to the question. A path stops early when
        the current entity has no unvisited neighbour (``truncated``).
        """
        if not seeds:
            raise ValueError("no question entities to start a knowledge path from")
        if not self.keys:
            raise ValueError("the context graph has no entities")
        seed_entity, question = seeds[rng.randrange(len(seeds))]
        current = self.most_similar_entity(seed_entity)
        assert current is not None
        visited = [current]
        first = rng.choice(sorted(self.node(current)["chunks"]))
        steps = [PathStep(entity=current, chunk=first)]
        truncated = False
        for _ in range(hops - 1):
            cands = self.nearest_neighbours(current, k, exclude=visited)
            if not cands:
                truncated = True
                break
            current = rng.choice(cands)
            chunk_cands = self.nearest_chunks(current, question, k)
            chunk = rng.choice(chunk_cands)
            steps.append(PathStep(entity=current, chunk=chunk, entity_candidates=cands, chunk_candidates=chunk_cands))
            visited.append(current)
        return {
            "seed_entity": seed_entity,
            "question": question,
            "truncated": truncated,
            "mode": "graph",
            "steps": [s.__dict__ for s in steps],
            "entities": [s.entity for s in steps],
            "chunks": [s.chunk for s in steps],
        }

    def random_path(self, hops: int, rng: random.Random) -> dict[str, Any]:
        """Ablation "w/o context graph" (section 4.5): ``hops`` chunks drawn at random from the knowledge base."""
        ids = sorted(self.chunks)
        picked = rng.sample(ids, min(hops, len(ids)))
        return {
            "seed_entity": None,
            "question": None,
            "truncated": len(picked) < hops,
            "mode": "random",
            "steps": [{"entity": None, "chunk": c} for c in picked],
            "entities": [],
            "chunks": picked,
        }

    def path_text(self, path: dict[str, Any]) -> str:
        """The path's chunks concatenated line by line (Algorithm 4, line 17); repeated chunks once."""
        seen: list[str] = []
        for c in path["chunks"]:
            if c not in seen:
                seen.append(c)
        return "\n".join(self.chunks[c]["text"] for c in seen)

    def stats(self) -> dict[str, Any]:
        sources: dict[str, int] = {}
        for source in self._sources:
            sources[source] = sources.get(source, 0) + 1
        return {
            "documents": len(self.docs),
            "chunks": len(self.chunks),
            "entities": len(self.keys),
            "mentions": int(len(self.mentions.entity_chunks[1])),
            "entity_sources": sources,
        }
