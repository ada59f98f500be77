"""Building or opening the JudgeAgent context graph of a knowledge base (seed 000, Appendix C, Algorithm 3).

* **Build** (Algorithm 3): entities are extracted per chunk (the caller's ``extract`` function labels many chunks
  per call, Table 11), the chunk texts embedded meanwhile, then each document's chunks and entity mentions are added
  to the graph's incidence store (:class:`stores.context_graph.ContextGraph` reads it).
* **Persistence**: ``<cache>/judgeagent/graph-<key>/incidence.sqlite`` (documents, chunk texts, entities,
  mentions) with the graph's vectors beside it (:mod:`stores.context_graph`). ``key`` hashes the corpus and the
  extraction model, so reopening an unchanged corpus loads the graph and makes no LLM call. A corpus that extends a
  built one (its documents first, then new ones) starts from a copy of that graph's store and vectors and adds only
  the new documents' mentions. A build adds one document per transaction, so a killed build resumes with the next
  document. Vectors are also cached by text content per embedding model (:mod:`stores.embedding_cache`), so a
  changed corpus embeds only its new texts, in batches; entity labels are cached per chunk content hash
  (:mod:`stores.entity_cache`), so a changed corpus only sends its new chunks to the model.
* **Spread builds**: given a ``spread`` (:data:`~stores.context_graph.BuildMap`, the run's workers on a Ray
  cluster), the extraction calls and the embedding batches of a build go out as items and come back in any order;
  the labels and vectors are kept in the caches here, by the caller, as each item comes back, so the graph, the
  caches and the vector rows are those of a build in this process.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dyneval.stores import context_graph
from dyneval.stores.context_graph import STORE_FILE, BuildMap, ContextGraph, Progress, no_progress
from dyneval.stores.embedding_cache import EmbeddingCache, embedder_label
from dyneval.stores.entity_cache import EntityCache
from dyneval.stores.incidence import Incidence, document_hash
from dyneval.stores.knowledge_base import Document

GRAPH_FORMAT = 2  # 2: incidence store (1: networkx graph.json)
#: Texts labelled per ``extract`` call of a build when the caller gives no size: labels are cached after each.
LABEL_SLICE = 400

#: ``extract(texts) -> [(entities, source), ...]`` one entry per text, in order.
Extractor = Callable[[list[str]], list[tuple[list[str], str]]]


_locks_guard = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}


def _build_lock(folder: Path) -> threading.Lock:
    """One lock per graph folder: a graph is built once, while other knowledge bases build beside it."""
    with _locks_guard:
        return _build_locks.setdefault(folder.resolve(), threading.Lock())


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(json.dumps([d.id, d.title, d.chunks], ensure_ascii=False).encode())
    return h.hexdigest()


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
        if (
            0 < len(stored) < len(hashes)
            and stored == hashes[: len(stored)]
            and (best is None or len(stored) > best[0])
        ):
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


def open_context_graph(
    docs: Sequence[Document],
    *,
    cache_dir: Path,
    extractor_label: str,
    extract: Extractor,
    chroma: Callable[[Path], Any],
    embed: Any,
    log: Callable[[str], None] = lambda s: None,
    progress: Progress | None = None,
    label_slice: int = LABEL_SLICE,
    spread: BuildMap | None = None,
) -> ContextGraph:
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
    progress = progress or no_progress
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
            _link(
                store,
                todo,
                sum(len(d.chunks) for d in docs),
                cache_dir,
                extractor_label,
                extract,
                embed,
                vectors,
                log,
                progress,
                label_slice,
                spread,
            )
            store.set_meta("complete", key)

        def indexed(stage: str, advance: int, total: int) -> None:
            if not built or stage != "embedding chunks":  # a build counted them while the model labelled
                progress(stage, advance, total)

        graph = ContextGraph(store, key=key, folder=folder)
        graph.attach(lambda: chroma(folder / "chroma"), embed, vectors, spread)
        graph.index(indexed)
    return graph


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60] or "model"


def _link(
    store: Incidence,
    todo: Sequence[Document],
    n_chunks: int,
    cache_dir: Path,
    extractor_label: str,
    extract: Extractor,
    embed: Any,
    vectors: EmbeddingCache,
    log: Callable[[str], None],
    progress: Progress,
    label_slice: int,
    spread: BuildMap | None,
) -> None:
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


def _label_and_embed_here(
    texts: list[str],
    todo_texts: list[str],
    cache: EntityCache,
    extract: Extractor,
    embed: Any,
    vectors: EmbeddingCache,
    progress: Progress,
    label_slice: int,
) -> None:
    """``extract`` over ``todo_texts``, ``label_slice`` texts per call, each call's labels cached before the next;
    ``texts`` embedded meanwhile on one thread, a batch at a time (a stopped or failed build embeds no further)."""

    def embed_chunks(batch: list[str]) -> None:
        progress("embedding chunks", 0, len(texts))  # a stopped build embeds no further batch
        vectors.embed(batch, embed)
        progress("embedding chunks", len(batch), len(texts))

    size = context_graph.CHUNK_BATCH  # the batches ContextGraph.index embeds (read here: one setting for both)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-chunks")
    try:
        embedded = [pool.submit(embed_chunks, texts[i : i + size]) for i in range(0, len(texts), size)]
        for start in range(0, len(todo_texts), max(1, label_slice)):
            part = todo_texts[start : start + max(1, label_slice)]
            for text, (entities, source) in zip(part, extract(part)):
                cache.put(text, entities, source)
        for batch in embedded:
            batch.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a failed or interrupted build stops embedding


def _label_and_embed_spread(
    texts: list[str],
    todo_texts: list[str],
    cache: EntityCache,
    vectors: EmbeddingCache,
    progress: Progress,
    label_slice: int,
    spread: BuildMap,
) -> None:
    """One ``spread`` over every ``label_slice`` texts of ``todo_texts`` (one extraction call each) and every chunk
    batch's texts the vector cache lacks (the calls :func:`_label_and_embed_here` makes); each item's labels or
    vectors are cached here as it comes back, in whatever order, then counted."""
    step = max(1, label_slice)
    size = context_graph.CHUNK_BATCH  # as _label_and_embed_here
    batches = [texts[i : i + size] for i in range(0, len(texts), size)]
    parts = vectors.to_embed(batches)
    items = [("label", todo_texts[i : i + step]) for i in range(0, len(todo_texts), step)]
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
