"""The LLM call layer every node goes through.

One :class:`RoleLLM` per role: retries transient endpoint faults with
exponential backoff, bounds in-flight requests, gets structured output with one
repair attempt, and appends every exchange to the run's :class:`EventLog`, with
the time spent queueing for the endpoint (``queue_s``: in-flight ceiling and
rate limit) apart from the endpoint's own latency (``latency_s``). With a
response cache (``--cache``, :mod:`runtime.cache`) an accepted reply to an
identical request is reused and logged as ``cached``; a pre-flight ping always
goes to the endpoint.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from dyneval.runtime.agents.errors import AgentModelError, AgentTimeout
from dyneval.runtime.concurrency import InFlight, Slots
from dyneval.runtime.events import EventLog
from dyneval.runtime.stop import raise_if_stopped
from dyneval.state.errors import InfraError, ModelError, RetryPolicy

if TYPE_CHECKING:  # LangChain is imported with the first call, not with the module (`dyneval --help` stays fast)
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.rate_limiters import BaseRateLimiter

    from dyneval.runtime.budget import Budget
    from dyneval.runtime.cache import CacheKey, ResponseCache

T = TypeVar("T", bound=BaseModel)

_TRANSIENT_STATUS = {408, 409, 429}

#: The step of a pre-flight ping: never answered from the response cache (it checks that the endpoint is up).
PING_STEP = "preflight"
#: The ``response_metadata`` key of a reply the event log holds already (a resumed agent turn,
#: :mod:`runtime.agents.chat`): nothing was sent, and it is not logged again.
LOGGED_ALREADY = "logged_already"


def is_transient(exc: BaseException) -> bool:
    """Timeouts, connection faults, 429, 5xx and a reply that is not a chat completion (an HTML page, a JSON error
    with HTTP 200: :meth:`runtime.models._Reply.parse`) are worth retrying; other faults are not."""
    import httpx
    import openai  # imported by langchain-openai anyway; here only once a call has failed

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.APIResponseValidationError)):
        return True
    if isinstance(status := _status(exc), int):  # OpenAI's, Anthropic's or Ollama's status error
        return status >= 500 or status in _TRANSIENT_STATUS
    return isinstance(
        exc, (httpx.TimeoutException, httpx.TransportError, TimeoutError, ConnectionError, *_sdk_faults())
    )


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a provider SDK's status error (``status_code``: openai, anthropic, ollama; ``code``:
    google-genai), on the error or on the one it was raised from: LangChain's Gemini integration re-raises
    google-genai's 4xx as an error of its own that keeps only the message."""
    for err in (exc, exc.__cause__):
        status = getattr(err, "status_code", None)
        if status is None and isinstance(err, _loaded("google.genai.errors:APIError")):
            status = getattr(err, "code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _loaded(*names: str) -> tuple[type[BaseException], ...]:
    """The error classes ``module:Class`` of the modules this process has loaded: a provider SDK comes with its
    integration's client (:data:`runtime.models.INTEGRATIONS`), never imported here."""
    return tuple(
        getattr(sys.modules[module], name)
        for module, _, name in (n.partition(":") for n in names)
        if module in sys.modules
    )


def _sdk_timeouts() -> tuple[type[BaseException], ...]:
    """The timeout errors of provider SDKs other than OpenAI's (Ollama's client raises httpx's own; google-genai's
    httpx's or httpx2's, whichever it runs on)."""
    return _loaded("anthropic:APITimeoutError", "httpx2:TimeoutException")


def _sdk_faults() -> tuple[type[BaseException], ...]:
    """The timeout and connection errors of provider SDKs other than OpenAI's (each includes its timeouts)."""
    return _loaded("anthropic:APIConnectionError", "httpx2:TransportError")


def _sdk_errors() -> tuple[type[BaseException], ...]:
    """Every error class of the provider SDKs this process loaded, besides OpenAI's."""
    return _loaded(
        "anthropic:APIError",
        "ollama:ResponseError",
        "google.genai.errors:APIError",
        "langchain_google_genai._common:GoogleGenerativeAIError",
        "httpx2:HTTPError",
    )


def is_overload(exc: BaseException) -> bool:
    """The endpoint is over its capacity: 429 or a timeout (the adaptive in-flight limit halves)."""
    import httpx
    import openai

    return _status(exc) == 429 or isinstance(
        exc, (openai.APITimeoutError, httpx.TimeoutException, TimeoutError, *_sdk_timeouts())
    )


def is_endpoint_fault(exc: BaseException) -> bool:
    """Any error raised by the client library for the endpoint (as opposed to our own code)."""
    import httpx
    import openai

    return is_transient(exc) or isinstance(exc, (openai.OpenAIError, httpx.HTTPError, *_sdk_errors()))


def current_unit(default: str = "-") -> str:
    """The unit of the graph run this call belongs to: the batch runner's ``unit_id``, else the thread id (Studio,
    an embedding app), else ``default`` outside a graph."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
        return str(configurable.get("unit_id") or configurable.get("thread_id") or default)
    except RuntimeError:
        return default


def _as_messages(messages: list[Any]) -> list[BaseMessage]:
    from langchain_core.messages import convert_to_messages

    return convert_to_messages(messages)


def message_dicts(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """Messages as the event log records them (the re-score's replay looks requests up in this form)."""
    return [{"role": m.type, "content": m.content} for m in messages]


def _tokens(message: Any) -> tuple[int, int]:
    usage = getattr(message, "usage_metadata", None) or {}
    return int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)


@dataclass
class RoleLLM:
    """A chat model bound to a role, with retries, limits, repair and logging.

    ``slots`` (the endpoint's adaptive in-flight limit) and ``limiter`` (its rate limit) are shared by every user
    of the endpoint (:func:`runtime.models.open_endpoint`).
    """

    role: str
    model_label: str
    chat: BaseChatModel
    events: EventLog
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    structured_method: str = "function_calling"
    slots: Slots = field(default_factory=InFlight)
    limiter: BaseRateLimiter | None = None
    #: The response cache and what identifies this endpoint in its keys (``None``: every request is sent).
    cache: ResponseCache | None = None
    cache_endpoint: dict[str, Any] | None = None
    #: The run's budget (:mod:`runtime.budget`), checked before each request (``None``: unlimited).
    budget: Budget | None = None
    _structured: dict[type, Callable[[list[BaseMessage]], dict[str, Any]]] = field(default_factory=dict, repr=False)

    # -- plain text -------------------------------------------------------------------------
    def text(self, messages: list[BaseMessage], *, step: str) -> str:
        """Free-form answer as a string."""
        messages = _as_messages(messages)
        key, hit = self._cached({"kind": "text"}, messages, step) if step != PING_STEP else (None, None)
        if hit is not None:
            reply = hit[0]
        else:
            reply = self._call(lambda: self.chat.invoke(messages), messages, step, lambda r: r.content)
            if key is not None and self.cache is not None:
                self.cache.put(key, reply)
        return reply.content if isinstance(reply.content, str) else str(reply.content)

    # -- structured -------------------------------------------------------------------------
    def structured(self, schema: type[T], messages: list[BaseMessage], *, step: str) -> T:
        """A validated ``schema`` instance; one repair attempt, then :class:`ModelError`."""
        messages = _as_messages(messages)
        parsed, result, problem = self._structured_once(schema, messages, step)
        if parsed is not None:
            return parsed
        from dyneval.prompts import load_prompt

        repair = load_prompt("common/repair").render(error=problem, previous=_sent(result))
        parsed, _, problem = self._structured_once(schema, [*messages, *repair], f"{step}:repair")
        if parsed is not None:
            return parsed
        raise ModelError(f"{self.role} ({self.model_label}) gave no valid {schema.__name__} at step {step}: {problem}")

    def _structured_once(
        self, schema: type[T], messages: list[BaseMessage], step: str
    ) -> tuple[T | None, dict[str, Any], str]:
        """One structured request (or its cached accepted reply): ``(parsed or None, raw result, problem)``.

        Only a reply that validated is stored, so an unusable one is asked again on the next run or resume.
        """
        key, hit = self._cached(_structured_request(schema), messages, step)
        if hit is not None:
            return schema.model_validate(hit[1]["parsed"]), {"raw": hit[0]}, ""
        ask = self._structured_call(schema)
        result = self._call(lambda: ask(messages), messages, step, _structured_output, _raw_of)
        parsed, problem = _parsed_or_problem(schema, result)
        if parsed is not None and key is not None and self.cache is not None and result.get("raw") is not None:
            self.cache.put(key, result["raw"], parsed=parsed.model_dump(mode="json"))
        return parsed, result, problem

    def _cached(
        self, request: dict[str, Any], messages: list[BaseMessage], step: str
    ) -> tuple[CacheKey | None, tuple[AIMessage, dict[str, Any]] | None]:
        """The cache key of this request and the stored reply, logged as a cached exchange (no cache: both None)."""
        if self.cache is None or self.cache_endpoint is None:
            return None, None
        unit = current_unit()
        key = self.cache.key(endpoint=self.cache_endpoint, request=request, messages=messages, unit=unit, step=step)
        hit = self.cache.get(key)
        if hit is not None:
            message, info = hit
            p_tok, c_tok = _tokens(message)
            self.events.record(
                unit=unit,
                role=self.role,
                model=self.model_label,
                step=step,
                messages=message_dicts(messages),
                output=info.get("parsed", message.content),
                prompt_tokens=p_tok,
                completion_tokens=c_tok,
                latency_s=0.0,
                cached=True,
            )
        return key, hit

    def _structured_call(self, schema: type[BaseModel]) -> Callable[[list[BaseMessage]], dict[str, Any]]:
        """``messages -> {"raw", "parsed", "parsing_error"}``, what ``with_structured_output(include_raw=True)``
        returns, built once per schema.

        The chat model bound to the schema's tool and its output parser are the two steps of LangChain's
        ``with_structured_output(schema)``; they run here in the calling thread. The ``include_raw`` wrapper
        would run the same two steps through a parallel map that starts a thread pool on every call (about a
        third of the call layer's own time at zero endpoint latency). Two more per-call costs are left out, neither
        part of the request: the binding's ``ls_structured_output_format`` (LangSmith run metadata, for which
        LangChain generated the schema's JSON schema again on every call) and the parser's callback run (its
        ``parse_result`` is what its ``invoke`` calls).
        """
        if schema not in self._structured:
            from langchain_core.runnables import RunnableBinding, RunnableSequence

            chain = self.chat.with_structured_output(schema, method=self.structured_method)
            if not isinstance(chain, RunnableSequence):
                raise TypeError(
                    f"{type(self.chat).__name__}.with_structured_output gave a {type(chain).__name__}, "
                    "not the chat model bound to the schema followed by its output parser"
                )
            model, parser = chain.first, chain.last
            if isinstance(model, RunnableBinding) and "ls_structured_output_format" in model.kwargs:
                model = model.model_copy(
                    update={"kwargs": {k: v for k, v in model.kwargs.items() if k != "ls_structured_output_format"}}
                )
            parse = _parse_message(parser)

            def ask(messages: list[BaseMessage]) -> dict[str, Any]:
                raw = model.invoke(messages)
                try:
                    return {"raw": raw, "parsed": parse(raw), "parsing_error": None}
                except Exception as exc:  # noqa: BLE001 - as the include_raw fallback: the error is the result
                    return {"raw": raw, "parsed": None, "parsing_error": exc}

            self._structured[schema] = ask
        return self._structured[schema]

    # -- core -------------------------------------------------------------------------------
    def _call(
        self,
        invoke: Callable[[], Any],
        messages: list[BaseMessage],
        step: str,
        describe: Callable[[Any], Any],
        raw: Callable[[Any], Any] = lambda r: r,
    ) -> Any:
        unit = current_unit()
        attempt = 0
        while True:
            attempt += 1
            queued = time.perf_counter()
            started, failure = None, None
            window = self.slots.acquire()
            try:
                if self.limiter is not None:
                    self.limiter.acquire()
                raise_if_stopped()  # Ctrl-C: no new request (runtime.stop)
                if self.budget is not None:
                    self.budget.check()  # spent: no new request either (runtime.budget)
                started = time.perf_counter()
                result = invoke()
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised if not ours
                failure = exc
            finally:
                self.slots.release(window, overloaded=failure is not None and is_overload(failure))
            if failure is not None:
                ended = time.perf_counter()
                ours = isinstance(failure, (AgentModelError, AgentTimeout))  # an agent target's failed turn
                if not (ours or is_endpoint_fault(failure)):
                    raise failure
                self.events.record(
                    unit=unit,
                    role=self.role,
                    model=self.model_label,
                    step=step,
                    messages=message_dicts(messages),
                    output=None,
                    prompt_tokens=0,
                    completion_tokens=0,
                    latency_s=ended - (started or ended),
                    queue_s=(started or ended) - queued,
                    error=f"{type(failure).__name__}: {failure}",
                    attempt=attempt,
                    agent=getattr(failure, "turn", None),
                )
                if ours:
                    raise failure
                if is_transient(failure) and attempt <= self.policy.max_retries:
                    self.policy.sleep(self.policy.delay(attempt, failure))
                    continue
                raise InfraError(
                    f"{self.role} ({self.model_label}) failed at step {step} after "
                    f"{attempt} attempt(s): {type(failure).__name__}: {failure}"
                ) from failure
            ended = time.perf_counter()
            assert started is not None  # set right before invoke() returned
            metadata = getattr(raw(result), "response_metadata", None) or {}
            if LOGGED_ALREADY in metadata:
                return result
            p_tok, c_tok = _tokens(raw(result))
            replayed = "replayed_from" in metadata  # runtime.replay
            self.events.record(
                unit=unit,
                role=self.role,
                model=self.model_label,
                step=step,
                messages=message_dicts(messages),
                output=describe(result),
                prompt_tokens=p_tok,
                completion_tokens=c_tok,
                latency_s=ended - started,
                queue_s=started - queued,
                attempt=attempt,
                cached=replayed,
                agent=metadata.get("agent_turn"),  # runtime.agents.chat
            )
            return result


@functools.cache
def _structured_request(schema: type[BaseModel]) -> dict[str, Any]:
    """What identifies a structured request's kind in a cache key: its schema, generated once per class."""
    return {"kind": "structured", "schema": schema.model_json_schema()}


def _parse_message(parser: Any) -> Callable[[AIMessage], Any]:
    """``parser.invoke`` for one chat message without its callback run: a LangChain output parser's
    ``parse_result`` on the message's generation (any other runnable: its ``invoke``)."""
    if not hasattr(parser, "parse_result"):
        return parser.invoke
    from langchain_core.outputs import ChatGeneration

    return lambda message: parser.parse_result([ChatGeneration(message=message)])


def _raw_of(result: dict[str, Any]) -> AIMessage | None:
    return result.get("raw")


def _sent(result: dict[str, Any]) -> str:
    """What the model actually sent: its text and every tool call, malformed ones with their raw arguments."""
    raw = result.get("raw")
    if raw is None:
        return "(no message came back)"
    parts = []
    text = raw.content if isinstance(raw.content, str) else json.dumps(raw.content, ensure_ascii=False)
    if text.strip():
        parts.append(f"text: {text.strip()[:2000]}")
    for call in getattr(raw, "tool_calls", None) or []:
        parts.append(
            f"tool call {call.get('name')} with arguments {json.dumps(call.get('args'), ensure_ascii=False)[:2000]}"
        )
    for call in getattr(raw, "invalid_tool_calls", None) or []:
        parts.append(
            f"tool call {call.get('name')} with arguments that are not valid JSON: {str(call.get('args'))[:2000]}"
        )
    return "\n".join(parts) or "(an empty reply: no text and no tool call)"


def _structured_output(result: dict[str, Any]) -> Any:
    parsed = result.get("parsed")
    if isinstance(parsed, BaseModel):
        return parsed.model_dump(mode="json")
    return {"unparsed": _sent(result), "error": str(result.get("parsing_error") or "no structured output")}


def _parsed_or_problem(schema: type[T], result: dict[str, Any]) -> tuple[T | None, str]:
    parsed = result.get("parsed")
    if isinstance(parsed, schema):
        return parsed, ""
    if isinstance(parsed, dict):  # some providers hand back a dict
        try:
            return schema.model_validate(parsed), ""
        except ValidationError as exc:
            return None, _short_validation(exc)
    error = result.get("parsing_error")
    if isinstance(error, ValidationError):
        return None, _short_validation(error)
    if error is not None:
        return None, str(error).splitlines()[0][:500]
    raw = result.get("raw")
    invalid = getattr(raw, "invalid_tool_calls", None) or []
    if invalid:
        why = str(invalid[0].get("error") or "").splitlines()[0][:300] if invalid[0].get("error") else ""
        return None, (
            f"the arguments of your {invalid[0].get('name') or schema.__name__} tool call are not valid "
            f"JSON{f' ({why})' if why else ''}; call the {schema.__name__} tool with a JSON object "
            "holding all fields"
        )
    if raw is not None and not getattr(raw, "tool_calls", None):
        return None, f"you replied without calling the {schema.__name__} tool; call it with all fields"
    return None, f"no {schema.__name__} object was returned (call the {schema.__name__} tool with all fields)"


def _short_validation(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:5])
