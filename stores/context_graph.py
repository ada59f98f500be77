"""The JudgeAgent context graph (seed 000, Appendix C, Algorithms 3 and 4), persisted with Chroma + networkx.

* **Text chunking** (Appendix C): a knowledge base is a ``.txt``/``.md`` file, a
  JSONL/JSON/CSV/TSV file of documents (``{"id", "title", "text"}``), a folder of
  such files, or the reference texts of the base questions (one document per question). Paragraphs (blank-line
  separated) are chunks; very short paragraphs are merged with the next one and
  very long ones split at sentence ends. Chunks are grouped into documents.
* **Node construction / linking** (Algorithm 3): entities are extracted per chunk
  (the caller's ``extract`` function labels many chunks per call, Table 11); node
  = (entity, chunk ids, document ids); entities sharing a chunk or a document are
  neighbours. Edges carry ``relation`` = ``chunk`` (shared chunk) or ``document``.
* **Persistence**: ``<cache>/judgeagent/graph-<key>/graph.json`` (networkx
  node-link data + chunk texts) and a Chroma client in ``.../chroma`` with the
  chunk and entity-name embeddings. ``key`` hashes the corpus and the extraction
  model, so reopening an unchanged corpus loads the graph and makes no LLM call.
  Vectors are also cached by text content per embedding model
  (:mod:`stores.embedding_cache`), so a changed corpus embeds only its new texts,
  in batches; the vectors a build computed stay in memory for path sampling.
  Entity labels are also cached per chunk content hash
  (``<cache>/judgeagent/entities-<model>.jsonl``), so a changed corpus only sends
  its new chunks to the model.
* **Path sampling** (Algorithm 4) with a caller-supplied seeded ``random.Random``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import networkx as nx
import numpy as np

from pydantic import BaseModel

from dyneval.stores.embedding_cache import EmbeddingCache, embedder_label
from dyneval.stores.files import append_line, drop_torn_tail, read_records as log_records
from dyneval.stores.inputs import FORMATS, TEXT_SUFFIXES, FieldMap, Scalar, Texts, input_error, read_records, read_text

GRAPH_FORMAT = 1
CHUNK_BATCH = 64  # texts per embedding call
ENTITY_BATCH = 128
MIN_CHUNK_CHARS = 200
MAX_CHUNK_CHARS = 1200

#: ``extract(texts) -> [(entities, source), ...]`` one entry per text, in order.
Extractor = Callable[[list[str]], list[tuple[list[str], str]]]
#: ``progress(stage, advance, total)``: ``advance`` more items of ``stage`` done, of ``total``. It may raise to
#: stop the build between two steps (the run's stop flag).
Progress = Callable[[str, int, int], None]


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


def entity_key(name: str) -> str:
    """Normalised node key of an entity name (case, spacing and surrounding punctuation ignored)."""
    key = re.sub(r"\s+", " ", name).strip(" .,;:'\"()[]").lower()
    return re.sub(r"^(?:the|a|an) ", "", key)


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

@dataclass
class PathStep:
    entity: str
    chunk: str
    entity_candidates: list[str] = field(default_factory=list)
    chunk_candidates: list[str] = field(default_factory=list)


class ContextGraph:
    """Nodes ``(entity, chunk ids, document ids)`` linked by shared chunks or documents (Appendix C)."""

    def __init__(self, graph: nx.Graph, chunks: dict[str, dict[str, str]], docs: dict[str, str], key: str = "",
                 folder: Path | None = None) -> None:
        self.g = graph
        self.chunks = chunks  # chunk id -> {"doc", "text"}
        self.docs = docs  # doc id -> title
        self.key = key
        self.folder = folder
        self._embed: Any = None
        self._vectors_cache: EmbeddingCache | None = None
        self._collections: dict[str, Any] = {}
        self._client: Any = None
        self._vec_cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    # -- construction (Algorithm 3) -------------------------------------------------------------
    @classmethod
    def construct(cls, docs: Sequence[Document], labels: dict[str, tuple[list[str], str]], key: str = "") -> ContextGraph:
        """Algorithm 3 given the entity labels of every chunk id (``chunk id -> (entities, source)``)."""
        g = nx.Graph()
        chunks: dict[str, dict[str, str]] = {}
        for doc in docs:
            doc_entities: set[str] = set()  # P_e
            for i, text in enumerate(doc.chunks):
                cid = f"{doc.id}#{i}"
                chunks[cid] = {"doc": doc.id, "text": text}
                names, source = labels.get(cid, ([], "none"))
                keys = []
                for name in names:
                    k = entity_key(name)
                    if not k:
                        continue
                    if k not in g:
                        g.add_node(k, name=name.strip(), chunks=[], docs=[], source=source)
                    node = g.nodes[k]
                    if cid not in node["chunks"]:
                        node["chunks"].append(cid)
                    if doc.id not in node["docs"]:
                        node["docs"].append(doc.id)
                    keys.append(k)
                for a in keys:  # E[e] expanded with S_e: entities of the same chunk
                    for b in keys:
                        if a != b:
                            g.add_edge(a, b, relation="chunk")
                doc_entities.update(keys)
            for a in doc_entities:  # E[e] expanded with P_e: entities of the same document
                for b in doc_entities:
                    if a != b and not g.has_edge(a, b):
                        g.add_edge(a, b, relation="document")
        return cls(g, chunks, {d.id: d.title for d in docs}, key=key)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        data = {"format": GRAPH_FORMAT, "key": self.key, "docs": self.docs, "chunks": self.chunks,
                "graph": nx.node_link_data(self.g, edges="edges")}
        tmp = folder / "graph.json.tmp"
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        tmp.replace(folder / "graph.json")
        self.folder = folder

    @classmethod
    def load(cls, folder: Path) -> ContextGraph:
        data = json.loads((folder / "graph.json").read_text(encoding="utf-8"))
        g = nx.node_link_graph(data["graph"], edges="edges")
        return cls(g, data["chunks"], data["docs"], key=data.get("key", ""), folder=folder)

    # -- vector index (Chroma) ------------------------------------------------------------------
    def attach(self, client: Any, embed: Any, vectors: EmbeddingCache | None = None) -> None:
        """Bind the Chroma client, the embedding function and the content-keyed vector cache (index built by
        :meth:`index`)."""
        self._client, self._embed, self._vectors_cache = client, embed, vectors
        self._collections: dict[str, Any] = {}

    def _collection(self, kind: str) -> Any:
        if kind not in self._collections:  # opened once: each opening is a round trip to the Chroma store
            model = hashlib.sha256(embedder_label(self._embed).encode("utf-8")).hexdigest()[:8]
            name = f"ja-{self.key[:20] or 'graph'}-{model}-{kind}"  # vectors of another model never mix in
            self._collections[kind] = self._client.get_or_create_collection(
                name, embedding_function=self._embed, metadata={"hnsw:space": "cosine"})
        return self._collections[kind]

    @staticmethod
    def entity_id(key: str) -> str:
        return "e-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:20]

    def index(self, progress: Progress = _quiet) -> None:
        """Embed chunks and entity names into Chroma (idempotent: only missing ids are added).

        Each batch is embedded with one call on the list (texts already in the vector cache are looked up, not
        embedded again) and added with its vectors; the vectors stay in memory for path sampling. ``progress``
        hears ``("embedding chunks" | "embedding entities", batch size, ids missing)`` after each batch.
        """
        chunk_ids = list(self.chunks)
        self._add("chunks", chunk_ids, [self.chunks[c]["text"] for c in chunk_ids],
                  [{"doc": self.chunks[c]["doc"]} for c in chunk_ids], batch=CHUNK_BATCH, progress=progress)
        keys = list(self.g.nodes)
        self._add("entities", [self.entity_id(k) for k in keys], [self.g.nodes[k]["name"] for k in keys],
                  [{"key": k} for k in keys], batch=ENTITY_BATCH, progress=progress)

    def _add(self, kind: str, ids: list[str], texts: list[str], metadatas: list[dict[str, str]], batch: int,
             progress: Progress) -> None:
        collection = self._collection(kind)
        have = set(collection.get(include=[])["ids"])
        todo = [i for i, id_ in enumerate(ids) if id_ not in have]
        for start in range(0, len(todo), batch):
            part = todo[start:start + batch]
            docs = [texts[i] for i in part]
            vecs = (self._vectors_cache.embed(docs, self._embed) if self._vectors_cache is not None
                    else [np.asarray(v, dtype=np.float32) for v in self._embed(docs)])
            collection.add(ids=[ids[i] for i in part], embeddings=vecs, documents=docs,
                           metadatas=[metadatas[i] for i in part])
            with self._lock:
                self._vec_cache.update((f"{kind}:{ids[i]}", v) for i, v in zip(part, vecs))
            progress(f"embedding {kind}", len(part), len(todo))

    def _vectors(self, kind: str, ids: list[str]) -> dict[str, np.ndarray]:
        cache_key = kind + ":"
        missing = [i for i in ids if cache_key + i not in self._vec_cache]
        if missing:
            got = self._collection(kind).get(ids=missing, include=["embeddings"])
            with self._lock:
                for i, v in zip(got["ids"], got["embeddings"]):
                    self._vec_cache[cache_key + i] = np.asarray(v, dtype=np.float32)
        return {i: self._vec_cache[cache_key + i] for i in ids if cache_key + i in self._vec_cache}

    def embed_text(self, text: str) -> np.ndarray:
        key = "q:" + text
        if key not in self._vec_cache:
            vec = np.asarray(self._embed([text])[0], dtype=np.float32)
            with self._lock:
                self._vec_cache[key] = vec
        return self._vec_cache[key]

    @staticmethod
    def _rank(query: np.ndarray, vecs: dict[str, np.ndarray], k: int) -> list[str]:
        """Ids by cosine similarity to ``query`` (rounded to 6 places), ties broken by id (deterministic)."""
        if not vecs:
            return []
        ids = list(vecs)
        matrix = np.stack([vecs[i] for i in ids])
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
        sims = (matrix @ query) / np.where(norms == 0, 1.0, norms).astype(np.float32)
        return sorted(ids, key=lambda i, s=dict(zip(ids, sims.tolist())): (-round(s[i], 6), i))[:k]

    # -- lookups (also exposed as LangChain tools in tools/knowledge.py) ------------------------
    def entity_lookup(self, text: str, k: int = 5) -> list[dict[str, Any]]:
        """Graph entities most similar to ``text`` (exact key match first)."""
        if self.g.number_of_nodes() == 0:
            return []
        exact = entity_key(text)
        res = self._collection("entities").query(query_embeddings=[self.embed_text(text)],
                                                n_results=min(k, self.g.number_of_nodes()))
        keys = [m["key"] for m in res["metadatas"][0]]
        dists = res["distances"][0]
        out = [{"entity": key, "name": self.g.nodes[key]["name"], "similarity": round(1 - d, 4),
                "chunks": len(self.g.nodes[key]["chunks"]), "neighbours": self.g.degree[key]}
               for key, d in zip(keys, dists) if key in self.g]
        if exact in self.g and (not out or out[0]["entity"] != exact):
            out = [{"entity": exact, "name": self.g.nodes[exact]["name"], "similarity": 1.0,
                    "chunks": len(self.g.nodes[exact]["chunks"]), "neighbours": self.g.degree[exact]}] + \
                  [o for o in out if o["entity"] != exact][: k - 1]
        return out

    def most_similar_entity(self, text: str) -> str | None:
        """The graph entity closest to ``text``: its own node when ``text`` names one (what :meth:`entity_lookup`
        ranks first), found without embedding ``text``."""
        if entity_key(text) in self.g:
            return entity_key(text)
        found = self.entity_lookup(text, k=1)
        return found[0]["entity"] if found else None

    def nearest_neighbours(self, entity: str, k: int = 5, exclude: Iterable[str] = ()) -> list[str]:
        """The ``k`` neighbours of ``entity`` most similar to it, skipping ``exclude`` (Algorithm 4, line 13)."""
        skip = set(exclude)
        cands = [n for n in self.g.neighbors(entity) if n not in skip]
        if not cands:
            return []
        vecs = self._vectors("entities", [self.entity_id(c) for c in [entity, *cands]])
        me = vecs.get(self.entity_id(entity))
        if me is None:
            return sorted(cands)[:k]
        ranked = self._rank(me, {self.entity_id(c): vecs[self.entity_id(c)] for c in cands
                                 if self.entity_id(c) in vecs}, k)
        back = {self.entity_id(c): c for c in cands}
        return [back[i] for i in ranked]

    def nearest_chunks(self, entity: str, query: str, k: int = 5) -> list[str]:
        """The ``k`` chunks of ``entity`` most similar to ``query`` (Algorithm 4, line 15)."""
        ids = list(self.g.nodes[entity]["chunks"])
        vecs = self._vectors("chunks", ids)
        return self._rank(self.embed_text(query), vecs, k)

    def search_chunks(self, query: str, k: int = 5, entity: str | None = None) -> list[dict[str, Any]]:
        """Chunks most similar to ``query`` (optionally only chunks of ``entity``)."""
        if entity:
            key = entity if entity in self.g else self.most_similar_entity(entity)
            if key is None:
                return []
            ids = self.nearest_chunks(key, query, k)
            return [{"chunk": i, "doc": self.chunks[i]["doc"], "text": self.chunks[i]["text"]} for i in ids]
        n = min(k, len(self.chunks))
        if n == 0:
            return []
        res = self._collection("chunks").query(query_embeddings=[self.embed_text(query)], n_results=n)
        return [{"chunk": i, "doc": self.chunks[i]["doc"], "text": self.chunks[i]["text"],
                 "similarity": round(1 - d, 4)} for i, d in zip(res["ids"][0], res["distances"][0])]

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
        if self.g.number_of_nodes() == 0:
            raise ValueError("the context graph has no entities")
        seed_entity, question = seeds[rng.randrange(len(seeds))]
        current = self.most_similar_entity(seed_entity)
        assert current is not None
        visited = [current]
        first = rng.choice(sorted(self.g.nodes[current]["chunks"]))
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
        for _, d in self.g.nodes(data=True):
            sources[d.get("source", "?")] = sources.get(d.get("source", "?"), 0) + 1
        return {"documents": len(self.docs), "chunks": len(self.chunks), "entities": self.g.number_of_nodes(),
                "edges": self.g.number_of_edges(), "entity_sources": sources}


# -- build or open -----------------------------------------------------------------------------

_locks_guard = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}


def _build_lock(folder: Path) -> threading.Lock:
    """One lock per graph folder: a graph is built once, while other knowledge bases build beside it."""
    with _locks_guard:
        return _build_locks.setdefault(folder.resolve(), threading.Lock())


def graph_key(docs: Sequence[Document], extractor_label: str) -> str:
    return hashlib.sha256(f"{GRAPH_FORMAT}|{extractor_label}|{corpus_hash(docs)}".encode()).hexdigest()


def open_context_graph(docs: Sequence[Document], *, cache_dir: Path, extractor_label: str, extract: Extractor,
                       chroma: Callable[[Path], Any], embed: Any, log: Callable[[str], None] = lambda s: None,
                       progress: Progress | None = None) -> ContextGraph:
    """Load the graph of ``docs`` from the cache, or build it (Algorithm 3), persist and index it.

    Only chunks whose content hash is not in the entity cache reach ``extract``;
    an unchanged corpus makes no call at all (``log`` says it was a cache hit).
    ``progress`` hears the stages of a build: ``extraction`` (chunks labelled, which
    ``extract`` reports as it goes), ``embedding chunks`` (while the model labels) and
    ``embedding entities``.
    """
    progress = progress or _quiet
    key = graph_key(docs, extractor_label)
    folder = cache_dir / "judgeagent" / f"graph-{key[:24]}"
    vectors = EmbeddingCache(cache_dir / "judgeagent", embedder_label(embed))
    with _build_lock(folder):
        if (folder / "graph.json").exists():
            graph = ContextGraph.load(folder)
            log(f"context graph: cache hit, loaded from {folder} (no extraction call)")
            indexed = progress
        else:
            label_id = hashlib.sha256(extractor_label.encode()).hexdigest()[:8]  # the slug alone may be cut short
            cache = EntityCache(cache_dir / "judgeagent" / f"entities-{_slug(extractor_label)}-{label_id}.jsonl")
            all_chunks = [(f"{d.id}#{i}", t) for d in docs for i, t in enumerate(d.chunks)]
            todo_texts = list(dict.fromkeys(t for _, t in all_chunks if cache.get(t) is None))
            log(f"context graph: {len(all_chunks)} chunks, {len(todo_texts)} to label")
            # chunk texts do not depend on the entities: they are embedded while the model labels them, in the
            # batches index() uses, so index() finds their vectors cached
            texts = [t for _, t in all_chunks]

            def embed_chunks(batch: list[str]) -> None:
                progress("embedding chunks", 0, len(texts))  # a stopped build embeds no further batch
                vectors.embed(batch, embed)
                progress("embedding chunks", len(batch), len(texts))

            def indexed(stage: str, advance: int, total: int) -> None:
                if stage != "embedding chunks":  # counted above, as they were embedded
                    progress(stage, advance, total)

            if todo_texts:
                progress("extraction", 0, len(todo_texts))  # first: the chunks are labelled, then embedded
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-chunks")
            try:
                embedded = [pool.submit(embed_chunks, texts[i:i + CHUNK_BATCH])
                            for i in range(0, len(texts), CHUNK_BATCH)]
                if todo_texts:
                    results = extract(todo_texts)
                    for text, (entities, source) in zip(todo_texts, results):
                        cache.put(text, entities, source)
                for batch in embedded:
                    batch.result()
            finally:
                pool.shutdown(wait=False, cancel_futures=True)  # a failed or interrupted build stops embedding
            labels = {}
            for cid, text in all_chunks:
                rec = cache.get(text) or {"entities": [], "source": "none"}
                labels[cid] = (rec["entities"], rec["source"])
            graph = ContextGraph.construct(docs, labels, key=key)
            graph.save(folder)
        graph.attach(chroma(folder / "chroma"), embed, vectors)
        graph.index(indexed)
    return graph
