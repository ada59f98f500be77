"""The context graph stored by incidence (entity <-> chunk <-> document mentions) is Algorithm 3's graph (seed 000,
Appendix C): every entity's node and neighbourhood equal those of the materialized clique graph the store
replaced, seeded knowledge paths (Algorithm 4) equal the ones that code sampled, a grown knowledge base adds only
its new documents and equals a build from nothing, and a build killed at any stage resumes to the same graph."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dyneval.stores.context_graph import STORE_FILE, ContextGraph
from dyneval.stores.context_graph_build import open_context_graph
from dyneval.stores.incidence import Incidence, entity_key
from dyneval.stores.knowledge_base import Document
from dyneval.stores.vector_rows import VectorRows
from dyneval.stores.vectors import chroma_client
from tests.context_graph_kbs import KBS, PATHS_FIXTURE, extractor, knowledge_base, sample_all
from tests.fake_embedding import HashEmbedding

REPO = Path(__file__).resolve().parents[1]


def clique_graph(docs: list[Document], labels: dict[str, list[str]]) -> tuple[dict, dict]:
    """The reference: Algorithm 3 with ``E`` materialized, as the replaced code did (lines 8-22): nodes
    ``key -> (chunks, docs)`` and edges ``frozenset({a, b}) -> "chunk" | "document"``."""
    nodes: dict[str, tuple[list[str], list[str]]] = {}
    edges: dict[frozenset, str] = {}
    for doc in docs:
        p_e: set[str] = set()
        for i, text in enumerate(doc.chunks):
            cid = f"{doc.id}#{i}"
            s_e = [k for k in (entity_key(n) for n in labels[text]) if k]
            for k in s_e:
                chunks, in_docs = nodes.setdefault(k, ([], []))
                if cid not in chunks:
                    chunks.append(cid)
                if doc.id not in in_docs:
                    in_docs.append(doc.id)
            for a in s_e:  # line 16: E[e] expanded with S_e
                for b in s_e:
                    if a != b:
                        edges[frozenset((a, b))] = "chunk"
            p_e.update(s_e)  # line 18
        for a in p_e:  # lines 20-22: E[e] expanded with P_e
            for b in p_e:
                if a != b:
                    edges.setdefault(frozenset((a, b)), "document")
    return nodes, edges


def by_chunk_id(docs: list[Document], labels: dict[str, list[str]]) -> dict[str, tuple[list[str], str]]:
    return {f"{d.id}#{i}": (labels[t], "llm") for d in docs for i, t in enumerate(d.chunks)}


def build(docs: list[Document], labels: dict[str, list[str]], cache: Path, embed=None, extract=None, **kw):
    return open_context_graph(
        docs,
        cache_dir=cache,
        extractor_label="ref",
        extract=extract or extractor(labels),
        chroma=chroma_client,
        embed=embed or HashEmbedding(),
        **kw,
    )


def same_graph(a: ContextGraph, b: ContextGraph) -> None:
    assert a.keys == b.keys and dict(a.chunks) == dict(b.chunks) and a.docs == b.docs
    for key in a.keys:
        assert a.node(key) == b.node(key)
        assert a.neighbours(key) == b.neighbours(key)


@pytest.mark.parametrize("kb", list(KBS))
def test_every_neighbourhood_equals_the_materialized_clique_graphs(kb):
    docs, labels = KBS[kb]
    nodes, edges = clique_graph(docs, labels)
    graph = ContextGraph.construct(docs, by_chunk_id(docs, labels))
    assert set(graph.keys) == set(nodes)
    assert any(len(n[1]) > 1 for n in nodes.values()) or len(docs) == 1  # an entity in several documents
    for key, (chunks, in_docs) in nodes.items():
        assert graph.node(key)["chunks"] == chunks and graph.node(key)["docs"] == in_docs
        expected = {next(iter(e - {key})) for e in edges if key in e}
        assert graph.neighbours(key) == expected and graph.degree(key) == len(expected)
        for other in graph.keys:
            assert graph.relation(key, other) == edges.get(frozenset((key, other)))
    exported = graph.to_networkx()
    assert {frozenset(e): d["relation"] for *e, d in exported.edges(data=True)} == edges


def test_one_document_is_a_complete_graph_and_the_export_refuses_a_large_one():
    docs, labels = KBS["one document"]
    graph = ContextGraph.construct(docs, by_chunk_id(docs, labels))
    n = len(graph.keys)
    assert all(graph.degree(k) == n - 1 for k in graph.keys)
    with pytest.raises(ValueError, match="too large to export"):
        graph.to_networkx(max_edges=n)


@pytest.mark.parametrize("kb", list(KBS))
def test_seeded_paths_equal_the_materialized_graph_codes_built_and_reopened(kb, tmp_path):
    docs, labels = KBS[kb]
    recorded = json.loads(PATHS_FIXTURE.read_text())[kb]
    names = sorted({n for ns in labels.values() for n in ns})
    graph = build(docs, labels, tmp_path)
    assert len(graph.keys) == recorded["entities"]
    assert sample_all(graph, names) == recorded["paths"]
    embed = HashEmbedding()
    reopened = build(docs, labels, tmp_path, embed=embed)
    assert sample_all(reopened, names) == recorded["paths"]
    assert not set(embed.texts) & set(names)  # hops read stored entity rows, never embed a name again


def test_adding_documents_to_a_store_equals_storing_them_all_at_once():
    docs, labels = KBS["several documents"]
    grown = Incidence(None)
    both = Incidence(None)
    for doc in docs:
        both.add_document(doc.id, doc.title, doc.chunks, [(labels[t], "llm") for t in doc.chunks])
    for doc in docs[:3]:
        grown.add_document(doc.id, doc.title, doc.chunks, [(labels[t], "llm") for t in doc.chunks])
    for doc in docs[3:]:
        grown.add_document(doc.id, doc.title, doc.chunks, [(labels[t], "llm") for t in doc.chunks])
    for table in ("document", "chunk", "entity", "mention"):
        assert grown._query(f"SELECT * FROM {table} ORDER BY 1, 2") == both._query(
            f"SELECT * FROM {table} ORDER BY 1, 2"
        )


def test_a_grown_knowledge_base_adds_only_its_new_documents_and_equals_a_build_from_nothing(tmp_path):
    docs, labels = knowledge_base(7, 10, (2, 5), (1, 4))
    text = "Boats from Ivo Harbour reach the Voss Canal and the Kasimir Field fair in spring."
    docs.append(Document(id="new", title="new", chunks=[text]))
    labels[text] = ["Ivo Harbour", "Voss Canal", "Kasimir Field"]  # two new entities, one known
    base = build(docs[:6], labels, tmp_path / "cache")
    logs: list[str] = []
    asked: list[str] = []
    embed = HashEmbedding()
    added: list[str] = []
    original = Incidence.add_document

    def counting(self, name, *args):
        added.append(name)
        return original(self, name, *args)

    def extract(texts):
        asked.extend(texts)
        return extractor(labels)(texts)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Incidence, "add_document", counting)
        grown = build(docs, labels, tmp_path / "cache", embed=embed, extract=extract, log=logs.append)
    assert any("extending the graph in" in line for line in logs)
    assert added == [d.id for d in docs[6:]]  # the first six documents' mentions were copied, not linked again
    new_chunks = {t for d in docs[6:] for t in d.chunks}
    assert set(asked) == new_chunks - {t for d in docs[:6] for t in d.chunks}
    assert set(embed.texts) <= new_chunks | {grown.name(k) for k in grown.keys if k not in base}
    fresh = build(docs, labels, tmp_path / "fresh")
    same_graph(grown, fresh)
    names = sorted({n for ns in labels.values() for n in ns})
    assert sample_all(grown, names) == sample_all(fresh, names)
    assert {"ivo harbour", "kasimir field"} <= set(grown.keys) - set(base.keys)
    assert grown.neighbours("ivo harbour") >= {"voss canal", "kasimir field"}


def test_a_changed_early_document_is_not_grown_from_the_old_graph(tmp_path):
    docs, labels = knowledge_base(8, 5, (2, 3), (1, 3))
    build(docs, labels, tmp_path)
    changed = [Document(id=docs[0].id, title="renamed", chunks=docs[0].chunks), *docs[1:]]
    logs: list[str] = []
    graph = build(changed, labels, tmp_path, log=logs.append)
    assert not any("extending" in line for line in logs) and graph.docs[docs[0].id] == "renamed"


KILLED_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import dyneval.stores.context_graph as cg
    from dyneval.stores.context_graph_build import open_context_graph
    from dyneval.stores.vectors import chroma_client
    from tests.context_graph_kbs import extractor, knowledge_base
    from tests.fake_embedding import HashEmbedding

    cg.CHUNK_BATCH, cg.ENTITY_BATCH = 4, 4
    docs, labels = knowledge_base(9, 8, (2, 4), (1, 4))
    seen = {{}}

    def progress(stage, advance, total):
        seen[stage] = seen.get(stage, 0) + advance
        if stage == {stage!r} and seen[stage] >= {after}:
            Path({marker!r}).write_text("now")
            time.sleep(600)

    def extract(texts):  # as label_entities: progress after each call's labels, before the build caches them
        out = extractor(labels)(texts)
        progress("extraction", len(texts), 0)
        return out

    open_context_graph(docs, cache_dir=Path({cache!r}), extractor_label="ref", extract=extract,
                       chroma=chroma_client, embed=HashEmbedding(), progress=progress, label_slice=5)
""")


@pytest.mark.parametrize("stage,after", [("extraction", 7), ("linking documents", 3), ("embedding entities", 5)])
def test_a_build_killed_mid_stage_resumes_to_the_same_graph(tmp_path, stage, after):
    """SIGKILL while the stage is under way (a process that cannot clean up), then the same build again."""
    marker = tmp_path / "killed-here"
    script = KILLED_BUILD.format(
        repo=str(REPO), stage=stage, after=after, marker=str(marker), cache=str(tmp_path / "cache")
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        while not marker.exists():
            assert proc.poll() is None, "the build ended before the kill"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    docs, labels = knowledge_base(9, 8, (2, 4), (1, 4))
    [folder] = (tmp_path / "cache" / "judgeagent").glob("graph-*")
    before = Incidence(folder / STORE_FILE).document_names()
    rows_before = sum(VectorRows(v, "entities").count for v in folder.glob("vectors-*"))
    asked: list[str] = []

    def extract(texts):
        asked.extend(texts)
        return extractor(labels)(texts)

    resumed = build(docs, labels, tmp_path / "cache", extract=extract, label_slice=5)
    fresh = build(docs, labels, tmp_path / "fresh")
    if stage == "extraction":  # the slices labelled before the kill are cached: only the rest is asked for
        assert 0 < len(asked) < len({t for d in docs for t in d.chunks})
    else:
        assert asked == []
    if stage == "linking documents":
        assert 0 < len(before) < len(docs)
    if stage == "embedding entities":  # some entity rows were stored: the resumed build appended the others
        assert len(before) == len(docs) and 0 < rows_before < len(resumed.keys)
    same_graph(resumed, fresh)
    for kind in ("chunks", "entities"):
        assert np.array_equal(resumed._matrix(kind), fresh._matrix(kind))
    names = sorted({n for ns in labels.values() for n in ns})
    assert sample_all(resumed, names) == sample_all(fresh, names)


def test_a_vector_row_a_kill_cut_short_is_dropped_and_the_next_rows_line_up(tmp_path):
    rows = VectorRows(tmp_path, "entities")
    first = [np.arange(4, dtype=np.float32) + i for i in range(3)]
    rows.append(first)
    with rows.path.open("ab") as fh:
        fh.write(np.ones(4, dtype=np.float32).tobytes()[:6])  # the kill: 6 of a row's 16 bytes
    reopened = VectorRows(tmp_path, "entities")
    assert reopened.count == 3
    reopened.append([np.full(4, 9, dtype=np.float32)])
    assert np.array_equal(VectorRows(tmp_path, "entities").matrix(), np.stack([*first, np.full(4, 9)]))
