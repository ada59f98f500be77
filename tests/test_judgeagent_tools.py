"""The LangChain knowledge tools (tools/knowledge.py) over a context graph built from a tiny corpus."""

from __future__ import annotations

import pytest

from stores.context_graph import load_knowledge_base, open_context_graph
from tests.conftest import make_services
from tests.test_judgeagent_support import CAPITALISED, write_kb
from tools.knowledge import knowledge_tools


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools")
    svc = make_services(tmp)
    graph = open_context_graph(
        load_knowledge_base(write_kb(tmp / "kb")), cache_dir=tmp / "cache", extractor_label="caps",
        extract=lambda texts: [([e for e in CAPITALISED.findall(t) if e not in {"The", "It", "Barges"}], "llm")
                               for t in texts],
        chroma=svc.chroma, embed=svc.embeddings())
    return {t.name: t for t in knowledge_tools(graph)}, graph


def test_tools_are_named_and_typed_for_agents(tools):
    by_name, _ = tools
    assert sorted(by_name) == ["chunk_search", "entity_lookup", "neighbour_search", "sample_knowledge_path"]
    assert "hops" in by_name["sample_knowledge_path"].args


def test_entity_lookup_finds_the_graph_entity(tools):
    by_name, _ = tools
    found = by_name["entity_lookup"].invoke({"name": "the voss canal", "k": 3})
    assert found[0]["entity"] == "voss canal" and found[0]["similarity"] > 0.9


def test_neighbour_search_returns_graph_neighbours_only(tools):
    by_name, graph = tools
    found = by_name["neighbour_search"].invoke({"entity": "Mira Stolt", "k": 5})
    assert 0 < len(found) <= 5
    assert all(graph.g.has_edge("mira stolt", f["entity"]) for f in found)
    assert {f["relation"] for f in found} <= {"chunk", "document"}


def test_path_tool_is_reproducible_and_chunk_search_filters_by_entity(tools):
    by_name, graph = tools
    args = {"entities": ["Harl"], "question": "Where does timber go?", "hops": 2, "seed": 3}
    a = by_name["sample_knowledge_path"].invoke(args)
    assert a == by_name["sample_knowledge_path"].invoke(args)
    assert a["entities"][0] == "harl" and a["text"]
    hits = by_name["chunk_search"].invoke({"query": "herons feeding", "k": 1})
    assert "Herons" in hits[0]["text"]
    own = by_name["chunk_search"].invoke({"query": "timber", "k": 5, "entity": "Spartina"})
    assert [h["chunk"] for h in own] == graph.g.nodes["spartina"]["chunks"]
