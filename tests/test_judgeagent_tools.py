"""The LangChain knowledge tools (tools/knowledge.py) over a context graph built from a tiny corpus."""

from __future__ import annotations

import pytest

from dyneval.stores.context_graph_build import open_context_graph
from dyneval.stores.knowledge_base import load_knowledge_base
from dyneval.tools.knowledge import knowledge_tools
from tests.conftest import make_services
from tests.test_judgeagent_support import CAPITALISED, write_kb


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools")
    graph = _tiny_graph(tmp, make_services(tmp))
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
    assert all(f["entity"] in graph.neighbours("mira stolt") for f in found)
    assert {f["relation"] for f in found} <= {"chunk", "document"}


def test_path_tool_is_reproducible_and_chunk_search_filters_by_entity(tools):
    by_name, graph = tools
    args = {"seeds": [{"entity": "Harl", "question": "Where does timber go?"}], "hops": 2, "seed": 3}
    a = by_name["sample_knowledge_path"].invoke(args)
    assert a == by_name["sample_knowledge_path"].invoke(args)
    assert a["entities"][0] == "harl" and a["text"]
    hits = by_name["chunk_search"].invoke({"query": "herons feeding", "k": 1})
    assert "Herons" in hits[0]["text"]
    own = by_name["chunk_search"].invoke({"query": "timber", "k": 5, "entity": "Spartina"})
    assert [h["chunk"] for h in own] == graph.node("spartina")["chunks"]


def test_path_tool_falls_back_to_random_chunks_without_entities_and_for_the_ablation(tools):
    by_name, graph = tools
    none = by_name["sample_knowledge_path"].invoke({"seeds": [], "hops": 2, "seed": "s"})
    assert none["mode"] == "random (no entities)" and len(none["chunks"]) == 2 and none["text"]
    ablation = by_name["sample_knowledge_path"].invoke(
        {
            "seeds": [{"entity": "Harl", "question": "Where does timber go?"}],
            "hops": 2,
            "seed": "s",
            "random_chunks": True,
        }
    )
    assert ablation["mode"] == "random" and ablation["entities"] == [] and ablation["chunks"] == none["chunks"]


def test_the_judgeagent_node_samples_its_path_through_the_agents_tool(monkeypatch, tmp_path):
    """The protocol runs the very tool a user hands to an agent, with the node's per-round seed."""
    import dyneval.nodes.judgeagent.knowledge as knowledge
    from dyneval.tools.knowledge import knowledge_tools as real_tools

    calls = []

    def spying_tools(graph):
        tools = real_tools(graph)
        path_tool = next(t for t in tools if t.name == "sample_knowledge_path")
        original = path_tool.func
        path_tool.func = lambda **kw: calls.append(kw) or original(**kw)
        return tools

    monkeypatch.setattr(knowledge, "knowledge_tools", spying_tools)
    svc = make_services(tmp_path)
    monkeypatch.setattr(knowledge, "context_graph", lambda s, c: _tiny_graph(tmp_path, s))

    class Ctx:
        kb, seed, hops, top_k, no_context_graph, services = None, 7, 2, 3, False, svc

    class Rt:
        context = Ctx()

    monkeypatch.setattr(knowledge, "services_of", lambda ctx: svc)
    state = {
        "question_entities": [{"entity": "Harl", "question": "Where does timber go?", "source": "llm"}],
        "rounds": [{}],
    }
    out = knowledge.sample_knowledge(state, Rt())
    assert len(calls) == 1 and calls[0]["seed"].startswith("7:") and calls[0]["seed"].endswith(":path:2")
    assert out["path"]["entities"][0] == "harl" and out["path"]["text"]


def _tiny_graph(tmp, svc):
    return open_context_graph(
        load_knowledge_base(write_kb(tmp / "kb")),
        cache_dir=tmp / "cache",
        extractor_label="caps",
        extract=lambda texts: [
            ([e for e in CAPITALISED.findall(t) if e not in {"The", "It", "Barges"}], "llm") for t in texts
        ],
        chroma=svc.chroma,
        embed=svc.embeddings(),
    )
