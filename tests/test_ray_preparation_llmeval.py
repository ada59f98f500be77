"""llmeval's bank import with ``--executor ray``: the embeddings of the near-duplicate check and the teacher's
``--rewrite`` calls are made on the run's worker processes (``services.spread``), and the bank equals a thread-pool
import of the same file.

Which process embedded a text: the embeddings are served by a loopback OpenAI-compatible ``/v1/embeddings``
endpoint (``--embedding-model hash@URL``, hashed bag-of-words vectors, ``tests/fake_embedding.py``), and for each
request it looks up, in ``/proc``, the process that holds the client end of the connection (the socket's inode in
``/proc/net/tcp``, then the process with that socket open). Embedding calls are not model exchanges, so the run's
``events.jsonl`` does not hold them; the teacher's rewrite calls are exchanges, logged with the ``worker`` that
made them. Cluster (a head and two worker nodes), throw-away PostgreSQL and chat stand-in as in
``tests/test_ray_executor.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.embedding_endpoint import EmbeddingEndpoint
from tests.fake_embedding import HashEmbedding
from tests.golden_runs import respond
from tests.planted_bank import write_planted
from tests.standin_endpoint import StandIn

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from dyneval import cli  # noqa: E402
from dyneval.nodes.llmeval.bankio import EMBED_BATCH  # noqa: E402
from dyneval.stores.question_bank import QuestionBank  # noqa: E402
from tests.ray_cluster import RayCluster, cluster_or_skip  # noqa: E402

#: Records of the generated bank file (a few embedding items of EMBED_BATCH texts).
RECORDS = 400


@pytest.fixture(scope="module")
def cluster() -> Any:
    yield from cluster_or_skip(workers=2, cpus_per_worker=1)


@pytest.fixture(scope="module")
def chat() -> Any:
    with StandIn(respond=respond, latency_s=0.01) as server:
        yield server


@pytest.fixture
def embeddings() -> Any:
    endpoint = EmbeddingEndpoint(HashEmbedding())
    yield endpoint
    endpoint.close()


def _run(bank: Path, out: Path, dsn: str, chat: StandIn, embeddings: EmbeddingEndpoint, *executor: str) -> Path:
    code = cli.main(
        [
            "--protocol",
            "llmeval",
            "--bank",
            str(bank),
            "--augment",
            "--rewrite",
            "--near-dup-threshold",
            "0.9",
            "--questions",
            "3",
            "--sessions",
            "2",
            "--paradigm",
            "zero-shot",
            "--target",
            f"target@{chat.url}",
            "--evaluator",
            f"evaluator@{chat.url}",
            "--skip-preflight",
            "--embedding-model",
            embeddings.model,
            "--concurrency",
            "4",
            "--postgres-dsn",
            dsn,
            "--out",
            str(out),
            *executor,
        ]
    )
    assert code == 0
    return next(out.glob("*/summary.json")).parent


def _bank(dsn: str) -> list[tuple[str, str, str | None, bool]]:
    bank = QuestionBank(dsn)
    try:
        active = {q.uuid for q in bank.all_questions(active_only=True)}
        return sorted((q.uuid, q.question, q.parent_uuid, q.uuid in active) for q in bank.all_questions())
    finally:
        bank.close()


def _rewrites(run_dir: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e.get("step") == "rewrite"]


def test_bank_import_embeds_and_rewrites_on_the_worker_processes_and_imports_the_bank_a_thread_pool_does(
    cluster: RayCluster, chat: StandIn, embeddings: EmbeddingEndpoint, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    bank_file = tmp_path / "bank.jsonl"
    write_planted(bank_file, RECORDS)
    threads_dsn = fresh_postgres_db("prep_llmeval_threads")
    threads_dir = _run(bank_file, tmp_path / "threads", threads_dsn, chat, embeddings)
    threads_requests, embeddings.requests = embeddings.requests, []
    ray_dsn = fresh_postgres_db("prep_llmeval_ray")
    ray_dir = _run(
        bank_file, tmp_path / "ray", ray_dsn, chat, embeddings, "--executor", "ray", "--ray-address", cluster.address
    )
    ray_requests = embeddings.requests

    # the bank and the import report (duplicates found, of which record) are the thread pool's
    report = (ray_dir / "import_report.txt").read_text()
    assert report == (threads_dir / "import_report.txt").read_text()
    assert "near duplicate of record" in report and "exact duplicate of record" in report
    ray_bank = _bank(ray_dsn)
    assert ray_bank == _bank(threads_dsn)
    assert any(not active for *_, active in ray_bank)  # --augment deactivated multiple-choice parents

    # threads: every text embedded by this process in one call; Ray: the same texts, each once, by worker
    # processes (descendants of a worker node's `ray start`, never this driver), in items of at most EMBED_BATCH
    assert {pid for pid, _ in threads_requests} == {os.getpid()}
    texts = Counter(t for _, batch in ray_requests for t in batch)
    assert texts == Counter(t for _, batch in threads_requests for t in batch) and max(texts.values()) == 1
    assert len(ray_requests) >= RECORDS // EMBED_BATCH and max(len(b) for _, b in ray_requests) <= EMBED_BATCH
    pids = {pid for pid, _ in ray_requests}
    assert None not in pids  # every request's process was found
    worker_nodes = {cluster.nodes[name].process.pid: name for name in cluster.workers}
    embedded_on = {pid: [worker_nodes[a] for a in embeddings.ancestry[pid] if a in worker_nodes] for pid in pids}
    assert os.getpid() not in embedded_on and all(len(nodes) == 1 for nodes in embedded_on.values()), embedded_on

    # --rewrite: the teacher's calls were the workers' (the driver's log names the worker of each), as many as
    # the thread pool made in this process
    rewrites = _rewrites(ray_dir)
    assert rewrites and len(rewrites) == len(_rewrites(threads_dir))
    assert all("worker" not in e for e in _rewrites(threads_dir))
    workers = {e["worker"] for e in rewrites}
    assert all(int(w.rsplit("-", 1)[1]) != os.getpid() for w in workers), workers
