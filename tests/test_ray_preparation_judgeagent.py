"""JudgeAgent's knowledge-base preparation (the context graph, seed 000 Algorithm 3) with ``--executor ray`` on a
real multi-node Ray cluster on this machine (``tests/ray_cluster.py``), a throw-away PostgreSQL, the stand-in
endpoint for the models and a loopback embeddings endpoint that notes which process sent each request.

What must hold: the build's extraction calls run on the worker processes (each logged in the driver's
``events.jsonl`` with the ``worker`` that made it, never the driver), so do its embedding batches (the endpoint
sees them from those processes), and the graph, its vectors and the run's records equal a thread-pool run's of
the same knowledge base against the same endpoints.

Fixtures reused from ``tests/test_ray_executor.py`` (imported, not moved): ``cluster`` (a head and two worker
nodes of one CPU) and ``standin`` (the counting stand-in), with its ``_run``, ``_records`` and ``_results``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tests.test_context_graph_spread as spread_tests
import tests.test_ray_executor as ray_tests
from dyneval.protocols.judgeagent import JudgeAgentProtocol
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.state.config import ModelSpec, RunConfig, StoreConfig
from dyneval.stores.context_graph import ContextGraph
from dyneval.stores.vector_rows import VectorRows
from tests.embedding_endpoint import EmbeddingEndpoint
from tests.test_context_graph_spread import write_kb
from tests.test_ray_executor import MODEL_CONCURRENCY, CountingStandIn, _records, _results, _run, _stable

cluster, standin = ray_tests.cluster, ray_tests.standin  # fixtures reused as they are
small_batches = spread_tests.small_batches  # embedding batches of 4 texts: several of each kind


def seeded_vectors(texts: list[str]) -> list[np.ndarray]:
    """Each text's own random vector (seeded by the text): no two entities are equally near a query, so the runs'
    knowledge paths cannot differ by how Chroma orders ties (a bag-of-words embedding's single words tie)."""
    return [
        np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:16], 16))
        .standard_normal(32)
        .astype(np.float32)
        for t in texts
    ]


@pytest.fixture(scope="module")
def embeddings_endpoint() -> Any:
    endpoint = EmbeddingEndpoint(seeded_vectors)
    yield endpoint
    endpoint.close()


def _config(standin: CountingStandIn, embedding_model: str, kb: Path, out: Path, dsn: str | None) -> RunConfig:
    models = {
        role: ModelSpec(model=role, base_url=standin.url, concurrency=MODEL_CONCURRENCY)
        for role in ("target", "evaluator")
    }
    return RunConfig(
        protocol="judgeagent",
        out=str(out),
        models=models,
        roles={r: r for r in models},
        concurrency=6,
        stores=StoreConfig(postgres_dsn=dsn, embedding_model=embedding_model),
        params={"kb": str(kb), "batch_size": 4},
    )


def _graph(run_dir: Path) -> tuple[ContextGraph, dict[str, np.ndarray]]:
    """The run's context graph (its folder named in ``kb_stats.json``) and its vector rows by kind."""
    folder = Path(json.loads((run_dir / "kb_stats.json").read_text())["folder"])
    [vectors] = folder.glob("vectors-*")
    return ContextGraph.open(folder), {kind: VectorRows(vectors, kind).matrix() for kind in ("chunks", "entities")}


def test_the_graph_build_runs_on_the_workers_and_equals_a_thread_pool_builds(
    cluster, standin, embeddings_endpoint, fresh_postgres_db, small_batches, tmp_path
):
    kb = write_kb(tmp_path / "kb", documents=8, paragraphs=4)
    standin.reset()
    embeddings_endpoint.requests.clear()
    threads_dir, threads_summary = _run(
        JudgeAgentProtocol(),
        _config(standin, embeddings_endpoint.model, kb, tmp_path / "threads", None),
        ExecutorChoice(),
    )
    threads_embedded = list(embeddings_endpoint.requests)
    standin.reset()
    embeddings_endpoint.requests.clear()
    config = _config(standin, embeddings_endpoint.model, kb, tmp_path / "ray", fresh_postgres_db("ray_prep_ja"))
    ray_dir, summary = _run(JudgeAgentProtocol(), config, ExecutorChoice("ray", cluster.address))
    ray_embedded = list(embeddings_endpoint.requests)

    # the extraction calls: every one made by a worker process, logged at the driver with its name
    events = [json.loads(line) for line in (ray_dir / "events.jsonl").read_text().splitlines()]
    extraction = [e for e in events if e.get("step") == "build_graph"]
    threads_extraction = [
        json.loads(line)
        for line in (threads_dir / "events.jsonl").read_text().splitlines()
        if json.loads(line).get("step") == "build_graph"
    ]
    assert len(extraction) == len(threads_extraction) == -(-32 // 5)  # 32 chunks, 5 per call
    workers = {e.get("worker") for e in extraction}
    assert None not in workers and len(workers) == 2, workers  # both worker nodes' processes took items
    worker_pids = {int(w.rsplit("-", 1)[1]) for w in workers}
    assert os.getpid() not in worker_pids

    # the embedding batches of the build (chunk texts, entity names): sent by those worker processes, the same
    # batches as the thread pool's; nothing is embedded at the driver, not even a unit's query (units run on them)
    graph, vectors = _graph(ray_dir)
    built = {graph.chunks[c]["text"] for c in graph.chunks} | {graph.name(k) for k in graph.keys}
    batches = sorted(texts for _, texts in ray_embedded if set(texts) <= built)
    assert len(batches) >= 32 // 4 + 2  # the chunks' batches of 4, and the entities'
    assert batches == sorted(texts for _, texts in threads_embedded if set(texts) <= built)
    assert {pid for pid, _ in ray_embedded} <= worker_pids
    assert {pid for pid, _ in threads_embedded} == {os.getpid()}

    # the same graph, vectors and records as the thread pool's
    threads_graph, threads_vectors = _graph(threads_dir)
    assert graph.keys == threads_graph.keys and len(graph.keys) > 10
    for key in graph.keys:
        assert graph.node(key) == threads_graph.node(key)
        assert graph.neighbours(key) == threads_graph.neighbours(key)
    for kind in ("chunks", "entities"):
        assert np.array_equal(vectors[kind], threads_vectors[kind])
    records = _records(ray_dir)
    assert [r["status"] for r in records] == ["ok"] * 4
    assert _results(records) == _results(_records(threads_dir))
    assert _stable(summary["metrics"]) == _stable(threads_summary["metrics"])
