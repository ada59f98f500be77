"""LangChain tools over a JudgeAgent context graph (seed 000, Appendix C, Algorithm 4).

``knowledge_tools(graph)`` returns four tools an agent can call (or a user can ``.invoke``):

* ``entity_lookup(name, k)`` - graph entities most similar to a name;
* ``neighbour_search(entity, k, exclude)`` - the ``k`` graph neighbours most similar to an entity
  (Algorithm 4, line 13);
* ``sample_knowledge_path(seeds, hops, seed, k, random_chunks)`` - a knowledge path exactly as Algorithm 4,
  lines 8-19, reproducible for a given seed (random chunks for the "w/o context graph" ablation, or when
  there is no entity to start from);
* ``chunk_search(query, k, entity)`` - chunks most similar to a query, optionally among one entity's chunks
  (Algorithm 4, line 15).

The graph comes from :func:`stores.context_graph_build.open_context_graph` (or, inside a run,
:func:`nodes.judgeagent.knowledge.context_graph`). JudgeAgent's own ``sample_knowledge`` node samples its
paths through ``sample_knowledge_path``, so the tool a user hands to an agent is the one the protocol runs.
"""

from __future__ import annotations

import random
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from dyneval.state.judgeagent import MAX_HOPS, MAX_K
from dyneval.stores.context_graph import ContextGraph


class EntityLookupArgs(BaseModel):
    name: str = Field(description="entity name or phrase to look up")
    k: int = Field(5, ge=1, le=MAX_K, description="how many entities")


class NeighbourArgs(BaseModel):
    entity: str = Field(description="an entity (graph key or name; the most similar graph entity is used)")
    k: int = Field(5, ge=1, le=MAX_K)
    exclude: list[str] = Field(default_factory=list, description="entities already visited")


class PathSeed(BaseModel):
    entity: str = Field(description="an entity extracted from a question")
    question: str = Field(description="that question: the path's chunks stay relevant to it")


class PathArgs(BaseModel):
    seeds: list[PathSeed] = Field(description="entities extracted from the question(s), each with its question")
    hops: int = Field(3, ge=1, le=MAX_HOPS, description="H: chunks on the path")
    seed: int | str = Field(0, description="random seed (same seed, same path)")
    k: int = Field(5, ge=1, le=MAX_K, description="candidate set size per hop")
    random_chunks: bool = Field(False, description="ablation 'w/o context graph': H chunks drawn at random")


class ChunkSearchArgs(BaseModel):
    query: str
    k: int = Field(5, ge=1, le=MAX_K)
    entity: str | None = Field(None, description="only search the chunks of this entity")


def knowledge_tools(graph: ContextGraph) -> list[BaseTool]:
    def _key(name: str) -> str | None:
        return name if name in graph else graph.most_similar_entity(name)

    def entity_lookup(name: str, k: int = 5) -> list[dict[str, Any]]:
        return graph.entity_lookup(name, k)

    def neighbour_search(entity: str, k: int = 5, exclude: list[str] | None = None) -> list[dict[str, Any]]:
        key = _key(entity)
        if key is None:
            return []
        return [
            {"entity": n, "name": graph.name(n), "relation": graph.relation(key, n)}
            for n in graph.nearest_neighbours(key, k, exclude=[key, *(exclude or [])])
        ]

    def sample_knowledge_path(
        seeds: list[PathSeed], hops: int = 3, seed: int | str = 0, k: int = 5, random_chunks: bool = False
    ) -> dict[str, Any]:
        rng = random.Random(seed)
        if random_chunks:
            path = graph.random_path(hops, rng)
        elif not seeds or not graph.keys:
            path = {**graph.random_path(hops, rng), "mode": "random (no entities)"}
        else:
            path = graph.sample_path([(s.entity, s.question) for s in seeds], hops, rng, k=k)
        return {**path, "text": graph.path_text(path)}

    def chunk_search(query: str, k: int = 5, entity: str | None = None) -> list[dict[str, Any]]:
        return graph.search_chunks(query, k, entity=entity)

    return [
        StructuredTool.from_function(
            entity_lookup,
            name="entity_lookup",
            args_schema=EntityLookupArgs,
            description="Find context-graph entities similar to a name.",
        ),
        StructuredTool.from_function(
            neighbour_search,
            name="neighbour_search",
            args_schema=NeighbourArgs,
            description="The graph neighbours of an entity most similar to it.",
        ),
        StructuredTool.from_function(
            sample_knowledge_path,
            name="sample_knowledge_path",
            args_schema=PathArgs,
            description="Sample a knowledge path of H chunks (JudgeAgent Algorithm 4).",
        ),
        StructuredTool.from_function(
            chunk_search,
            name="chunk_search",
            args_schema=ChunkSearchArgs,
            description="Knowledge-base chunks most similar to a query.",
        ),
    ]
