"""Live resources of a run: role models, event log, stores.

Nodes reach them through ``services_of(runtime.context)``, never through module
globals, so a node works the same under ``run.py``, in Studio and in a user's
own graph.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI
from langchain_core.language_models import BaseChatModel

from runtime.config_loader import load_config, read_config_file
from runtime.events import EventLog
from runtime.llm import RetryPolicy, RoleLLM
from runtime.models import build_chat_model, model_label
from state.config import ModelSpec, RunConfig
from stores.vectors import chroma_client, embedding_function


@dataclass
class Services:
    """Role models, event log and stores for one run.

    ``chat_overrides`` replaces the chat model of a role (tests use LangChain
    fake chat models here); everything else still goes through :class:`RoleLLM`.
    """

    config: RunConfig
    run_dir: Path
    events: EventLog
    chat_overrides: dict[str, BaseChatModel] = field(default_factory=dict)
    retry_sleep: Any = None
    _llms: dict[str, RoleLLM] = field(default_factory=dict, repr=False)
    _chats: dict[str, tuple[BaseChatModel, Any]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _key_locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)

    def spec(self, role: str) -> ModelSpec:
        return self.config.spec_for(role)

    def llm(self, role: str) -> RoleLLM:
        """The call layer for ``role`` (built on first use; roles on one spec share its slots)."""
        with self._lock:
            if role in self._llms:
                return self._llms[role]
            spec = self.spec(role)
            if role in self.chat_overrides:
                chat, slots = self.chat_overrides[role], threading.BoundedSemaphore(spec.concurrency)
                label = f"fake:{role}"
            else:
                key = spec.model_dump_json()
                if key not in self._chats:
                    self._chats[key] = (build_chat_model(spec), threading.BoundedSemaphore(spec.concurrency))
                chat, slots = self._chats[key]
                label = model_label(spec)
            policy = RetryPolicy(max_retries=spec.max_retries)
            if self.retry_sleep is not None:
                policy.sleep = self.retry_sleep
            self._llms[role] = RoleLLM(role=role, model_label=label, chat=chat, events=self.events, policy=policy,
                                       structured_method=spec.structured_method, slots=slots)
            return self._llms[role]

    def model_label(self, role: str) -> str:
        return f"fake:{role}" if role in self.chat_overrides else model_label(self.spec(role))

    def cached(self, key: str, build: Any) -> Any:
        """A per-run lazily built resource (vector store, graph, bank), built once under a lock."""
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # not under the services lock: a builder may itself ask for llm() or chroma()
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    @property
    def data_dir(self) -> Path:
        """Per-run data (Chroma collections, question bank copies ...)."""
        path = self.run_dir / "data"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def cache_dir(self) -> Path:
        """Shared across runs under the same ``--out`` (e.g. a context graph keyed by corpus hash)."""
        path = self.run_dir.parent / "_cache"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def chroma(self, path: Path | None = None) -> ClientAPI:
        """The Chroma client (server when configured, else on disk at ``path`` or ``data_dir/chroma``)."""
        folder = path or self.data_dir / "chroma"
        return self.cached(f"chroma:{folder}", lambda: chroma_client(folder, self.config.stores.chroma_url))

    def embeddings(self) -> Any:
        """The offline sentence-transformers embedding function (Chroma-compatible, callable on texts)."""
        return embedding_function(self.config.stores.embedding_model)


_studio_lock = threading.Lock()
_studio_services: dict[tuple, Services] = {}


def services_of(context: Any) -> Services:
    """The :class:`Services` of a run context; built from its fields when run.py did not set them."""
    if getattr(context, "services", None) is not None:
        return context.services
    refs = context.role_refs()
    key = (context.config_file, context.run_dir, tuple(sorted(refs.items())))
    with _studio_lock:
        if key not in _studio_services:
            file_data = read_config_file(context.config_file) if context.config_file else {}
            config = load_config("studio", config_file=None, environ={},
                                 flags={"models": file_data.get("models", {}), "roles": refs,
                                        "stores": file_data.get("stores", {})})
            run_dir = Path(context.run_dir or os.path.join("runs", "studio"))
            run_dir.mkdir(parents=True, exist_ok=True)
            _studio_services[key] = Services(config=config, run_dir=run_dir,
                                             events=EventLog(run_dir / "events.jsonl"))
        return _studio_services[key]
