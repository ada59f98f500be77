"""Run configuration: roles, model specs, stores and protocol parameters.

Precedence (lowest to highest): built-in defaults < config file (TOML or YAML)
< environment variables (``DYNEVAL_*``) < command-line flags.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from dyneval.state.agent import is_agent_ref, parse_agent_ref

Role = Literal["target", "evaluator", "teacher", "orchestrator", "student", "grader"]
ROLES: tuple[Role, ...] = ("target", "evaluator", "teacher", "orchestrator", "student", "grader")

#: Roles whose output is a judgement about another model; the embedded model in
#: one of these makes a run a smoke test only.
JUDGING_ROLES: frozenset[str] = frozenset({"evaluator", "teacher", "orchestrator", "grader"})

#: Defaults chain: a role left unset takes the spec of the role it points to.
ROLE_FALLBACK: dict[str, str] = {
    "student": "target",
    "teacher": "evaluator",
    "orchestrator": "evaluator",
    "grader": "evaluator",
}

#: Upper bounds of run settings, against typos. Each unit in flight holds a thread, and endpoints' own limits set
#: the pace long before a thousand; twenty retries with capped exponential backoff outlast any outage worth waiting
#: for. ``--limit`` only shortens a plan (which is held in memory): ten million is above any plan, a pasted number not.
#: pass^k past a hundred trials of one unit is no question anyone asks.
MAX_CONCURRENCY = 1000
MAX_UNITS = 10_000_000
MAX_TRIALS = 100
MAX_RETRIES = 20

EMBEDDED = "local"
#: Base URL of `openai/MODEL` references unless OPENAI_BASE_URL is set.
OPENAI_URL = "https://api.openai.com/v1"


class KeyedError(ValueError):
    """A validation problem at one key inside the value being validated (``roles.target``), so that the
    configuration loader can name that key and where its value came from."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def base_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint base URL (``None`` = it can)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"base URL {url!r} must be http://HOST[:PORT]/... or https://..."
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError as exc:
        return f"base URL {url!r}: {exc}"
    return None


def embedding_model_problem(model: str) -> str | None:
    """Why sentence-transformers cannot load ``model`` offline (``None`` = it can): it must be a model folder or
    a model already in a cache it reads (``SENTENCE_TRANSFORMERS_HOME``, else Hugging Face's, as
    ``huggingface_hub`` resolves it from ``HF_HUB_CACHE``, ``HF_HOME``, ``XDG_CACHE_HOME``), since nothing is
    ever downloaded."""
    if Path(model).is_dir():
        return None
    from huggingface_hub import constants  # 5 ms, and only for a model given by name

    caches = [c for c in (os.environ.get("SENTENCE_TRANSFORMERS_HOME"), constants.HF_HUB_CACHE) if c]
    names = [model] if "/" in model else [model, f"sentence-transformers/{model}"]
    if any((Path(cache) / f"models--{name.replace('/', '--')}").is_dir() for cache in caches for name in names):
        return None
    return (
        f"embedding model {model!r} is neither a folder nor in the Hugging Face cache ({' or '.join(caches)}); "
        "nothing is downloaded: give the model's folder, or MODEL@BASE_URL for an embeddings endpoint"
    )


class ModelSpec(BaseModel):
    """One model behind an OpenAI-compatible endpoint (or the embedded default)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "embedded", "anthropic", "google_genai", "ollama", "agent"] = Field(
        default="openai",
        description="`openai` = any OpenAI-compatible endpoint; `embedded` = SmolLM2 via llama.cpp; `anthropic`, "
        "`google_genai`, `ollama` = that provider's LangChain integration (an extra: runtime/models.py); "
        "`agent` = an agent target (`model` is its reference, docs/agents.md)",
    )
    model: str = Field(default="", description="model name sent to the endpoint")
    base_url: str | None = Field(default=None, description="endpoint base URL, e.g. http://127.0.0.1:8000/v1")
    api_key_env: str | None = Field(default=None, description="name of the env var holding the API key (never the key)")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=512, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(
        default=4, ge=0, le=MAX_RETRIES, description="retries on timeouts, 429 and 5xx, with exponential backoff"
    )
    requests_per_second: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="ceiling on requests in flight to this model (all roles "
        "together); unset = as many as the run sends (its --concurrency units and their parallel calls)",
    )
    structured_method: Literal["function_calling", "json_schema", "json_mode"] = "function_calling"
    price_in: float | None = Field(
        default=None,
        ge=0,
        description="USD per million input tokens (with price_out: overrides the pricing file for this model)",
    )
    price_out: float | None = Field(default=None, ge=0, description="USD per million output tokens")

    #: What this spec contributes to an answer (timeouts, retries and limits do not change one).
    ANSWER_FIELDS: ClassVar[tuple[str, ...]] = (
        "provider",
        "model",
        "base_url",
        "temperature",
        "max_tokens",
        "structured_method",
    )

    def answer_identity(self) -> dict[str, Any]:
        """The fields that change an answer: the response cache's endpoint key, what a resume may not change."""
        return {name: getattr(self, name) for name in self.ANSWER_FIELDS}

    @field_validator("base_url")
    @classmethod
    def _url_is_http(cls, url: str | None) -> str | None:
        problem = url and base_url_problem(url)
        if problem:
            raise ValueError(problem)
        return url

    @model_validator(mode="after")
    def _openai_needs_model(self) -> ModelSpec:
        if self.provider != "embedded" and not self.model:
            kind = "an openai-compatible" if self.provider == "openai" else f"a {self.provider}"
            raise ValueError(f"{kind} spec needs `model`")
        return self


def embedded_spec() -> ModelSpec:
    """The offline default: SmolLM2-135M-Instruct served by llama.cpp on loopback."""
    return ModelSpec(provider="embedded", model="smollm2-135m-instruct", concurrency=1, max_tokens=384)


#: ``PREFIX/MODEL`` -> (LangChain provider, env var of the key, env vars of a base URL other than the provider's,
#: the first set wins): the names inspect_ai gives these providers, and for Gemini also the google-genai SDK's own
#: ``GOOGLE_GEMINI_BASE_URL`` (which the SDK would read by itself; read here, the URL is in the run's model label).
PROVIDER_PREFIXES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "anthropic": ("anthropic", "ANTHROPIC_API_KEY", ("ANTHROPIC_BASE_URL",)),
    "gemini": ("google_genai", "GOOGLE_API_KEY", ("GOOGLE_BASE_URL", "GOOGLE_GEMINI_BASE_URL")),
    "ollama": ("ollama", None, ("OLLAMA_BASE_URL",)),
}


def _provider_spec(ref: str) -> ModelSpec | None:
    """``anthropic/MODEL``, ``gemini/MODEL``, ``ollama/MODEL`` (the provider's integration) or
    ``openai-api/PROVIDER/MODEL`` (an OpenAI-compatible provider at ``$PROVIDER_BASE_URL``, key from
    ``$PROVIDER_API_KEY``); ``None`` for any other reference."""
    prefix, slash, model = ref.partition("/")
    if not slash or "@" in ref:
        return None
    if prefix == "openai-api":
        name, slash, model = model.partition("/")
        if not (name and slash and model):
            raise ValueError(f"malformed openai-api/PROVIDER/MODEL {ref!r}")
        env = name.upper().replace("-", "_")
        url = os.environ.get(f"{env}_BASE_URL")
        if not url:
            raise ValueError(f"{ref!r} needs {env}_BASE_URL (the provider's OpenAI-compatible URL) to be set")
        if problem := base_url_problem(url):
            raise ValueError(f"{env}_BASE_URL {url!r} (for {ref!r}): {problem}")
        return ModelSpec(model=model, base_url=url, api_key_env=f"{env}_API_KEY")
    if prefix not in PROVIDER_PREFIXES:
        return None
    if not model:
        raise ValueError(f"malformed {prefix}/MODEL {ref!r}: MODEL is empty")
    provider, key_env, url_envs = PROVIDER_PREFIXES[prefix]
    url_env, url = next(((name, os.environ[name]) for name in url_envs if os.environ.get(name)), ("", None))
    if url and (problem := base_url_problem(url)):
        raise ValueError(f"{url_env} {url!r} (for {ref!r}): {problem}")
    return ModelSpec(provider=provider, model=model, base_url=url, api_key_env=key_env)


def parse_model_ref(ref: str, models: dict[str, ModelSpec]) -> ModelSpec:
    """Resolve a role's model reference.

    A reference is ``local`` (embedded), a name defined under ``[models.NAME]``, an inline ``MODEL@BASE_URL``, or
    ``openai/MODEL`` (OpenAI's API at ``OPENAI_BASE_URL``, default :data:`OPENAI_URL`), as inspect_ai and LiteLLM
    users write it; both take the key from ``OPENAI_API_KEY``. Other providers by name: :func:`_provider_spec`.
    An agent target (``graph:...``, ``app:...``, :mod:`state.agent`) is a spec of provider ``agent`` whose
    ``model`` is the reference.
    """
    if ref in models:
        return models[ref]
    if ref == EMBEDDED:
        return embedded_spec()
    if is_agent_ref(ref):
        parse_agent_ref(ref)  # its form; what it names is imported when the run starts (runtime.agents)
        return ModelSpec(provider="agent", model=ref)
    if (spec := _provider_spec(ref)) is not None:
        return spec
    provider, slash, model = ref.partition("/")
    if slash and provider == "openai" and "@" not in ref:
        if not model:
            raise ValueError(f"malformed openai/MODEL {ref!r}: MODEL is empty")
        url = os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
        if problem := base_url_problem(url):
            raise ValueError(f"OPENAI_BASE_URL {url!r} (for {ref!r}): {problem}")
        return ModelSpec(model=model, base_url=url, api_key_env="OPENAI_API_KEY")
    if "@" in ref:
        model, _, url = ref.partition("@")
        problem = "MODEL is empty" if not model else base_url_problem(url)
        if problem:
            raise ValueError(f"malformed MODEL@BASE_URL {ref!r}: {problem}")
        return ModelSpec(model=model, base_url=url, api_key_env="OPENAI_API_KEY")
    defined = f" (defined: {', '.join(sorted(models))})" if models else ""
    hint = f" (for OpenAI's API: openai/{ref})" if "/" not in ref else ""
    raise ValueError(
        f"unknown model {ref!r}: use 'local', a name under [models] in the config file{defined}, "
        f"openai/MODEL, anthropic/MODEL, gemini/MODEL, ollama/MODEL, openai-api/PROVIDER/MODEL or "
        f"MODEL@http://host:port/v1{hint}"
    )


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chroma_url: str | None = Field(default=None, description="Chroma server URL; unset = PersistentClient on disk")
    postgres_dsn: str | None = Field(default=None, description="PostgreSQL DSN for checkpoints (and llmeval's bank)")
    embedding_model: str | None = Field(
        default=None,
        description="sentence-transformers model name or path, or MODEL@BASE_URL for an OpenAI-compatible "
        "embeddings endpoint (key from OPENAI_API_KEY); unset = the offline all-MiniLM-L6-v2 package",
    )
    embedding_backend: Literal["openvino", "torch"] = Field(
        default="openvino",
        description="how the offline all-MiniLM-L6-v2 runs: openvino (its ONNX export, made once at first use in "
        "$XDG_CACHE_HOME/dyneval/models) or torch (sentence-transformers); embedding_model's models run on torch",
    )
    cache: bool = Field(
        default=False,
        description="response cache: reuse the accepted reply of an identical request, across runs (runtime/cache.py)",
    )
    cache_dir: str | None = Field(
        default=None, description="response cache folder; unset = $XDG_CACHE_HOME/dyneval or ~/.cache/dyneval"
    )
    cache_expiry_hours: float | None = Field(default=None, gt=0, description="ignore cached replies older than this")
    pricing: str | None = Field(
        default=None,
        description="YAML file of USD per million input/output tokens per model; "
        "unset = the shipped example prices (runtime/pricing.yaml)",
    )

    @field_validator("embedding_model")
    @classmethod
    def _embedding_model_loads(cls, model: str | None) -> str | None:
        name, at, url = (model or "").partition("@")
        if at and url.startswith(("http://", "https://")):
            problem = "MODEL is empty" if not name else base_url_problem(url)
            if problem:
                raise ValueError(f"malformed MODEL@BASE_URL {model!r}: {problem}")
        elif model:
            problem = embedding_model_problem(model)
            if problem:
                raise ValueError(problem)
        return model

    @field_validator("chroma_url")
    @classmethod
    def _chroma_is_http(cls, url: str | None) -> str | None:
        problem = url and base_url_problem(url)
        if problem:
            raise ValueError(problem.replace("base URL", "Chroma URL"))
        return url

    @field_validator("postgres_dsn")
    @classmethod
    def _dsn_is_postgres(cls, dsn: str | None) -> str | None:
        """A ``postgresql://`` URL or a libpq ``key=value`` string (the DSN itself is never echoed: it may hold a
        password)."""
        if dsn and not (dsn.startswith(("postgresql://", "postgres://")) or ("=" in dsn and "://" not in dsn)):
            raise ValueError("not a PostgreSQL DSN: use postgresql://USER@HOST/DB or 'host=... dbname=...'")
        return dsn


class RunConfig(BaseModel):
    """Everything a run needs, resolved from defaults, file, env and flags."""

    model_config = ConfigDict(extra="forbid")

    protocol: str
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    roles: dict[str, str] = Field(default_factory=lambda: {"target": EMBEDDED, "evaluator": EMBEDDED})
    limit: int | None = Field(default=None, ge=1, le=MAX_UNITS, description="process at most this many units")
    concurrency: int = Field(default=2, ge=1, le=MAX_CONCURRENCY, description="units in flight at once")
    trials: int = Field(
        default=1,
        ge=1,
        le=MAX_TRIALS,
        description="runs of each unit, each on fresh threads, for pass^k and the flip rate (runtime/trials.py)",
    )
    state_check: str | None = Field(
        default=None,
        description="MODULE:FN or path/to/file.py:FN: a check of an agent target's final state on each of its "
        "threads (runtime/agents/state_check.py)",
    )
    max_calls: int | None = Field(
        default=None, ge=1, description="budget: no request starts once the run sent this many (runtime/budget.py)"
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="budget: no request starts once the run's requests used this many prompt + completion tokens",
    )
    max_cost: float | None = Field(
        default=None,
        gt=0,
        description="budget: no request starts once the run's requests cost this many USD (runtime/pricing.py)",
    )
    max_tokens_per_role: dict[str, int] = Field(
        default_factory=dict,
        description="budget per role as logged: ROLE=N,... (no request starts once one role used N tokens)",
    )
    max_cost_per_role: dict[str, float] = Field(default_factory=dict, description="budget per role: ROLE=USD,...")
    seed: int = 0
    out: str = "runs"
    prompts: str | None = Field(
        default=None, description="folder of prompt files that replace the shipped prompts of the same name"
    )
    prompt_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="the prompts `prompts` replaces, each with its file's SHA-256 (found at the start, recorded)",
    )
    stores: StoreConfig = Field(default_factory=StoreConfig)
    params: dict[str, Any] = Field(default_factory=dict, description="protocol-specific parameters")
    rescored_from: str | None = Field(
        default=None,
        description="the run whose non-judging replies this run replays (--rescore RUN_ID, results/rescore.py)",
    )

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("out")
    @classmethod
    def _out_names_a_folder(cls, out: str) -> str:
        """An empty ``out`` would put the run's files straight into the current folder."""
        if not out.strip():
            raise ValueError(f"must name the folder that holds run directories, not {out!r}")
        return out

    @field_validator("max_tokens_per_role", "max_cost_per_role", mode="before")
    @classmethod
    def _role_limits(cls, value: Any) -> Any:
        """``ROLE=N,ROLE=N`` (a flag or environment variable) or a table; every role known, every limit > 0."""
        if isinstance(value, str):
            pairs = [p.partition("=") for p in value.split(",") if p.strip()]
            if any(not sep for _, sep, _ in pairs):
                raise ValueError(f"expected ROLE=LIMIT[,ROLE=LIMIT...], got {value!r}")
            value = {k.strip(): v.strip() for k, _, v in pairs}
        for role, limit in value.items() if isinstance(value, dict) else ():
            if role not in ROLES:
                raise KeyedError(role, f"unknown role {role!r}; roles are {', '.join(ROLES)}")
            try:
                number = float(limit)
            except (TypeError, ValueError):
                raise KeyedError(role, f"the limit of {role} is not a number: {limit!r}") from None
            if not number > 0:  # NaN too
                raise KeyedError(role, f"the limit of {role} must be greater than 0, not {limit}")
        return value

    @field_validator("roles")
    @classmethod
    def _roles_resolve(cls, roles: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """Every role is known and names a model that resolves (unset roles follow the default chain)."""
        models = info.data.get("models")
        for role, ref in roles.items():
            if role not in ROLES:
                raise KeyedError(role, f"unknown role {role!r}; roles are {', '.join(ROLES)}")
            if models is not None:  # else the models failed validation and are reported instead
                try:
                    parse_model_ref(ref, models)
                except ValueError as exc:
                    raise KeyedError(role, str(exc)) from None
        return roles

    @property
    def sources(self) -> dict[str, str]:
        """Flag -> where the value really came from, for settings not given on the command line
        (e.g. ``--concurrency`` -> ``DYNEVAL_CONCURRENCY``); see :meth:`state.errors.InputError.blamed`."""
        return self._sources

    def role_ref(self, role: str) -> str:
        """The model reference of a role, following the default chain."""
        while role not in self.roles and role in ROLE_FALLBACK:
            role = ROLE_FALLBACK[role]
        return self.roles.get(role, EMBEDDED)

    def spec_for(self, role: str) -> ModelSpec:
        return parse_model_ref(self.role_ref(role), self.models)

    def model_changes(self, other: RunConfig) -> dict[str, dict[str, tuple[Any, Any]]]:
        """Per role whose model answers differently in ``other``: each changed answer field, ``(ours, theirs)``
        (what a resume may not change and a re-score may change only for its judges)."""
        changes: dict[str, dict[str, tuple[Any, Any]]] = {}
        for role in ROLES:
            ours, theirs = self.spec_for(role).answer_identity(), other.spec_for(role).answer_identity()
            if ours != theirs:
                changes[role] = {f: (ours[f], theirs[f]) for f in ours if ours[f] != theirs[f]}
        return changes

    def embedded_judges(self) -> list[str]:
        """Judging roles served by the embedded model (results are a smoke test)."""
        return [r for r in ROLES if r in JUDGING_ROLES and self.spec_for(r).provider == "embedded"]

    def make_paths_absolute(self) -> None:
        """Make every file or folder setting absolute against this process's working folder: ``prompts``,
        ``stores.cache_dir``, ``stores.pricing`` and a ``stores.embedding_model`` that is a folder.

        The driver does it once, as it builds the run's configuration, so its threads, the Ray runners (whose
        working folder is their node's, not the driver's) and the run's saved ``config.json`` all name the same
        files. ``out`` and agent or ``--state-check`` references stay as given, since records, summaries and the
        resume hint show them; a Ray runner resolves those, and JudgeAgent's ``--kb`` and llmeval's SQLite
        ``--bank-db``, against the driver's folder where it opens them (:mod:`runtime.driver_folder`)."""
        if self.prompts:
            self.prompts = os.path.abspath(self.prompts)
        stores = self.stores
        if stores.cache_dir:
            stores.cache_dir = os.path.abspath(stores.cache_dir)
        if stores.pricing:
            stores.pricing = os.path.abspath(stores.pricing)
        if stores.embedding_model and Path(stores.embedding_model).is_dir():  # else a model name or MODEL@URL
            stores.embedding_model = os.path.abspath(stores.embedding_model)

    def masked(self) -> dict[str, Any]:
        """The config as written to the run directory: secrets never appear.

        Keys are referenced by env-var name only; a DSN or URL loses its password (a resume gets it from libpq's
        environment or password file, or from the DSN given again: docs/runs.md).
        """
        data = self.model_dump(mode="json")
        for field in ("postgres_dsn", "chroma_url"):
            if data["stores"].get(field):
                data["stores"][field] = without_password(data["stores"][field])
        return data


def without_password(address: str) -> str | None:
    """``address`` (an HTTP URL, or a PostgreSQL DSN as a URL or libpq's ``key=value`` string) without its
    password; a DSN that has one is rewritten in ``key=value`` form. ``None`` for a DSN that cannot be read without
    psycopg, which every PostgreSQL store needs."""
    if address.startswith(("http://", "https://")):
        parts = urlsplit(address)
        if parts.password is None:
            return address
        return parts._replace(netloc=f"{parts.username}@{parts.netloc.rsplit('@', 1)[1]}").geturl()
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError:
        return None
    params = conninfo_to_dict(address)
    if params.pop("password", None) is None:
        return address
    return make_conninfo("", **params)
