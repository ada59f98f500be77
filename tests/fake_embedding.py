"""A deterministic, fast embedding function for tests and benchmarks (no model, no download).

Hashed bag of words: each lower-cased word adds 1 to one of ``dims`` coordinates (plus one fixed coordinate,
so no vector is zero). Integer coordinates keep every dot product exact, so a ranking cannot depend on the
order of a float summation. Every call is counted (``calls``, ``texts``) so tests can see what was embedded.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings


class HashEmbedding(EmbeddingFunction[Documents]):
    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[int] = []  # batch size of each call
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, input: Documents) -> Embeddings:
        texts = list(input)
        with self._lock:
            self.calls.append(len(texts))
            self.texts.extend(texts)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        out[:, 0] = 1.0
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, 1 + int(hashlib.md5(word.encode()).hexdigest(), 16) % (self.dims - 1)] += 1.0
        return list(out)

    @staticmethod
    def name() -> str:
        return "dyneval-hash-test"

    def get_config(self) -> dict[str, Any]:
        return {"dims": self.dims}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HashEmbedding:
        return HashEmbedding(config["dims"])


def embeddings_reply(fake: HashEmbedding, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An OpenAI ``POST /v1/embeddings`` reply with ``fake``'s vectors of the request's inputs, as floats or base64
    as the client asks (``tests.fake_endpoint.serve`` serves it)."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    encode = (
        (lambda v: base64.b64encode(np.asarray(v, dtype=np.float32).tobytes()).decode())
        if body.get("encoding_format") == "base64"
        else (lambda v: [float(x) for x in v])
    )
    return 200, {
        "object": "list",
        "model": body["model"],
        "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(fake(texts))],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }
