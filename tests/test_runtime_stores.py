"""Stores: Chroma on disk and behind a real Chroma server, offline embeddings, results store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dyneval.runtime.embedded import free_port
from dyneval.stores.results import ResultStore
from tests.conftest import make_services


def _roundtrip(client, embeddings) -> list[str]:
    col = client.get_or_create_collection("roundtrip", embedding_function=embeddings, metadata={"hnsw:space": "cosine"})
    col.add(ids=["cat", "physics"], documents=["a cat sleeps on the warm mat", "quarks are bound by gluons"])
    return col.query(query_texts=["a kitten napping"], n_results=1)["ids"][0]


def test_persistent_chroma_with_offline_embeddings_finds_the_nearest_text_and_survives_reopen(tmp_path):
    services = make_services(tmp_path)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert _roundtrip(services.chroma(), services.embeddings()) == ["cat"]
    reopened = make_services(tmp_path).chroma()
    col = reopened.get_collection("roundtrip", embedding_function=services.embeddings())
    assert col.count() == 2
    vector = services.embeddings()(["hello"])[0]
    assert len(vector) == 384


def test_the_offline_embedding_model_loads_at_its_first_call_with_chromas_vectors_and_configuration():
    """A build's extraction calls start while the model loads (stores.vectors.lazy_sentence_transformer)."""
    import numpy as np
    from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction as ChromaFunction

    from dyneval.stores.vectors import lazy_sentence_transformer, offline_minilm_path

    path = str(offline_minilm_path())
    ChromaFunction.models.pop(path, None)
    lazy = lazy_sentence_transformer(path)
    assert path not in ChromaFunction.models  # made, not loaded
    texts = ["a cat sleeps on the warm mat", "quarks are bound by gluons"]
    vectors = lazy(texts)
    assert path in ChromaFunction.models
    chroma = ChromaFunction(model_name=path, device="cpu", normalize_embeddings=True)
    assert np.allclose(np.array(vectors), np.array(chroma(texts)), atol=1e-6)
    assert (lazy.name(), lazy.get_config()) == (chroma.name(), chroma.get_config())  # same collection config


@pytest.mark.integration
def test_chroma_server_is_used_when_a_url_is_configured(tmp_path):
    exe = Path(sys.executable).with_name("chroma")
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(tmp_path / "srv"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        services = make_services(tmp_path)
        services.config.stores.chroma_url = f"http://127.0.0.1:{port}"
        assert _roundtrip(services.chroma(), services.embeddings()) == ["cat"]
        assert not (services.data_dir / "chroma").exists()  # nothing was written to the on-disk client
        listed = httpx.get(
            f"http://127.0.0.1:{port}/api/v2/tenants/default_tenant/databases/default_database/collections"
        ).json()
        assert [c["name"] for c in listed] == ["roundtrip"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_result_store_keeps_the_last_record_per_unit_and_skips_a_torn_line(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.append({"unit_id": "a", "status": "infra_error"})
    store.append({"unit_id": "b", "status": "ok"})
    store.append({"unit_id": "a", "status": "ok"})
    with store.path.open("a") as fh:
        fh.write('{"unit_id": "c", "sta')  # killed mid-write
    latest = store.latest()
    assert {k: v["status"] for k, v in latest.items()} == {"a": "ok", "b": "ok"}


def test_cached_builder_may_use_other_services_without_deadlock(tmp_path):
    services = make_services(tmp_path)
    inner = services.cached("outer", lambda: services.cached("inner", lambda: 41) + 1)
    assert inner == 42 and services.cached("outer", lambda: 0) == 42
