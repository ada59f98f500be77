"""The context graph builds and samples fast without changing a result: embeddings in batches, a changed
knowledge base embeds only its new texts, path sampling never embeds a known entity, two knowledge bases build
side by side, and the vectorised ranking orders exactly as the per-vector formula it replaced."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from dyneval.stores.context_graph import ContextGraph, top_k
from dyneval.stores.context_graph_build import open_context_graph
from dyneval.stores.knowledge_base import Document
from dyneval.stores.vectors import chroma_client
from tests.fake_embedding import HashEmbedding

WORDS = (
    "harbor canal river bridge tower market guild council lantern mill quarry orchard ferry beacon "
    "archive garden foundry chapel granary tannery"
).split()


def corpus(n_docs: int, seed: int = 0) -> list[Document]:
    """Documents whose chunks name capitalised places (the fake extractor's entities)."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        chunks = []
        for c in range(3):
            names = [f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()}" for _ in range(3)]
            chunks.append(f"In document {d} part {c} the {names[0]} meets the {names[1]} near the {names[2]}.")
        docs.append(Document(id=f"doc{d}", title=f"doc {d}", chunks=chunks))
    return docs


def extract(texts: list[str]) -> list[tuple[list[str], str]]:
    import re

    return [(list(dict.fromkeys(re.findall(r"[A-Z][a-z]+ [A-Z][a-z]+", t))), "keyword") for t in texts]


def build(docs: list[Document], cache: Path, embed: HashEmbedding, extractor=extract) -> ContextGraph:
    return open_context_graph(
        docs, cache_dir=cache, extractor_label="fake", extract=extractor, chroma=lambda p: chroma_client(p), embed=embed
    )


def paths(graph: ContextGraph, n: int = 25) -> list[dict]:
    names = sorted(graph.keys)
    out = []
    for i in range(n):
        rng = random.Random(i)
        seeds = [(names[rng.randrange(len(names))].title(), f"Where is the {rng.choice(WORDS)}?")]
        out.append(graph.sample_path(seeds, 3, rng))
    return out


def test_a_build_embeds_in_batches_and_once_per_text(tmp_path):
    embed = HashEmbedding()
    graph = build(corpus(40), tmp_path, embed)
    texts = len(graph.chunks) + len(graph.keys)
    assert len(embed.texts) == len(set(embed.texts)) <= texts
    assert len(embed.calls) <= -(-len(graph.chunks) // 64) + -(-len(graph.keys) // 128)


def test_a_changed_knowledge_base_embeds_only_its_new_texts(tmp_path):
    docs = corpus(30)
    build(docs, tmp_path, HashEmbedding())
    embed = HashEmbedding()
    grown = build(
        [
            *docs,
            Document(
                id="new",
                title="new",
                chunks=["Boats pass Zephyr Lighthouse and Amber Quay daily since the flood of the old town."],
            ),
        ],
        tmp_path,
        embed,
    )
    assert set(embed.texts) == {grown.chunks["new#0"]["text"], "Zephyr Lighthouse", "Amber Quay"}


def test_path_sampling_embeds_no_known_entity_and_matches_a_reloaded_graph(tmp_path):
    embed = HashEmbedding()
    graph = build(corpus(40), tmp_path, embed)
    embed.texts.clear()
    fresh = paths(graph)
    assert set(embed.texts) <= {f"Where is the {w}?" for w in WORDS}  # questions only, never an entity name
    # the same graph reopened (vectors read back from Chroma instead of kept from the build) samples the same
    reopened = build(corpus(40), tmp_path / "copy", HashEmbedding())
    assert paths(reopened) == fresh
    reloaded_embed = HashEmbedding()
    assert paths(build(corpus(40), tmp_path, reloaded_embed)) == fresh
    assert set(reloaded_embed.texts) <= {f"Where is the {w}?" for w in WORDS}


def test_two_knowledge_bases_build_side_by_side(tmp_path):
    """The build lock is per graph: KB b's extraction runs while KB a's is still waiting (one lock for the
    whole module would deadlock here, caught by the timeout)."""
    b_started = threading.Event()

    def slow_extract(texts):
        assert b_started.wait(30), "the second knowledge base never started building"
        return extract(texts)

    def quick_extract(texts):
        b_started.set()
        return extract(texts)

    results: dict[str, ContextGraph] = {}
    a = threading.Thread(
        target=lambda: results.setdefault("a", build(corpus(5, 1), tmp_path, HashEmbedding(), slow_extract))
    )
    a.start()
    results["b"] = build(corpus(5, 2), tmp_path, HashEmbedding(), quick_extract)
    a.join(60)
    assert set(results) == {"a", "b"}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [5, 50])
def test_vectorised_ranking_orders_as_the_per_vector_cosine(seed, k):
    """Integer coordinates give many equal similarities: the order among them is the ids' order."""
    rng = np.random.default_rng(seed)
    vecs = {f"id{i:03d}": rng.integers(0, 4, 16).astype(np.float32) for i in range(300)}
    vecs["zero"] = np.zeros(16, dtype=np.float32)
    query = rng.integers(0, 4, 16).astype(np.float32)

    def sim(v):
        return float(np.dot(query, v) / ((np.linalg.norm(query) * np.linalg.norm(v)) or 1.0))

    expected = [i for i, _ in sorted(vecs.items(), key=lambda kv: (-round(sim(kv[1]), 6), kv[0]))[:k]]
    ids = list(vecs)
    rng.shuffle(ids)
    assert [ids[r] for r in top_k(query, np.stack([vecs[i] for i in ids]), lambda r: ids[r], k)] == expected


def test_chunks_are_embedded_while_the_entities_are_extracted(tmp_path):
    """Extraction here waits until a chunk has been embedded: with embedding only after extraction (as before)
    the build would never finish (caught by the timeout); the vectors are the same as a build without overlap."""
    embed = HashEmbedding()
    chunk_embedded = threading.Event()

    class Watching(HashEmbedding):
        def __call__(self, input):
            chunk_embedded.set()
            return embed(input)

    def waiting_extract(texts):
        assert chunk_embedded.wait(30), "no chunk was embedded while the entities were being extracted"
        return extract(texts)

    overlapped = build(corpus(12), tmp_path / "a", Watching(), waiting_extract)
    sequential = build(corpus(12), tmp_path / "b", HashEmbedding())
    assert paths(overlapped) == paths(sequential)
