"""Build a :class:`RunConfig` from defaults, a config file, env vars and CLI flags.

Later sources win: defaults < file < ``DYNEVAL_*`` env vars < flags. Every value
keeps its provenance through the merge, so an error names the real source: the
flag (``--concurrency``), the environment variable (``DYNEVAL_CONCURRENCY``) or
the config file and key (``eval.toml: [models.gpt] temperature``).

Unknown keys are errors, never ignored: a typo in the config file (top level,
``[models.*]``, ``[stores]``, ``[roles]``, ``[params]``) stops the run with the
key and the closest known name. ``[params]`` takes the protocol's declared
options (:meth:`runtime.protocol.Protocol.options`) by name, typed like their
flags; every parameter, wherever it came from, passes the checks declared with it.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from dyneval.prompts import PromptDirError, check_prompt_dir
from dyneval.runtime.models import missing_integration, resolve_api_key
from dyneval.runtime.pricing import Pricing
from dyneval.state.agent import is_agent_ref
from dyneval.state.config import ROLES, KeyedError, ModelSpec, RunConfig, StoreConfig
from dyneval.state.context import Option
from dyneval.state.errors import InputError
from dyneval.stores.inputs import TooDeep, parse_bounded

ENV_PREFIX = "DYNEVAL_"
#: env var -> top-level config key (roles are DYNEVAL_TARGET, DYNEVAL_EVALUATOR, ...).
_ENV_SCALARS = {
    "LIMIT": "limit",
    "CONCURRENCY": "concurrency",
    "TRIALS": "trials",
    "STATE_CHECK": "state_check",
    "SEED": "seed",
    "OUT": "out",
    "PROMPTS": "prompts",
    "MAX_CALLS": "max_calls",
    "MAX_TOKENS": "max_tokens",
    "MAX_COST": "max_cost",
    "MAX_TOKENS_PER_ROLE": "max_tokens_per_role",
    "MAX_COST_PER_ROLE": "max_cost_per_role",
}
_ENV_STORES = {
    "CHROMA_URL": "chroma_url",
    "POSTGRES_DSN": "postgres_dsn",
    "EMBEDDING_MODEL": "embedding_model",
    "EMBEDDING_BACKEND": "embedding_backend",
    "CACHE": "cache",
    "CACHE_DIR": "cache_dir",
    "CACHE_EXPIRY_HOURS": "cache_expiry_hours",
    "PRICING": "pricing",
}

Loc = tuple[str, ...]


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML with duplicate keys rejected (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a TOML or YAML (or JSON) config file into a dict (exit-2 error naming the file and line, or the key
    whose value nests deeper than :data:`stores.inputs.MAX_NESTING`)."""
    path = Path(path)
    kind = "TOML" if path.suffix == ".toml" else "YAML"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InputError(f"cannot read config file: {exc.strerror or exc}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte offset {exc.start})", file=str(path)) from None
    try:
        parse = tomllib.loads if kind == "TOML" else partial(yaml.load, Loader=_UniqueKeyLoader)  # noqa: S506
        data = parse_bounded(parse, text)
    except TooDeep as exc:
        keys = tuple(str(key) for key in itertools.takewhile(lambda key: isinstance(key, str), exc.path))
        where = {"setting": _file_key(str(path), {})(keys)} if keys else {"file": str(path)}
        raise InputError(str(exc), **where) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InputError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}{at}", file=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"the top level must be a table/mapping, not {type(data).__name__}", file=str(path))
    return data


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Config keys set through ``DYNEVAL_*`` environment variables."""
    out: dict[str, Any] = {}
    roles = {r: environ[ENV_PREFIX + r.upper()] for r in ROLES if environ.get(ENV_PREFIX + r.upper())}
    if roles:
        out["roles"] = roles
    for env, key in _ENV_SCALARS.items():
        if environ.get(ENV_PREFIX + env):
            out[key] = environ[ENV_PREFIX + env]
    stores = {key: environ[ENV_PREFIX + env] for env, key in _ENV_STORES.items() if environ.get(ENV_PREFIX + env)}
    if stores:
        out["stores"] = stores
    return out


def check_env_names(environ: Mapping[str, str]) -> None:
    """A ``DYNEVAL_*`` variable that is a near miss of a setting's variable (``DYNEVAL_CONCURENCY``) is an error;
    other ``DYNEVAL_*`` names are left alone (other modules and user protocols read their own)."""
    known = [r.upper() for r in ROLES] + list(_ENV_SCALARS) + list(_ENV_STORES)
    for name in environ:
        suffix = name.removeprefix(ENV_PREFIX)
        if name.startswith(ENV_PREFIX) and suffix not in known:
            close = difflib.get_close_matches(suffix, known, n=1, cutoff=0.8)
            if close:
                raise InputError(f"not a dyneval setting; did you mean {ENV_PREFIX + close[0]}?", setting=name)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; values of ``override`` win, ``None`` means "not given"."""
    out = dict(base)
    for key, value in override.items():
        if value is None:
            continue
        if isinstance(value, dict):
            out[key] = merge(out[key] if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = value
    return out


# -- provenance --------------------------------------------------------------------------------------------------

#: Settings that have a command-line flag of their own (besides roles, stores and protocol params).
_FLAGGED = frozenset(
    {
        ("limit",),
        ("concurrency",),
        ("trials",),
        ("state_check",),
        ("seed",),
        ("out",),
        ("max_calls",),
        ("max_tokens",),
        ("max_cost",),
        ("max_tokens_per_role",),
        ("max_cost_per_role",),
    }
)


def _flag_namer(param_flags: Mapping[str, str]) -> Callable[[Loc], str | None]:
    """Loc -> its command-line flag (``roles.target`` -> ``--target``), or ``None`` for a key without one."""

    def flag(loc: Loc) -> str | None:
        if loc[:1] == ("params",) and len(loc) == 2:
            return param_flags.get(loc[1], "--" + loc[1].replace("_", "-"))
        if loc in _FLAGGED or (len(loc) == 2 and loc[0] in ("roles", "stores")):
            return "--" + loc[-1].replace("_", "-")
        return None

    return flag


def _env_var(loc: Loc) -> str:
    names: dict[Loc, str] = {("roles", r): r.upper() for r in ROLES}
    names.update({(key,): env for env, key in _ENV_SCALARS.items()})
    names.update({("stores", key): env for env, key in _ENV_STORES.items()})
    return ENV_PREFIX + names.get(loc[:2], "")


def _file_key(path: str, data: dict[str, Any]) -> Callable[[Loc], str]:
    """``eval.toml: [models.gpt] temperature`` or ``eval.toml: [models.gpt]`` (TOML), or
    ``eval.yaml: models.gpt.temperature`` (YAML, JSON)."""

    def key(loc: Loc) -> str:
        if not path.endswith(".toml"):
            return f"{path}: {'.'.join(loc)}"
        value: Any = data
        for part in loc:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, dict):
            return f"{path}: [{'.'.join(loc)}]"
        return f"{path}: [{'.'.join(loc[:-1])}] {loc[-1]}" if len(loc) > 1 else f"{path}: {loc[0]}"

    return key


def _paths(data: Mapping[str, Any], prefix: Loc = ()) -> Iterator[Loc]:
    """Every key path set in ``data``: values, and tables holding at least one (``None`` = not set)."""
    for key, value in data.items():
        loc = (*prefix, str(key))
        if isinstance(value, dict):
            inner = list(_paths(value, loc))
            yield from [loc, *inner] if inner else []
        elif value is not None:
            yield loc


@dataclass
class _Sources:
    """Which layer set each key path last, rendered as the place a user would look."""

    where: dict[Loc, str] = dataclasses.field(default_factory=dict)

    def add(self, data: Mapping[str, Any], render: Callable[[Loc], str]) -> None:
        for loc in _paths(data):
            self.where[loc] = render(loc)

    def of(self, loc: Loc) -> str:
        """The source of ``loc`` or of the nearest table holding it."""
        for n in range(len(loc), 0, -1):
            if loc[:n] in self.where:
                return self.where[loc[:n]]
        return "configuration"

    def by_flag(self, flag_of: Callable[[Loc], str | None]) -> dict[str, str]:
        """Flag -> real source, for settings whose value did not come from the command line."""
        return {flag: src for loc, src in self.where.items() if (flag := flag_of(loc)) and src != flag}


# -- protocol parameters -----------------------------------------------------------------------------------------


@dataclass
class ParamSchema:
    """What ``[params]`` may hold for one protocol: its declared options (context and batch-only fields)."""

    protocol: str
    options: dict[str, Option]

    @property
    def flags(self) -> dict[str, str]:
        return {name: o.flag for name, o in self.options.items() if o.cli}

    @classmethod
    def of(cls, protocol_cls: Any) -> ParamSchema:
        """From a :class:`runtime.protocol.Protocol` subclass: the options it declares."""
        return cls(protocol_cls.name, {o.name: o for o in protocol_cls.options()})

    def check(self, params: dict[str, Any], sources: _Sources) -> dict[str, Any]:
        """Typed values of ``params`` (from the file); unknown names and wrong types are errors."""
        out = {}
        for name, value in params.items():
            where = sources.of(("params", name))
            if name not in self.options:
                close = difflib.get_close_matches(name, self.options, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"see dyneval --protocol {self.protocol} --help"
                raise InputError(f"unknown parameter of {self.protocol}; {hint}", setting=where)
            try:
                out[name] = TypeAdapter(self.options[name].type).validate_python(value)
            except ValidationError as exc:
                raise InputError(_message(exc.errors()[0]), setting=where) from None
        return out

    def check_values(self, params: dict[str, Any], sources: _Sources) -> None:
        """The declared choices, ranges and checks of every parameter, blamed on where its value came from."""
        for name, value in params.items():
            option = self.options.get(name)
            if option is not None and value is not None and (problem := option.problem(value)):
                raise InputError(problem, setting=sources.of(("params", name)))


# -- loading -----------------------------------------------------------------------------------------------------

_TABLES: dict[Loc, type[BaseModel]] = {(): RunConfig, ("stores",): StoreConfig}


def _known_keys(table: Loc) -> list[str]:
    model = ModelSpec if table[:1] == ("models",) and len(table) == 2 else _TABLES.get(table)
    return list(model.model_fields) if model else []


def _message(err: Mapping[str, Any]) -> str:
    """A pydantic error as a short sentence, with the offending value when it is a plain scalar."""
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), _known_keys(tuple(map(str, err["loc"][:-1]))), n=1)
        return "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    if err["type"] != "value_error" and isinstance(value, (str, int, float)) and len(str(value)) <= 80:
        msg += f" (got {value!r})"
    return msg


def _loc(err: Mapping[str, Any]) -> Loc:
    loc = tuple(str(p) for p in err["loc"])
    error = (err.get("ctx") or {}).get("error")
    return (*loc, error.key) if isinstance(error, KeyedError) else loc


def load_config(
    protocol: str,
    *,
    config_file: str | None,
    flags: dict[str, Any],
    environ: Mapping[str, str] | None = None,
    params: ParamSchema | None = None,
) -> RunConfig:
    """Resolve the run configuration; any problem becomes one :class:`InputError` naming its real source.

    ``params`` (the protocol's :class:`ParamSchema`) checks ``[params]`` of the config file; without it
    they are passed through unchecked.
    """
    sources = _Sources()
    data: dict[str, Any] = {"protocol": protocol}
    if config_file:
        file_data = read_config_file(config_file)
        sources.add(file_data, _file_key(config_file, file_data))
        if file_data.get("protocol", protocol) != protocol:
            raise InputError(
                f"is {file_data['protocol']!r}, but --protocol is {protocol!r}", setting=sources.of(("protocol",))
            )
        if params is not None and isinstance(file_data.get("params"), dict):
            file_data["params"] = params.check(file_data["params"], sources)
        data = merge(data, file_data)
    environ = os.environ if environ is None else environ
    check_env_names(environ)
    env = env_overrides(environ)
    sources.add(env, _env_var)
    data = merge(data, env)
    flag_of = _flag_namer(params.flags if params else {})
    sources.add(flags, lambda loc: flag_of(loc) or "command line")
    data = merge(data, flags)
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(_message(err), setting=sources.of(_loc(err))) from None
    config._sources = sources.by_flag(flag_of)
    _check_api_keys(config, sources)
    _check_agents(config, sources)
    _check_pricing(config, sources)
    _check_prompts(config, sources)
    if params is not None:
        params.check_values(config.params, sources)
    config.make_paths_absolute()  # after the checks, whose messages name the paths as the user gave them
    return config


def _check_api_keys(config: RunConfig, sources: _Sources) -> None:
    """A role whose endpoint needs a key from an unset environment variable, or whose provider's extra is not
    installed, is bad input, found now."""
    for role in ROLES:
        if problem := missing_integration(config.spec_for(role)):
            ref = config.role_ref(role)
            raise InputError(problem, setting=sources.of(("models", ref) if ref in config.models else ("roles", role)))
        try:
            resolve_api_key(config.spec_for(role))
        except InputError as exc:
            ref = config.role_ref(role)
            loc = ("models", ref, "api_key_env") if ref in config.models else ("roles", role)
            raise InputError(exc.message, setting=sources.of(loc)) from None


def _check_agents(config: RunConfig, sources: _Sources) -> None:
    """An agent target that cannot be imported (no module, no attribute, not a graph or app) is bad input, found
    before anything runs."""
    from dyneval.runtime.agents.reference import load_agent

    for role, ref in config.roles.items():
        if is_agent_ref(ref):
            try:
                load_agent(ref)
            except ValueError as exc:
                raise InputError(str(exc), setting=sources.of(("roles", role))) from None


def _check_pricing(config: RunConfig, sources: _Sources) -> None:
    """A pricing file that cannot be read is bad input, found now; a spec may not set one price of two."""
    for name, spec in config.models.items():
        if (spec.price_in is None) != (spec.price_out is None):
            raise InputError(
                "set both price_in and price_out (USD per million tokens), or neither",
                setting=sources.of(("models", name, "price_in" if spec.price_in is None else "price_out")),
            )
    try:
        Pricing.for_run(config)
    except InputError as exc:
        raise InputError(exc.message, file=exc.file, setting=sources.of(("stores", "pricing"))) from None


def _check_prompts(config: RunConfig, sources: _Sources) -> None:
    """Every file of the prompts folder is a valid override, found now; what it overrides is recorded."""
    if config.prompts is None:
        config.prompt_overrides = {}
        return
    try:
        config.prompt_overrides = check_prompt_dir(config.prompts)
    except PromptDirError as exc:
        raise InputError(exc.message, file=exc.file, setting=None if exc.file else sources.of(("prompts",))) from None


# -- resuming ----------------------------------------------------------------------------------------------------


def check_resume_unchanged(stored: RunConfig, config: RunConfig, params: ParamSchema) -> None:
    """Refuse a resume whose models, seed or protocol parameters differ from the run's own (``config.json``).

    Finished units would keep their old answers and verdicts and the rest would get new ones: one run, two
    setups, one number. Concurrency, ``--limit`` and retries may change; anything that changes an answer may not.
    """
    hint = (
        "a resumed run keeps its settings; start a new run (without --resume) to change them, or re-judge "
        "it with --rescore RUN_ID and another judge"
    )
    for role, changed in stored.model_changes(config).items():
        was = ", ".join(f"{f} {before!r}" for f, (before, _) in changed.items())
        now = ", ".join(f"{f} {after!r}" for f, (_, after) in changed.items())
        raise InputError(
            f"the {role} model of this run has {was}, not {now}; {hint}",
            setting=config.sources.get(f"--{role}", f"--{role}"),
        )
    for flag, before, after in (
        ("--trials", stored.trials, config.trials),
        ("--state-check", stored.state_check, config.state_check),
    ):
        if before != after:
            raise InputError(
                f"this run was made with {flag} {before}, not {after}; {hint}", setting=config.sources.get(flag, flag)
            )
    if stored.seed != config.seed:
        raise InputError(
            f"this run was made with seed {stored.seed}, not {config.seed}; {hint}",
            setting=config.sources.get("--seed", "--seed"),
        )
    if stored.prompt_overrides != config.prompt_overrides:
        raise InputError(
            f"this run replaced the prompts {stored.prompt_overrides or 'none'}, not "
            f"{config.prompt_overrides or 'none'} (name: SHA-256); {hint}",
            setting=config.sources.get("--prompts", "--prompts"),
        )
    for name in sorted(set(stored.params) | set(config.params)):
        before, after = stored.params.get(name), config.params.get(name)
        if before != after:
            flag = params.flags.get(name, name)
            raise InputError(
                f"this run was made with {before!r}, not {after!r}; {hint}", setting=config.sources.get(flag, flag)
            )
