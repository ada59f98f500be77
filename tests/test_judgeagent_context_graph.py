"""Context graph (seed 000, Appendix C / Algorithm 3) and knowledge-path sampling (Algorithm 4)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dyneval.stores.context_graph import ContextGraph
from dyneval.stores.context_graph_build import open_context_graph
from dyneval.stores.incidence import entity_key
from dyneval.stores.knowledge_base import Document, load_knowledge_base, split_paragraphs
from tests.conftest import make_services
from tests.test_judgeagent_support import write_kb

DOCS = [
    Document(id="d1", title="one", chunks=["c-a", "c-b"]),
    Document(id="d2", title="two", chunks=["c-c"]),
]
LABELS = {
    "d1#0": (["Alpha", "Beta"], "llm"),
    "d1#1": (["Gamma", "alpha"], "llm"),  # "alpha" is the same node as "Alpha"
    "d2#0": (["Gamma", "Delta"], "keyword"),
}


def test_algorithm3_nodes_hold_their_chunks_and_documents():
    g = ContextGraph.construct(DOCS, LABELS)
    assert sorted(g.keys) == ["alpha", "beta", "delta", "gamma"]
    assert g.node("alpha")["chunks"] == ["d1#0", "d1#1"] and g.node("alpha")["docs"] == ["d1"]
    assert g.node("gamma")["chunks"] == ["d1#1", "d2#0"] and g.node("gamma")["docs"] == ["d1", "d2"]
    assert g.node("delta")["source"] == "keyword" and g.node("alpha")["name"] == "Alpha"
    assert g.chunks["d2#0"] == {"doc": "d2", "text": "c-c"}


def test_algorithm3_links_entities_sharing_a_chunk_or_a_document():
    g = ContextGraph.construct(DOCS, LABELS)
    edges = {tuple(sorted(e)): d["relation"] for *e, d in g.to_networkx().edges(data=True)}
    assert edges == {
        ("alpha", "beta"): "chunk",  # same chunk d1#0
        ("alpha", "gamma"): "chunk",  # same chunk d1#1
        ("beta", "gamma"): "document",  # only the same document d1
        ("delta", "gamma"): "chunk",  # same chunk d2#0
    }
    assert g.relation("beta", "delta") is None and "delta" not in g.neighbours("beta")  # no shared document
    assert g.neighbours("gamma") == {"alpha", "beta", "delta"} and g.relation("gamma", "beta") == "document"


def test_a_stored_graph_reopens_with_the_same_nodes_neighbours_and_chunks(tmp_path):
    g = ContextGraph.construct(DOCS, LABELS, key="k", folder=tmp_path)
    h = ContextGraph.open(tmp_path)
    assert h.keys == g.keys and all(h.neighbours(k) == g.neighbours(k) for k in g.keys)
    assert dict(h.chunks) == dict(g.chunks) and h.key == "k" and h.docs == {"d1": "one", "d2": "two"}
    assert h.node("gamma")["chunks"] == ["d1#1", "d2#0"]


def test_paragraph_chunks_merge_short_paragraphs_and_split_long_ones():
    text = "# Title\n\nShort one.\n\n" + "A" * 150 + ".\n\n" + ("Long sentence here. " * 100)
    chunks = split_paragraphs(text, min_chars=100, max_chars=500)
    assert chunks[0].startswith("Short one. AAAA")  # merged up to the minimum size
    assert all(len(c) <= 500 for c in chunks) and len(chunks) > 3
    assert "Title" not in " ".join(chunks)


def test_knowledge_base_loads_folders_and_jsonl(tmp_path):
    folder = write_kb(tmp_path / "kb")
    docs = load_knowledge_base(folder)
    assert [d.id for d in docs] == ["canal.md", "marsh.md"] and docs[0].title == "Voss Canal"
    jsonl = tmp_path / "kb.jsonl"
    jsonl.write_text('{"id": "x", "title": "X", "text": "First para.\\n\\nSecond para."}\n')
    assert load_knowledge_base(jsonl)[0].chunks == ["First para. Second para."]


# -- Algorithm 4 on a graph with real embeddings -----------------------------------------------------

TOPICS = ["volcano", "glacier", "river", "desert", "forest", "ocean", "mountain", "canyon"]


def _rich_graph(tmp_path):
    """8 entities in one document (all neighbours), 6 chunks each, indexed in Chroma."""
    chunks = [
        f"The {t} number {i} has its own story about {TOPICS[(i + 3) % 8]} and weather."
        for t in TOPICS
        for i in range(6)
    ]
    docs = [Document(id="doc", title="places", chunks=chunks)]
    labels = {f"doc#{j}": ([TOPICS[j // 6]], "llm") for j in range(len(chunks))}
    g = ContextGraph.construct(docs, labels, key="rich-graph-test")
    svc = make_services(tmp_path)
    g.attach(lambda: svc.chroma(tmp_path / "chroma"), svc.embeddings())
    g.index()
    return g, svc


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    return _rich_graph(tmp_path_factory.mktemp("rich"))


def _sim(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_path_respects_hops_and_never_revisits(rich):
    g, _ = rich
    for seed in range(5):
        path = g.sample_path([("volcanoes", "What erupts from a volcano?")], hops=4, rng=random.Random(seed))
        assert len(path["entities"]) == 4 == len(path["chunks"]) and not path["truncated"]
        assert len(set(path["entities"])) == 4
        assert path["entities"][0] == "volcano"  # most similar graph entity to the question entity
        for ent, chunk in zip(path["entities"], path["chunks"]):
            assert chunk in g.node(ent)["chunks"]


def test_path_candidates_are_the_top5_unvisited_neighbours_and_chunks(rich):
    g, svc = rich
    embed = svc.embeddings()
    question = "Which river floods the canyon in spring?"
    path = g.sample_path([("river", question)], hops=3, rng=random.Random(7))
    qv = embed([question])[0]
    visited = [path["steps"][0]["entity"]]
    for step in path["steps"][1:]:
        prev = visited[-1]
        others = [n for n in g.neighbours(prev) if n not in visited]
        vecs = dict(zip(others, embed([g.name(n) for n in others])))
        me = embed([g.name(prev)])[0]
        expected = sorted(others, key=lambda n: -_sim(me, vecs[n]))[:5]
        assert step["entity_candidates"] == expected
        assert step["entity"] in expected
        own = g.node(step["entity"])["chunks"]
        cvecs = dict(zip(own, embed([g.chunks[c]["text"] for c in own])))
        expected_chunks = sorted(own, key=lambda c: -_sim(qv, cvecs[c]))[:5]
        assert len(own) == 6 and step["chunk_candidates"] == expected_chunks
        assert step["chunk"] in expected_chunks
        visited.append(step["entity"])


def test_path_is_reproducible_with_a_seed_and_varies_across_seeds(rich):
    g, _ = rich
    seeds = [("ocean", "q1"), ("forest", "q2"), ("desert", "q3")]
    a = g.sample_path(seeds, 3, random.Random(11))
    b = g.sample_path(seeds, 3, random.Random(11))
    assert a == b
    paths = {tuple(g.sample_path(seeds, 3, random.Random(s))["chunks"]) for s in range(8)}
    assert len(paths) > 1


def test_path_stops_when_no_unvisited_neighbour_is_left(tmp_path):
    g = ContextGraph.construct(DOCS, LABELS, key="small-graph-test")
    svc = make_services(tmp_path)
    g.attach(lambda: svc.chroma(tmp_path / "chroma"), svc.embeddings())
    g.index()
    path = g.sample_path([("Delta", "q")], hops=6, rng=random.Random(0))
    assert path["truncated"] and len(path["entities"]) == len(set(path["entities"])) <= 4


def test_random_path_ablation_draws_distinct_chunks(rich):
    g, _ = rich
    path = g.random_path(3, random.Random(1))
    assert path["mode"] == "random" and len(set(path["chunks"])) == 3


# -- build cache ------------------------------------------------------------------------------


def test_rebuild_on_unchanged_corpus_makes_no_extraction_call_and_changes_are_incremental(tmp_path):
    folder = write_kb(tmp_path / "kb")
    svc = make_services(tmp_path)
    calls: list[list[str]] = []

    def extract(texts):
        calls.append(list(texts))
        return [([w for w in t.split() if w[:1].isupper()][:4], "llm") for t in texts]

    def build():
        return open_context_graph(
            load_knowledge_base(folder),
            cache_dir=tmp_path / "cache",
            extractor_label="m",
            extract=extract,
            chroma=svc.chroma,
            embed=svc.embeddings(),
        )

    first = build()
    assert len(calls) == 1 and len(calls[0]) == len(first.chunks)
    second = build()
    assert len(calls) == 1  # unchanged corpus: loaded, no call
    assert second.keys == first.keys and all(second.neighbours(k) == first.neighbours(k) for k in first.keys)
    (folder / "new.md").write_text("# New\n\nThe Harl Lighthouse was rebuilt by Ada Quill in 1902.")
    third = build()
    assert len(calls) == 2 and calls[1] == ["The Harl Lighthouse was rebuilt by Ada Quill in 1902."]
    assert "ada" in third and entity_key("Harl") in third


def test_a_label_appended_after_a_line_a_kill_cut_is_kept(tmp_path):
    """A killed build can leave a torn last line in the entity cache; the next label must not be glued to it."""
    from dyneval.stores.entity_cache import EntityCache

    path = tmp_path / "entities.jsonl"
    EntityCache(path).put("first chunk", ["Harl"], "llm")
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"h": "torn", "entit')  # the kill
    EntityCache(path).put("second chunk", ["Orden"], "llm")
    reopened = EntityCache(path)
    assert reopened.get("first chunk")["entities"] == ["Harl"]
    assert reopened.get("second chunk")["entities"] == ["Orden"]


def test_the_graph_cache_key_ignores_the_evaluators_url_but_not_its_model_or_settings(tmp_path):
    """The same evaluator behind another port finds the cached graph (no re-extraction); another model, another
    temperature or another extraction batch builds its own."""
    from dyneval.nodes.judgeagent.knowledge import extractor_key
    from dyneval.runtime.events import EventLog
    from dyneval.runtime.services import Services
    from dyneval.state.config import ModelSpec, RunConfig
    from dyneval.state.judgeagent import JudgeAgentContext

    def key(url: str = "http://127.0.0.1:8000/v1", model: str = "qwen", batch: int = 5, **settings) -> str:
        config = RunConfig(
            protocol="judgeagent",
            out=str(tmp_path),
            roles={"evaluator": "e"},
            models={"e": ModelSpec(model=model, base_url=url, **settings)},
        )
        svc = Services(config=config, run_dir=tmp_path, events=EventLog(tmp_path / "events.jsonl"))
        return extractor_key(svc, JudgeAgentContext(extract_batch=batch))

    assert key() == key(url="http://127.0.0.1:9001/v1") == key(url="https://gpu-box.example/v1")
    assert len({key(), key(model="llama"), key(temperature=0.7), key(max_tokens=99), key(batch=8)}) == 5
