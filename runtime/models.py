"""Model factory: a LangChain chat model for a :class:`ModelSpec`, and the :class:`Endpoint` all its users share.

Every spec becomes a ``langchain_openai.ChatOpenAI``: remote endpoints directly,
the embedded model through its loopback llama.cpp server. The OpenAI client's
own retries are off (``max_retries=0``) so that :mod:`runtime.llm` retries,
logs and classifies every attempt itself. Only the resolver
(:meth:`runtime.services.Services.model`) calls :func:`open_endpoint`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.concurrency import InFlight
from runtime.embedded import embedded_base_url
from state.config import ModelSpec
from state.errors import InputError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.rate_limiters import BaseRateLimiter

#: llama.cpp ignores the key, but the OpenAI client insists on one.
_NO_KEY = "sk-no-key-needed"


def resolve_api_key(spec: ModelSpec) -> str:
    """The key from the env var the spec names; a named but unset variable is bad input."""
    if not spec.api_key_env:
        return _NO_KEY
    key = os.environ.get(spec.api_key_env)
    if key:
        return key
    if spec.base_url and spec.base_url.startswith(("http://127.", "http://localhost")):
        return _NO_KEY  # local servers (vLLM, llama.cpp, Ollama) take any key
    raise InputError(f"environment variable {spec.api_key_env} (API key for model {spec.model!r}) is not set")


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    """Construct the chat model for ``spec`` (starts the embedded server on first use).

    langchain-openai (and the OpenAI client under it) is imported here, when a run opens its first endpoint.
    """
    from langchain_openai import ChatOpenAI

    base_url = embedded_base_url() if spec.provider == "embedded" else spec.base_url
    return ChatOpenAI(
        model=spec.model,
        base_url=base_url,
        api_key=resolve_api_key(spec),
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        timeout=spec.timeout_s,
        max_retries=0,
        stream_usage=False,
        # langchain-openai sends the limit as `max_completion_tokens`, which llama-cpp-python's server ignores;
        # without `max_tokens` the embedded model may generate up to its whole context window.
        extra_body={"max_tokens": spec.max_tokens} if spec.provider == "embedded" and spec.max_tokens else None,
    )


@dataclass(frozen=True)
class Endpoint:
    """What every user of one model spec shares: the chat model, the adaptive limit on requests in flight
    (ceiling ``spec.concurrency``; ``None`` = none) and the rate limiter (``spec.requests_per_second``).

    The call layer waits for both itself (:class:`runtime.llm.RoleLLM`), so that the time spent queueing is
    logged apart from the endpoint's own latency.
    """

    spec: ModelSpec
    label: str
    chat: BaseChatModel
    slots: InFlight
    limiter: BaseRateLimiter | None


def open_endpoint(spec: ModelSpec, *, chat: BaseChatModel | None = None, label: str | None = None) -> Endpoint:
    """The endpoint of ``spec``; ``chat`` replaces the real chat model (a fake in tests, labelled ``label``)."""
    from langchain_core.rate_limiters import InMemoryRateLimiter

    limiter = (InMemoryRateLimiter(requests_per_second=spec.requests_per_second, max_bucket_size=1)
               if spec.requests_per_second else None)
    return Endpoint(spec=spec, label=label or model_label(spec), chat=build_chat_model(spec) if chat is None else chat,
                    slots=InFlight(spec.concurrency),
                    limiter=limiter)


def model_label(spec: ModelSpec) -> str:
    """Short human name of a spec for logs and reports."""
    if spec.provider == "embedded":
        return "local:" + spec.model
    return f"{spec.model}@{spec.base_url}" if spec.base_url else spec.model
