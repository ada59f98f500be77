"""Model factory: a LangChain chat model for a :class:`ModelSpec`, and the :class:`Endpoint` all its users share.

An OpenAI-compatible spec becomes a ``langchain_openai.ChatOpenAI``: remote endpoints directly,
the embedded model through its loopback llama.cpp server. Anthropic, Gemini and Ollama specs become their
provider's integration through LangChain's ``init_chat_model`` (optional extras, :data:`INTEGRATIONS`). The
clients' own retries are off (``max_retries=0``) so that :mod:`runtime.llm` retries,
logs and classifies every attempt itself. Only the resolver
(:meth:`runtime.services.Services.model`) calls :func:`open_endpoint`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dyneval.runtime.concurrency import InFlight, Slots
from dyneval.runtime.embedded import embedded_base_url
from dyneval.state.config import ModelSpec
from dyneval.state.errors import InputError

if TYPE_CHECKING:
    import httpx2
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


#: A provider's LangChain integration: its package, the extra that installs it, its keyword for the reply's token
#: limit (``init_chat_model`` passes keywords through to the integration's class), and its ``max_retries`` for
#: "one attempt, no retries" (``None``: its client takes no such option). google-genai counts attempts: 1 is a
#: single attempt in every release, where LangChain documents ``max_retries=0`` as "the SDK's default" (5 retries)
#: (``ChatGoogleGenerativeAI.max_retries``).
INTEGRATIONS: dict[str, tuple[str, str, str, int | None]] = {
    "anthropic": ("langchain_anthropic", "anthropic", "max_tokens", 0),
    "google_genai": ("langchain_google_genai", "google", "max_output_tokens", 1),
    "ollama": ("langchain_ollama", "ollama", "num_predict", None),
}


def missing_integration(spec: ModelSpec) -> str | None:
    """Why ``spec``'s provider cannot be used here (its integration's extra is not installed), or ``None``."""
    if spec.provider not in INTEGRATIONS:
        return None
    package, extra, _, _ = INTEGRATIONS[spec.provider]
    if importlib.util.find_spec(package) is not None:
        return None
    return (
        f"model {spec.provider}/{spec.model} needs the [{extra}] extra ({package.replace('_', '-')}): "
        f"pip install 'dyneval[{extra}]'"
    )


def _integration_chat(spec: ModelSpec) -> BaseChatModel:
    """The provider's own LangChain chat model through ``init_chat_model``, its retries off (ours count) and the
    spec's temperature, token limit, timeout, base URL and key."""
    from langchain.chat_models import init_chat_model

    _, _, limit, single_attempt = INTEGRATIONS[spec.provider]
    options: dict[str, Any] = {"temperature": spec.temperature, limit: spec.max_tokens}
    if single_attempt is None:  # the Ollama client: no retries of its own; its httpx client takes the timeout
        options["client_kwargs"] = {"timeout": spec.timeout_s}
    else:
        options.update(timeout=spec.timeout_s, max_retries=single_attempt, api_key=resolve_api_key(spec))
    if spec.base_url:
        options["base_url"] = spec.base_url
    return init_chat_model(spec.model, model_provider=spec.provider, **options)


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    """Construct the chat model for ``spec`` (starts the embedded server on first use).

    langchain-openai (and the OpenAI client under it) is imported here, when a run opens its first endpoint;
    another provider's integration likewise (:func:`_integration_chat`).
    """
    if spec.provider in INTEGRATIONS:
        return _integration_chat(spec)
    from langchain_openai import ChatOpenAI

    base_url = embedded_base_url() if spec.provider == "embedded" else spec.base_url
    chat = ChatOpenAI(
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
    chat.client = ChatCompletionsPost(chat.root_client)
    return chat


class _Reply:
    """What LangChain reads of the OpenAI client's raw response: ``parse()`` (a dict is accepted as well as the
    client's model) and ``headers``."""

    def __init__(self, response: httpx2.Response) -> None:
        # openai>=3 sends through httpx2 and hands its own response back for `cast_to=httpx.Response`
        self.http_response = response
        self.headers = response.headers

    def parse(self) -> dict[str, Any]:
        """The chat completion; any other reply (a proxy's HTML login page, a JSON error, a wrong URL's page) raises
        ``openai.APIResponseValidationError`` naming what came back, which the call layer retries like a 5xx."""
        response = self.http_response
        try:
            body = response.json()
        except ValueError:
            body = None
        choices = body.get("choices") if isinstance(body, dict) else None
        if (
            isinstance(choices, list)
            and choices
            and all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices)
        ):
            return body
        import openai

        kind = response.headers.get("content-type", "").split(";")[0].strip() or "without a content type"
        seen = " ".join(response.text.split())[:120]
        raise openai.APIResponseValidationError(
            response, body, message=(f"HTTP {response.status_code} {kind}, not a chat completion: {seen!r}")
        )


class ChatCompletionsPost:
    """``chat.completions`` for :class:`ChatOpenAI`: a non-streamed request through the OpenAI client's public
    ``post``; anything else (streaming, other methods) is the client's own ``chat.completions``.

    ``Completions.create`` first walks the whole request (every message, the tool's JSON schema) through the SDK's
    TypedDict transform, which changes nothing in a chat request, and builds a pydantic ``ChatCompletion`` that
    LangChain at once dumps back to a dict: about 0.8 ms of CPU per call, a sixth of a call's cost at zero
    endpoint latency (``python -m bench.speed``). ``post`` keeps everything else of the client: authentication,
    headers, timeout, and the status-error classes (with the response, for ``Retry-After``) our retries classify.
    The request body has the fields ``create`` sends, each the same bytes on the wire
    (``tests/test_chat_requests.py``). The Responses API, if LangChain picks it for a model, is not touched.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._completions = client.chat.completions
        self.with_raw_response = _RawPost(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._completions, name)


class _RawPost:
    def __init__(self, owner: ChatCompletionsPost) -> None:
        self._owner = owner

    def create(
        self,
        *,
        extra_body: dict[str, Any] | None = None,
        extra_headers: dict[str, str] | None = None,
        extra_query: dict[str, Any] | None = None,
        timeout: Any = None,
        **body: Any,
    ) -> Any:
        if body.get("stream"):
            return self._owner._completions.with_raw_response.create(
                extra_body=extra_body, extra_headers=extra_headers, extra_query=extra_query, timeout=timeout, **body
            )
        import httpx

        options: dict[str, Any] = {}
        if extra_body:
            options["extra_json"] = extra_body
        if extra_headers:
            options["headers"] = extra_headers
        if extra_query:
            options["params"] = extra_query
        if timeout is not None:
            options["timeout"] = timeout
        client = self._owner._client
        return _Reply(client.post("/chat/completions", body=body, options=options, cast_to=httpx.Response))


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
    slots: Slots
    limiter: BaseRateLimiter | None


def open_endpoint(spec: ModelSpec, *, chat: BaseChatModel | None = None, label: str | None = None) -> Endpoint:
    """The endpoint of ``spec``; ``chat`` replaces the real chat model (a fake in tests, labelled ``label``)."""
    from langchain_core.rate_limiters import InMemoryRateLimiter

    limiter = (
        InMemoryRateLimiter(requests_per_second=spec.requests_per_second, max_bucket_size=1)
        if spec.requests_per_second
        else None
    )
    return Endpoint(
        spec=spec,
        label=label or model_label(spec),
        chat=build_chat_model(spec) if chat is None else chat,
        slots=InFlight(spec.concurrency),
        limiter=limiter,
    )


def model_label(spec: ModelSpec) -> str:
    """Short human name of a spec for logs and reports."""
    if spec.provider == "embedded":
        return "local:" + spec.model
    if spec.provider in INTEGRATIONS:
        label = f"{spec.provider}/{spec.model}"
        return f"{label}@{spec.base_url}" if spec.base_url else label
    return f"{spec.model}@{spec.base_url}" if spec.base_url else spec.model
