"""Embeddings from an OpenAI-compatible endpoint (``--embedding-model MODEL@BASE_URL``): the knowledge graph is
embedded by a loopback ``/v1/embeddings`` server, one request per batch of texts, and samples the same paths as
with the same vectors computed in-process; a malformed endpoint is refused as bad input."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dyneval.state.config import StoreConfig
from dyneval.stores.vectors import embedding_function
from tests.fake_embedding import HashEmbedding, embeddings_reply
from tests.fake_endpoint import serve, stop, url_of
from tests.test_speed_context_graph import build, corpus, paths


@pytest.fixture
def embeddings_endpoint():
    """``POST /v1/embeddings``: the hash embedding of each input, as floats or base64 as the client asks."""
    fake, batches = HashEmbedding(), []

    def respond(body: dict) -> tuple:
        batches.append(len(body["input"]) if isinstance(body["input"], list) else 1)
        return embeddings_reply(fake, body)

    server = serve(respond)
    yield url_of(server), batches
    stop(server)


def test_a_graph_embedded_by_an_endpoint_samples_as_the_same_vectors_in_process(
    tmp_path, embeddings_endpoint, monkeypatch
):
    url, batches = embeddings_endpoint
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a loopback server takes any key
    remote = embedding_function(f"hash-embed@{url}")
    graph = build(corpus(20), tmp_path / "remote", remote)
    assert len(batches) <= 2 + 2 and max(batches) > 1  # chunks and entities in batches, not one text per request
    local = build(corpus(20), tmp_path / "local", HashEmbedding())
    assert paths(graph) == paths(local)


def test_a_malformed_embeddings_endpoint_is_refused():
    with pytest.raises(ValidationError, match="malformed MODEL@BASE_URL"):
        StoreConfig(embedding_model="m@http://127.0.0.1:notaport/v1")


def test_a_local_embedding_model_must_be_a_folder_or_cached_since_nothing_is_downloaded(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # as resolved from HF_HOME, XDG_...
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    with pytest.raises(ValidationError, match="neither a folder nor in the Hugging Face cache"):
        StoreConfig(embedding_model="all-mpnet-base-v2")
    (tmp_path / "hub" / "models--sentence-transformers--all-mpnet-base-v2").mkdir(parents=True)
    assert StoreConfig(embedding_model="all-mpnet-base-v2").embedding_model  # the name sentence-transformers maps
    assert StoreConfig(embedding_model=str(tmp_path)).embedding_model  # a model folder
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "st"))  # sentence-transformers' own cache
    (tmp_path / "st" / "models--org--encoder").mkdir(parents=True)
    assert StoreConfig(embedding_model="org/encoder").embedding_model
