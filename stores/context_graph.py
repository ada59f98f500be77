"""The JudgeAgent context graph (seed 000, Appendix C, Algorithms 3 and 4): an entity <-> chunk <-> document
incidence store beside the Chroma collections.

* **Text chunking** (Appendix C): a knowledge base is a ``.txt``/``.md`` file, a
  JSONL/JSON/CSV/TSV file of documents (``{"id", "title", "text"}``), a folder of
  such files, or the reference texts of the base questions (one document per question). Paragraphs (blank-line
  separated) are chunks; very short paragraphs are merged with the next one and
  very long ones split at sentence ends. Chunks are grouped into documents.
* **Node construction / linking** (Algorithm 3): entities are extracted per chunk
  (the caller's ``extract`` function labels many chunks per call, Table 11); node
  = (entity, chunk ids, document ids); entities sharing a chunk or a document are
  neighbours (``relation`` = ``chunk`` or ``document``). The graph is stored as its mentions
  (:mod:`stores.incidence`, SQLite), never as the clique edges of each document: ``E[e]`` is computed from
  them when a hop asks for it.
* **Persistence**: ``<cache>/judgeagent/graph-<key>/incidence.sqlite`` (documents, chunk texts, entities,
  mentions), ``vectors-<model>/`` (entity and chunk vectors, one float32 row per id, memory-mapped:
  :mod:`stores.vector_rows`) and a Chroma client in ``.../chroma`` with the chunk and entity-name embeddings
  (for lookups by similarity). ``key`` hashes the corpus and the extraction model, so reopening an unchanged
  corpus loads the graph and makes no LLM call. A corpus that extends a built one (its documents first, then new
  ones) starts from a copy of that graph's store and vectors and adds only the new documents' mentions. A build
  adds one document per transaction, so a killed build resumes with the next document.
  Vectors are also cached by text content per embedding model
  (:mod:`stores.embedding_cache`), so a changed corpus embeds only its new texts, in batches.
  Entity labels are also cached per chunk content hash
  (``<cache>/judgeagent/entities-<model>.jsonl``), so a changed corpus only sends
  its new chunks to the model.
* **Spread builds**: given a ``spread`` (:data:`BuildMap`, the run's workers on a Ray cluster), the extraction
  calls and the embedding batches of a build go out as items and come back in any order; the labels and vectors
  are kept in the caches here, by the caller, as each item comes back, so the graph, the caches and the vector rows
  are those of a build in this process.
* **Path sampling** (Algorithm 4) with a caller-supplied seeded ``random.Random``: each hop ranks the unvisited
  neighbours (or the entity's chunks) with one matrix product over their vector rows.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from pydantic import BaseModel

from dyneval.stores.embedding_cache import EmbeddingCache, EmbedMap, embedder_label
from dyneval.stores.files import append_line, drop_torn_tail, read_records as log_records
from dyneval.stores.incidence import Incidence, document_hash, entity_key
from dyneval.stores.inputs import FORMATS, TEXT_SUFFIXES, FieldMap, Scalar, Texts, input_error, read_records, read_text
from dyneval.stores.vector_rows import VectorRows

GRAPH_FORMAT = 2  # 2: incidence store (1: networkx graph.json)
STORE_FILE = "incidence.sqlite"
CHUNK_BATCH = 64  # texts per embedding call
ENTITY_BATCH = 128
MIN_CHUNK_CHARS = 200
MAX_CHUNK_CHARS = 1200

#: ``extract(texts) -> [(entities, source), ...]`` one entry per text, in order.
Extractor = Callable[[list[str]], list[tuple[list[str], str]]]
#: ``progress(stage, advance, total)``: ``advance`` more items of ``stage`` done, of ``total``. It may raise to
#: stop the build between two steps (the run's stop flag).
Progress = Callable[[str, int, int], None]
#: ``spread(items) -> (index, result)`` for every item, in any order, as the caller's workers end them:
#: ``("label", texts)`` gives ``[(entities, source), ...]`` (one extraction call over ``texts``, as ``extract``),
#: ``("embed", texts)`` one vector per text (the build's embedding model). Nothing is written where it runs.
BuildMap = Callable[[list[tuple[str, list[str]]]], Iterator[tuple[int, Any]]]


def _quiet(stage: str, advance: int, total: int) -> None:
    """No progress display."""


# -- corpus ------------------------------------------------------------------------------------

@dataclass
class Document:
    id: str
    title: str
    chunks: list[str]


def split_paragraphs(text: str, min_chars: int = MIN_CHUNK_CHARS, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """Paragraph-level chunks (Appendix C): several sentences or a paragraph, never single sentences."""
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    paras = [p for p in paras if p and not re.fullmatch(r"#+\s.*", p)]  # drop bare Markdown headings
    merged: list[str] = []
    buf = ""
    for p in paras:
        buf = f"{buf} {p}".strip() if buf else p
        if len(buf) >= min_chars:
            merged.append(buf)
            buf = ""
    if buf:
        if merged and len(merged[-1]) + len(buf) <= max_chars:
            merged[-1] = f"{merged[-1]} {buf}"
        else:
            merged.append(buf)
    out: list[str] = []
    for p in merged:
        while len(p) > max_chars:
            cut = p.rfind(". ", 0, max_chars)
            cut = cut + 1 if cut > min_chars else max_chars
            out.append(p[:cut].strip())
            p = p[cut:].strip()
        if p:
            out.append(p)
    return out


def _title_of(path: Path, text: str) -> str:
    for line in text.splitlines():
        if line.strip().startswith("#"):
            return line.strip().lstrip("#").strip()
    return path.stem.replace("_", " ")


KB_FIELDS = ("id", "title", "text")
KB_FORMATS = (*TEXT_SUFFIXES, *FORMATS)


class _RawDocument(BaseModel):
    """One knowledge-base record (``--kb-fields`` maps these names; ``text`` may join columns with ``+``)."""

    id: Scalar | None = None
    title: Scalar = ""
    text: Texts


def load_knowledge_base(path: str | Path, fields: str | None = None) -> list[Document]:
    """Documents of a knowledge base (``--kb``), read strictly through :mod:`stores.inputs`.

    A ``.txt``/``.md`` file is one document; a JSONL/JSON/CSV/TSV file holds one document per record
    (``text``, optional ``title`` and ``id``; a list of texts is joined by blank lines; ``fields`` maps other
    column names); a folder holds such files (hidden files skipped, linked folders followed, any other file
    refused: :func:`_kb_files`). Binary, non-UTF-8 or empty (even 0-byte) files, records without text and a
    knowledge base without any text are errors.
    """
    p = Path(path)
    if not p.exists():
        raise input_error("knowledge base not found", flag="--kb", file=p)
    fmap = FieldMap.parse(fields, KB_FIELDS, flag="--kb-fields", joinable=("text",))
    if not p.is_dir():
        return _file_documents(p, p.name, fmap, prefix="")
    files = _kb_files(p)
    docs = [d for f in files for d in _file_documents(f, str(f.relative_to(p)), fmap, prefix=f"{f.relative_to(p)}:")]
    if not docs:
        raise input_error(f"knowledge base folder holds no documents ({', '.join(KB_FORMATS)} files)", flag="--kb",
                          file=p)
    return docs


def _kb_files(folder: Path) -> list[Path]:
    """The files under a knowledge-base folder, hidden names skipped, linked folders followed; a link leading back
    to a folder it is in (a loop), a broken link and an unreadable folder are refused."""
    files: list[Path] = []
    todo = [(folder, (folder.resolve(),))]
    while todo:
        current, above = todo.pop()
        try:
            entries = sorted(e for e in current.iterdir() if not e.name.startswith("."))
        except OSError as exc:
            raise input_error(f"cannot read folder: {exc.strerror or exc}", flag="--kb", file=current) from None
        for entry in entries:
            if entry.is_dir():
                real = entry.resolve()
                if real in above:
                    raise input_error(f"symbolic link loop: leads back to {real}", flag="--kb", file=entry)
                todo.append((entry, (*above, real)))
            elif entry.is_file():
                files.append(entry)
            else:
                raise input_error("neither a file nor a folder (a broken or looping symbolic link?)", flag="--kb",
                                  file=entry)
    return sorted(files)


def _file_documents(f: Path, name: str, fmap: FieldMap, *, prefix: str) -> list[Document]:
    suffix = f.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        text = read_text(f, flag="--kb")
        chunks = split_paragraphs(text)
        if not chunks:
            raise input_error("document holds no text paragraphs (only headings or blank lines)", flag="--kb",
                              file=f)
        return [Document(id=name, title=_title_of(f, text), chunks=chunks)]
    if suffix not in FORMATS:
        raise input_error(f"unsupported knowledge-base file type {suffix or '(no suffix)'!r}; use "
                          f"{', '.join(KB_FORMATS)}", flag="--kb", file=f)
    docs: dict[str, Document] = {}
    for rec in read_records(f, flag="--kb"):
        raw = fmap.validate(_RawDocument, rec)
        chunks = split_paragraphs("\n\n".join(raw.text))
        if not chunks:
            raise fmap.missing(rec, "text", "document has no text")
        doc_id = f"{prefix}{raw.id if raw.id is not None else rec.n}"
        if doc_id in docs:
            raise fmap.error(rec, "id", f"duplicate document id {doc_id!r}")
        docs[doc_id] = Document(id=doc_id, title=raw.title, chunks=chunks)
    return list(docs.values())


def documents_from_references(questions: Sequence[Any]) -> list[Document]:
    """One document per base question, its reference texts as chunks (Appendix C: same question = same document)."""
    docs = []
    for q in questions:
        chunks = [c for ref in q.references for c in split_paragraphs(ref)]
        if chunks:
            docs.append(Document(id=f"q:{q.id}", title=f"references of {q.id}", chunks=chunks))
    return docs


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(json.dumps([d.id, d.title, d.chunks], ensure_ascii=False).encode())
    return h.hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60] or "model"


# -- entity label cache ------------------------------------------------------------------------

class EntityCache:
    """Entity labels per chunk content hash (JSONL, append-only; last line wins)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        drop_torn_tail(path)  # a line a killed build cut would swallow the next label appended after it
        self.data: dict[str, dict[str, Any]] = {rec["h"]: rec for rec in log_records(path) if "h" in rec}

    def get(self, text: str) -> dict[str, Any] | None:
        return self.data.get(text_hash(text))

    def put(self, text: str, entities: list[str], source: str) -> None:
        rec = {"h": text_hash(text), "entities": entities, "source": source}
        with self._lock:
            self.data[rec["h"]] = rec
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_line(self.path, rec)


# -- the graph ---------------------------------------------------------------------------------

KINDS = ("chunks", "entities")
#: Texts labelled per ``extract`` call of a build when the caller gives no size: labels are cached after each.
LABEL_SLICE = 400


@dataclass
class PathStep:
    entity: str
    chunk: str
    entity_candidates: list[str] = field(default_factory=list)
    chunk_candidates: list[str] = field(default_factory=list)


def top_k(query: np.ndarray, matrix: np.ndarray, name_of: Callable[[int], str], k: int,
          row_norms: np.ndarray | None = None) -> list[int]:
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
    def construct(cls, docs: Sequence[Document], labels: dict[str, tuple[list[str], str]], key: str = "",
                  folder: Path | None = None) -> ContextGraph:
        """Algorithm 3 given the entity labels of every chunk id (``chunk id -> (entities, source)``), stored in
        ``folder`` (in memory without one)."""
        store = Incidence(folder / STORE_FILE if folder else None)
        for doc in docs:
            store.add_document(doc.id, doc.title, doc.chunks,
                               [labels.get(f"{doc.id}#{i}", ([], "none")) for i in range(len(doc.chunks))])
        store.set_meta("key", key)
        return cls(store, key=key, folder=folder)

    @classmethod
    def open(cls, folder: Path) -> ContextGraph:
        """The graph stored in ``folder`` (by :meth:`construct` or :func:`open_context_graph`)."""
        store = Incidence(folder / STORE_FILE)
        return cls(store, key=store.meta("key") or "", folder=folder)

    # -- Algorithm 3's nodes and neighbourhoods -------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._index

    def node(self, key: str) -> dict[str, Any]:
        """``N[e]``: the entity's first-seen name and label source, its chunk ids and document ids (in the order
        they were added)."""
        i = self._index[key]
        return {"name": self._names[i], "source": self._sources[i],
                "chunks": [self.chunks.names[c] for c in self.mentions.chunks_of(i)],
                "docs": [self._doc_names[d] for d in self.mentions.docs_of(i)]}

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

        g = nx.Graph()
        for key in self.keys:
            g.add_node(key, **self.node(key))
        for i, key in enumerate(self.keys):
            for j in np.flatnonzero(self.mentions.neighbour_mask(i)):
                if j > i:
                    g.add_edge(key, self.keys[j], relation="chunk" if self.mentions.share_a_chunk(i, int(j))
                               else "document")
            if g.number_of_edges() > max_edges:
                raise ValueError(f"the context graph has more than {max_edges} edges: too large to export")
        return g

    # -- vectors (rows for hops, Chroma for lookups) ----------------------------------------------
    def attach(self, chroma: Callable[[], Any], embed: Any, vectors: EmbeddingCache | None = None,
               spread: BuildMap | None = None) -> None:
        """Bind the Chroma client (``chroma()`` makes it, on first use: a graph whose vectors are all stored
        samples paths without opening Chroma), the embedding function and the content-keyed vector cache (vectors
        filled by :meth:`index`; with ``spread``, :meth:`index` has the texts the cache lacks embedded there)."""
        self._chroma, self._embed, self._vectors_cache = chroma, embed, vectors
        self._embed_map = None if spread is None else (lambda parts: spread([("embed", p) for p in parts]))
        self._client, self._collections = None, {}
        model = hashlib.sha256(embedder_label(embed).encode("utf-8")).hexdigest()[:8]
        self._model = model
        self._rows = {kind: VectorRows(self.folder / f"vectors-{model}" if self.folder else None, kind)
                      for kind in KINDS}

    def _collection_name(self, kind: str) -> str:
        return f"ja-{self.key[:20] or 'graph'}-{self._model}-{kind}"  # vectors of another model never mix in

    def _collection(self, kind: str) -> Any:
        with self._lock:
            if kind not in self._collections:  # opened once: each opening is a round trip to the Chroma store
                if self._client is None:
                    assert self._chroma is not None, "attach() the graph before using its vectors"
                    self._client = self._chroma()
                self._collections[kind] = self._client.get_or_create_collection(
                    self._collection_name(kind), embedding_function=self._embed, metadata={"hnsw:space": "cosine"})
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

    def index(self, progress: Progress = _quiet) -> None:
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
            for start in range(0, stored if have is not None else 0, batch):
                stop = min(start + batch, stored)
                ids = self._ids(kind, start, stop)
                part = [n for n, i in enumerate(ids) if i not in have]
                if part:
                    texts = self.store.texts(kind, start, stop)
                    vecs = np.asarray(rows.matrix()[start:stop])
                    metas = self._metadatas(kind, start, stop)
                    collection.upsert(ids=[ids[n] for n in part], embeddings=[vecs[n] for n in part],
                                      documents=[texts[n] for n in part], metadatas=[metas[n] for n in part])
                    progress(f"embedding {kind}", len(part), missing)
            starts = range(stored, total, batch)
            with closing(self._embedded(kind, [(start, min(start + batch, total)) for start in starts])) as vectors:
                for start, (texts, vecs) in zip(starts, vectors):
                    stop = min(start + batch, total)
                    collection.upsert(ids=self._ids(kind, start, stop), embeddings=vecs, documents=texts,
                                      metadatas=self._metadatas(kind, start, stop))
                    rows.append(vecs)
                    progress(f"embedding {kind}", stop - start, missing)
            self.store.set_meta(marker, str(total))

    def _embedded(self, kind: str, spans: list[tuple[int, int]]) -> Iterator[tuple[list[str], list[np.ndarray]]]:
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
        res = self._collection("entities").query(query_embeddings=[self.embed_text(text)],
                                                n_results=min(k, len(self.keys)))
        found = [(m["key"], round(1 - d, 4)) for m, d in zip(res["metadatas"][0], res["distances"][0])
                 if m["key"] in self._index]
        if exact in self._index and (not found or found[0][0] != exact):
            found = [(exact, 1.0)] + [f for f in found if f[0] != exact][: k - 1]
        return [{"entity": key, "name": self.name(key), "similarity": sim,
                 "chunks": len(self.mentions.chunks_of(self._index[key])), "neighbours": self.degree(key)}
                for key, sim in found]

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
        ranked = top_k(np.asarray(vecs[i]), np.asarray(vecs[cands]), lambda r: self._entity_id(int(cands[r])), k,
                       row_norms=self._rows["entities"].norms(cands))
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
        ranked = top_k(self.embed_text(query), np.asarray(self._matrix("chunks")[ids]), lambda r: names[ids[r]], k,
                       row_norms=self._rows["chunks"].norms(ids))
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
        return [{"chunk": i, **self.chunks[i], "similarity": round(1 - d, 4)}
                for i, d in zip(res["ids"][0], res["distances"][0])]

    # -- Algorithm 4 ----------------------------------------------------------------------------
    def sample_path(self, seeds: Sequence[tuple[str, str]], hops: int, rng: random.Random, k: int = 5
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
            steps.append(PathStep(entity=current, chunk=chunk, entity_candidates=cands,
                                  chunk_candidates=chunk_cands))
            visited.append(current)
        return {"seed_entity": seed_entity, "question": question, "truncated": truncated, "mode": "graph",
                "steps": [s.__dict__ for s in steps], "entities": [s.entity for s in steps],
                "chunks": [s.chunk for s in steps]}

    def random_path(self, hops: int, rng: random.Random) -> dict[str, Any]:
        """Ablation "w/o context graph" (section 4.5): ``hops`` chunks drawn at random from the knowledge base."""
        ids = sorted(self.chunks)
        picked = rng.sample(ids, min(hops, len(ids)))
        return {"seed_entity": None, "question": None, "truncated": len(picked) < hops, "mode": "random",
                "steps": [{"entity": None, "chunk": c} for c in picked], "entities": [], "chunks": picked}

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
        return {"documents": len(self.docs), "chunks": len(self.chunks), "entities": len(self.keys),
                "mentions": int(len(self.mentions.entity_chunks[1])), "entity_sources": sources}


# -- build or open -----------------------------------------------------------------------------

_locks_guard = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}


def _build_lock(folder: Path) -> threading.Lock:
    """One lock per graph folder: a graph is built once, while other knowledge bases build beside it."""
    with _locks_guard:
        return _build_locks.setdefault(folder.resolve(), threading.Lock())


def graph_key(docs: Sequence[Document], extractor_label: str) -> str:
    return hashlib.sha256(f"{GRAPH_FORMAT}|{extractor_label}|{corpus_hash(docs)}".encode()).hexdigest()


def _grow_from_base(root: Path, folder: Path, docs: Sequence[Document], extractor_label: str) -> Path | None:
    """Start ``folder`` from a copy of the largest built graph (same extraction model) whose documents are the
    first documents of ``docs``, unchanged: its mentions and vector rows are kept, only the new documents are
    added (the same graph as a build from nothing, ids included). Returns the base's folder, if any."""
    hashes = [document_hash(d.id, d.title, d.chunks) for d in docs]
    best: tuple[int, Path] | None = None
    for candidate in root.glob(f"graph-*/{STORE_FILE}"):
        if candidate.parent == folder:
            continue
        store = Incidence(candidate)
        try:
            if store.meta("extractor") != extractor_label or store.meta("complete") != store.meta("key"):
                continue
            stored = store.document_hashes()
        finally:
            store.close()
        if 0 < len(stored) < len(hashes) and stored == hashes[:len(stored)] and (best is None or len(stored) > best[0]):
            best = (len(stored), candidate.parent)
    if best is None:
        return None
    base = best[1]
    folder.mkdir(parents=True, exist_ok=True)
    for vectors in base.glob("vectors-*"):  # first: a store without its rows only embeds them again
        shutil.copytree(vectors, folder / vectors.name, dirs_exist_ok=True)
    tmp = folder / f".{STORE_FILE}.tmp"
    tmp.unlink(missing_ok=True)
    source = Incidence(base / STORE_FILE)
    try:
        source.copy_to(tmp).close()
    finally:
        source.close()
    tmp.replace(folder / STORE_FILE)
    return base


def open_context_graph(docs: Sequence[Document], *, cache_dir: Path, extractor_label: str, extract: Extractor,
                       chroma: Callable[[Path], Any], embed: Any, log: Callable[[str], None] = lambda s: None,
                       progress: Progress | None = None, label_slice: int = LABEL_SLICE,
                       spread: BuildMap | None = None) -> ContextGraph:
    """Load the graph of ``docs`` from the cache, or build it (Algorithm 3), persist and index it.

    Only chunks whose content hash is not in the entity cache reach ``extract``, ``label_slice`` texts per call
    (their labels are cached after each call, so a killed build labels them once); an unchanged corpus makes no
    call at all (``log`` says it was a cache hit). Documents are added to the store one transaction each, in
    order; a killed build resumes after the last whole document. ``progress`` hears the stages of a build:
    ``extraction`` (chunks labelled, which ``extract`` reports as it goes), ``embedding chunks`` (while the model
    labels), ``linking documents`` and ``embedding entities``.

    With ``spread``, ``extract`` and ``embed`` are not called for the build: each ``label_slice`` texts to label
    and each chunk or entity batch to embed is an item of ``spread`` (:data:`BuildMap`), kept in the caches as it
    comes back (a killed build labels again at most the items out) and counted in ``progress`` then; ``embed``
    still names the vectors' model.
    """
    progress = progress or _quiet
    key = graph_key(docs, extractor_label)
    root = cache_dir / "judgeagent"
    folder = root / f"graph-{key[:24]}"
    vectors = EmbeddingCache(root, embedder_label(embed))
    with _build_lock(folder):
        if not (folder / STORE_FILE).exists():
            base = _grow_from_base(root, folder, docs, extractor_label)
            if base is not None:
                log(f"context graph: extending the graph in {base} (its documents come first, unchanged)")
        store = Incidence(folder / STORE_FILE)
        built = store.meta("complete") != key
        if not built:
            log(f"context graph: cache hit, loaded from {folder} (no extraction call)")
        else:
            store.set_meta("key", key)
            store.set_meta("extractor", extractor_label)
            stored = store.document_names()
            todo = [d for d in docs if d.id not in stored]
            _link(store, todo, sum(len(d.chunks) for d in docs), cache_dir, extractor_label, extract, embed, vectors,
                  log, progress, label_slice, spread)
            store.set_meta("complete", key)

        def indexed(stage: str, advance: int, total: int) -> None:
            if not built or stage != "embedding chunks":  # a build counted them while the model labelled
                progress(stage, advance, total)

        graph = ContextGraph(store, key=key, folder=folder)
        graph.attach(lambda: chroma(folder / "chroma"), embed, vectors, spread)
        graph.index(indexed)
    return graph


def _link(store: Incidence, todo: Sequence[Document], n_chunks: int, cache_dir: Path, extractor_label: str,
          extract: Extractor, embed: Any, vectors: EmbeddingCache, log: Callable[[str], None], progress: Progress,
          label_slice: int, spread: BuildMap | None) -> None:
    """Algorithm 3 for the documents not yet stored: label their chunks (cached per text), embed the chunk texts
    meanwhile (cached per text, in the batches :meth:`ContextGraph.index` uses), then add each document."""
    label_id = hashlib.sha256(extractor_label.encode()).hexdigest()[:8]  # the slug alone may be cut short
    cache = EntityCache(cache_dir / "judgeagent" / f"entities-{_slug(extractor_label)}-{label_id}.jsonl")
    texts = [t for d in todo for t in d.chunks]
    todo_texts = list(dict.fromkeys(t for t in texts if cache.get(t) is None))
    log(f"context graph: {n_chunks} chunks, {len(todo_texts)} to label")
    if todo_texts:
        progress("extraction", 0, len(todo_texts))  # first: the chunks are labelled, then embedded
    if spread is None:
        _label_and_embed_here(texts, todo_texts, cache, extract, embed, vectors, progress, label_slice)
    else:
        _label_and_embed_spread(texts, todo_texts, cache, vectors, progress, label_slice, spread)
    for doc in todo:
        labels = []
        for text in doc.chunks:
            rec = cache.get(text) or {"entities": [], "source": "none"}
            labels.append((rec["entities"], rec["source"]))
        store.add_document(doc.id, doc.title, doc.chunks, labels)
        progress("linking documents", 1, len(todo))


def _label_and_embed_here(texts: list[str], todo_texts: list[str], cache: EntityCache, extract: Extractor,
                          embed: Any, vectors: EmbeddingCache, progress: Progress, label_slice: int) -> None:
    """``extract`` over ``todo_texts``, ``label_slice`` texts per call, each call's labels cached before the next;
    ``texts`` embedded meanwhile on one thread, a batch at a time (a stopped or failed build embeds no further)."""

    def embed_chunks(batch: list[str]) -> None:
        progress("embedding chunks", 0, len(texts))  # a stopped build embeds no further batch
        vectors.embed(batch, embed)
        progress("embedding chunks", len(batch), len(texts))

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-chunks")
    try:
        embedded = [pool.submit(embed_chunks, texts[i:i + CHUNK_BATCH]) for i in range(0, len(texts), CHUNK_BATCH)]
        for start in range(0, len(todo_texts), max(1, label_slice)):
            part = todo_texts[start:start + max(1, label_slice)]
            for text, (entities, source) in zip(part, extract(part)):
                cache.put(text, entities, source)
        for batch in embedded:
            batch.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a failed or interrupted build stops embedding


def _label_and_embed_spread(texts: list[str], todo_texts: list[str], cache: EntityCache, vectors: EmbeddingCache,
                            progress: Progress, label_slice: int, spread: BuildMap) -> None:
    """One ``spread`` over every ``label_slice`` texts of ``todo_texts`` (one extraction call each) and every chunk
    batch's texts the vector cache lacks (the calls :func:`_label_and_embed_here` makes); each item's labels or
    vectors are cached here as it comes back, in whatever order, then counted."""
    step = max(1, label_slice)
    batches = [texts[i:i + CHUNK_BATCH] for i in range(0, len(texts), CHUNK_BATCH)]
    parts = vectors.to_embed(batches)
    items = [("label", todo_texts[i:i + step]) for i in range(0, len(todo_texts), step)]
    counts = [len(part) for _, part in items]  # what each item advances its stage by
    labelling = len(items)
    for batch, part in zip(batches, parts):
        if part:
            items.append(("embed", part))
            counts.append(len(batch))
    if texts:  # the batches whose texts are all cached (or sent in an earlier batch) are done already
        progress("embedding chunks", len(texts) - sum(counts[labelling:]), len(texts))
    results = spread(items)
    try:
        for i, result in results:
            kind, part = items[i]
            if kind == "label":
                for text, (entities, source) in zip(part, result):
                    cache.put(text, entities, source)
                progress("extraction", counts[i], len(todo_texts))
            else:
                vectors.keep(part, result)
                progress("embedding chunks", counts[i], len(texts))
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()  # stopped or failed: the items still out are given up
