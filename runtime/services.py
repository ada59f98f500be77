"""Live resources of a run: role models, event log, stores.

Nodes reach them through ``services_of(runtime.context)``, never through module
globals, so a node works the same under the command line, in Studio and in a user's
own graph.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dyneval.prompts import use_prompt_dir
from dyneval.runtime import stop
from dyneval.runtime.agents.history import ThreadHistory
from dyneval.runtime.budget import Budget
from dyneval.runtime.config_loader import load_config, read_config_file
from dyneval.runtime.embedded import embedded_base_url
from dyneval.runtime.events import EventLog
from dyneval.runtime.llm import RoleLLM
from dyneval.runtime.models import Endpoint, model_label, open_endpoint
from dyneval.runtime.spread import LocalSpread, Spread
from dyneval.state.config import ModelSpec, RunConfig, parse_model_ref
from dyneval.state.errors import RetryPolicy
from dyneval.stores.private_files import private_folder
from dyneval.stores.vectors import chroma_client, embedding_function

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from langchain_core.language_models import BaseChatModel
    from rich.console import Console

    from dyneval.runtime.cache import ResponseCache


class Background:
    """A per-run resource built on its own thread while units run (JudgeAgent's context graph): its future, the
    progress of each stage (``stages``: name -> [done, total]) the live display shows, and how many callers wait.

    ``Background.idle`` is what a caller holds while it waits in :meth:`result`: the batch runner sets it per unit
    to a context manager that gives the unit's worker slot back (another unit works meanwhile) and takes a slot
    again before the unit goes on; elsewhere it does nothing."""

    idle: ClassVar[ContextVar[Callable[[], AbstractContextManager[Any]]]] = ContextVar(
        "background_idle", default=nullcontext
    )

    def __init__(self, label: str) -> None:
        self.label = label
        self.future: Future[Any] = Future()
        self.stages: dict[str, list[int]] = {}
        self.waiting = 0
        self._lock = threading.Lock()

    def progress(self, stage: str, advance: int, total: int) -> None:
        """``advance`` more items of ``stage`` done, of ``total``; raises once the run is stopping (Ctrl-C,
        budget), so the build ends at its next step."""
        with self._lock:
            done = self.stages.setdefault(stage, [0, 0])
            done[0] += advance
            done[1] = total
        stop.raise_if_stopped()

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Each stage's ``(done, total)`` so far."""
        with self._lock:
            return {stage: (done, total) for stage, (done, total) in self.stages.items()}

    def run(self, build: Callable[[Background], Any]) -> None:
        """``build(self)`` into the future (on the job's own thread): its value, or whatever it raised."""
        self.future.set_running_or_notify_cancel()
        try:
            self.future.set_result(build(self))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the resource
            self.future.set_exception(exc)

    def result(self) -> Any:
        """The resource, waiting for its build (counted in ``waiting``, idle in ``Background.idle``); the build's
        error if it failed. The wait ends within 0.2 s of the run's stop flag."""
        if not self.future.done():
            with self._lock:
                self.waiting += 1
            try:
                with Background.idle.get()():
                    while not wait([self.future], timeout=0.2).done:
                        stop.raise_if_stopped()
            finally:
                with self._lock:
                    self.waiting -= 1
        return self.future.result()


@dataclass
class Services:
    """Role models, event log and stores for one run.

    ``chat_overrides`` replaces the chat model of a role or a model reference (tests use LangChain fake chat
    models here); everything else still goes through :class:`RoleLLM`. ``console`` (the run's, set by
    :class:`runtime.protocol.Run`) shows the slow steps of opening a model, such as the embedded model's start.

    Models are resolved lazily: a role's endpoint is opened (and the embedded server started) at the role's first
    call, so a role a run never calls (an interview's target when a person answers) costs nothing.
    """

    config: RunConfig
    run_dir: Path
    events: EventLog
    chat_overrides: dict[str, BaseChatModel] = field(default_factory=dict)
    retry_sleep: Any = None
    console: Console | None = None
    _llms: dict[tuple[str, str], RoleLLM] = field(default_factory=dict, repr=False)
    _endpoints: dict[str, Endpoint] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _key_locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
    _background: dict[str, Background] = field(default_factory=dict, repr=False)
    #: The run's budget (``--max-calls`` / ``--max-tokens`` / ``--max-cost``), checked by the call layer;
    #: ``None`` = unlimited.
    budget: Budget | None = field(default=None, init=False)
    #: Where the run's preparation maps its heavy work (:mod:`runtime.spread`): here, or the Ray workers'.
    spread: Spread[Services] = field(init=False)
    #: The count of requests in flight where they are sent from other processes (a Ray session's coordinator).
    remote_in_flight: Callable[[], int] | None = field(default=None, init=False)
    #: What the run's event log says of its agent threads (:mod:`runtime.agents.history`), read as it grows.
    agent_history: ThreadHistory = field(init=False, repr=False)

    def __post_init__(self) -> None:
        use_prompt_dir(self.config.prompts)  # this process's nodes read the run's own prompts (--prompts)
        self.spread = LocalSpread(self)
        self.agent_history = ThreadHistory(self.run_dir / "events.jsonl", self.run_dir.name + "/")
        c = self.config
        if any((c.max_calls, c.max_tokens, c.max_cost, c.max_tokens_per_role, c.max_cost_per_role)):
            # limits are > 0: unset = None or {}
            self.budget = Budget(
                self.events,
                max_calls=c.max_calls,
                max_tokens=c.max_tokens,
                max_cost=c.max_cost,
                max_tokens_per_role=c.max_tokens_per_role,
                max_cost_per_role=c.max_cost_per_role,
            )

    def spec(self, role: str) -> ModelSpec:
        return self.config.spec_for(role)

    def llm(self, role: str) -> RoleLLM:
        """The call layer for ``role``: :meth:`model` on the role's configured reference."""
        return self.model(self.config.role_ref(role), role=role)

    def model(self, ref: str, *, role: str) -> RoleLLM:
        """The one model resolver: the call layer for model reference ``ref`` (``local``, a config name,
        ``MODEL@URL``), its calls logged under ``role``.

        Every node and protocol gets its models here, by role (:meth:`llm`) or by reference (ATAD's evaluated
        models, LLMEval's reference model). The :class:`Endpoint` is cached per spec: all roles and references
        naming one spec share its chat model, in-flight semaphore and rate limiter, so its limits hold however
        many callers use it. The response cache, adaptive concurrency and budgets hook in here, on the endpoint.
        A chat model in ``chat_overrides`` under ``ref``, else under ``role``, stands in for the endpoint.
        """
        with self._lock:
            if (role, ref) not in self._llms:
                endpoint = self._endpoint(ref, role)
                policy = RetryPolicy(max_retries=endpoint.spec.max_retries)
                if self.retry_sleep is not None:
                    policy.sleep = self.retry_sleep
                # fakes and agents (their answer depends on their own state) never cached
                cached = (
                    self.config.stores.cache and self._override(ref, role) is None and endpoint.spec.provider != "agent"
                )
                self._llms[role, ref] = RoleLLM(
                    role=role,
                    model_label=endpoint.label,
                    chat=endpoint.chat,
                    events=self.events,
                    policy=policy,
                    slots=endpoint.slots,
                    limiter=endpoint.limiter,
                    structured_method=endpoint.spec.structured_method,
                    cache=self._response_cache() if cached else None,
                    budget=self.budget,
                    cache_endpoint=endpoint.spec.answer_identity(),
                )
            return self._llms[role, ref]

    def _endpoint(self, ref: str, role: str) -> Endpoint:
        """The shared endpoint behind ``ref`` (caller holds the lock)."""
        fake = self._override(ref, role)
        if fake is not None:
            key = f"fake:{fake}"
            spec = parse_model_ref(ref, self.config.models) if fake == ref else self.spec(role)
            if key not in self._endpoints:
                self._endpoints[key] = open_endpoint(spec, chat=self.chat_overrides[fake], label=self._fake_label(fake))
            return self._endpoints[key]
        spec = parse_model_ref(ref, self.config.models)
        key = spec.model_dump_json()
        if key not in self._endpoints:
            if spec.provider == "embedded":
                embedded_base_url(self.console)  # its start (seconds) shown on the run's console as a step
            if spec.provider == "agent":
                from dyneval.runtime.agents.chat import AgentChat
                from dyneval.runtime.agents.reference import load_agent

                chat = AgentChat(app=load_agent(ref), thread_prefix=self.run_dir.name, history=self.agent_history)
                self._endpoints[key] = open_endpoint(spec, chat=chat, label=ref)
            else:
                self._endpoints[key] = open_endpoint(spec)
        return self._endpoints[key]

    def agent_states(self, unit: str, *, earlier: bool = False) -> dict[str, Any] | None:
        """The agent target's final state on each of ``unit``'s threads (``{thread id: state}``, as the agent holds
        it; ``None`` when no agent answered in it), for the unit's record (:mod:`runtime.agents.state_check`).

        ``earlier``: the unit went on from a checkpoint an earlier session (or Ray runner) made, so its threads
        include those the event log says it had turns on there, and this process maybe none: their state is read
        from the agent now (a unit re-judged on resume sends the agent nothing)."""
        from dyneval.runtime.agents.chat import AgentChat
        from dyneval.runtime.agents.state_check import earlier_states

        with self._lock:
            chats = [e.chat for e in self._endpoints.values() if isinstance(e.chat, AgentChat)]
        states: dict[str, Any] = {}
        for chat in chats:
            states.update(chat.final_states(unit) or {})
        if earlier:
            states.update(earlier_states(self.agent_history.of_unit(unit), states))
        return states or None

    def source_agent_fields(self, unit: str) -> dict[str, Any]:
        """A re-score's (``config.rescored_from``) record fields of ``unit``'s agent threads: the source record's
        (:func:`runtime.replay.source_agent_fields`), read once per process."""
        from dyneval.runtime.replay import source_agent_fields

        source = self.run_dir.parent / str(self.config.rescored_from)
        return dict(self.cached("rescore:agent_fields", lambda: source_agent_fields(source)).get(unit, {}))

    def in_flight(self) -> int:
        """Requests on their way to any endpoint of this run right now (the live progress line shows it): this
        process's, or the whole cluster's where the requests leave it (:attr:`remote_in_flight`)."""
        if self.remote_in_flight is not None:
            return self.remote_in_flight()
        with self._lock:
            return sum(e.slots.in_flight for e in self._endpoints.values())

    def _response_cache(self) -> ResponseCache:
        """The run's response cache (``--cache``), opened on first use (caller holds the lock)."""
        if "responses" not in self._cache:
            from dyneval.runtime.cache import ResponseCache
            from dyneval.stores.files import user_cache_folder

            stores = self.config.stores
            folder = Path(stores.cache_dir) if stores.cache_dir else user_cache_folder()
            expiry = stores.cache_expiry_hours * 3600 if stores.cache_expiry_hours else None
            self._cache["responses"] = ResponseCache(folder, expiry)
        return self._cache["responses"]

    def _override(self, ref: str, role: str) -> str | None:
        return next((key for key in (ref, role) if key in self.chat_overrides), None)

    def _fake_label(self, fake: str) -> str:
        """A stand-in chat model's label: where a replay's replies come from (``--rescore``), else ``fake:KEY``."""
        return getattr(self.chat_overrides[fake], "replay_of", None) or f"fake:{fake}"

    def model_label(self, role: str, ref: str | None = None) -> str:
        """The label of the model :meth:`model` resolves for ``role`` (and ``ref``), without building it."""
        ref = self.config.role_ref(role) if ref is None else ref
        fake = self._override(ref, role)
        return self._fake_label(fake) if fake is not None else model_label(parse_model_ref(ref, self.config.models))

    def ceiling_notes(self, roles: Iterable[str]) -> list[str]:
        """One line per model of ``roles`` whose ``concurrency`` ceiling holds fewer requests in flight than the
        run's ``--concurrency`` (without a ceiling a model takes as many as the run sends)."""
        ceilings: dict[str, int] = {}
        for role in roles:
            spec = self.spec(role)
            if spec.concurrency is not None and spec.concurrency < self.config.concurrency:
                ceilings.setdefault(self.model_label(role), spec.concurrency)
        return [
            f"{label}: at most {n} request(s) in flight (its `concurrency` ceiling), below --concurrency "
            f"{self.config.concurrency}; units queue for it"
            for label, n in ceilings.items()
        ]

    def cached(self, key: str, build: Any) -> Any:
        """A per-run lazily built resource (vector store, graph, bank), built once under a lock; one that
        :meth:`start_background` builds is waited for (:meth:`Background.result`)."""
        with self._lock:
            job = self._background.get(key)
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        if job is not None:
            return job.result()
        with key_lock:  # not under the services lock: a builder may itself ask for llm() or chroma()
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def start_background(self, key: str, label: str, build: Callable[[Background], Any]) -> Background:
        """Build the resource :meth:`cached` serves under ``key`` on a daemon thread (once per run), so work that
        does not need it goes on meanwhile; ``build`` gets the job to report its progress."""
        with self._lock:
            if key not in self._background:
                job = self._background[key] = Background(label)
                threading.Thread(target=job.run, args=(build,), name=f"build-{label}", daemon=True).start()
            return self._background[key]

    def background(self) -> list[Background]:
        """The resources started with :meth:`start_background` (the runner shows and awaits them)."""
        with self._lock:
            return list(self._background.values())

    @property
    def data_dir(self) -> Path:
        """Per-run data (Chroma collections, question bank copies ...)."""
        path = self.run_dir / "data"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def cache_dir(self) -> Path:
        """Shared across runs under the same ``--out`` (e.g. a context graph keyed by corpus hash); its owner's only
        (llmeval's default bank, with its reference answers, lives here)."""
        return private_folder(self.run_dir.parent / "_cache")

    def chroma(self, path: Path | None = None) -> ClientAPI:
        """The Chroma client (server when configured, else on disk at ``path`` or ``data_dir/chroma``)."""
        folder = path or self.data_dir / "chroma"
        return self.cached(f"chroma:{folder}", lambda: chroma_client(folder, self.config.stores.chroma_url))

    def embeddings(self) -> Any:
        """The run's embedding function (Chroma-compatible, callable on texts): its ``embedding_model`` on its
        ``embedding_backend``."""
        return embedding_function(self.config.stores.embedding_model, self.config.stores.embedding_backend)


_studio_lock = threading.Lock()
_studio_services: dict[tuple, Services] = {}


def services_of(context: Any) -> Services:
    """The :class:`Services` of a run context; built from its fields when the command line did not set them."""
    if getattr(context, "services", None) is not None:
        return context.services
    refs = context.role_refs()
    key = (context.config_file, context.run_dir, tuple(sorted(refs.items())))
    with _studio_lock:
        if key not in _studio_services:
            file_data = read_config_file(context.config_file) if context.config_file else {}
            config = load_config(
                "studio",
                config_file=None,
                environ={},
                flags={"models": file_data.get("models", {}), "roles": refs, "stores": file_data.get("stores", {})},
            )
            run_dir = Path(context.run_dir or os.path.join("runs", "studio"))
            run_dir.mkdir(parents=True, exist_ok=True)
            from dyneval.runtime.pricing import Pricing

            _studio_services[key] = Services(
                config=config,
                run_dir=run_dir,
                events=EventLog(run_dir / "events.jsonl", pricing=Pricing.for_run(config)),
            )
        return _studio_services[key]
