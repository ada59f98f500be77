"""Build a :class:`RunConfig` from defaults, a config file, env vars and CLI flags.

Later sources win: defaults < file < ``DYNEVAL_*`` env vars < flags.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from runtime.errors import InputError
from state.config import ROLES, RunConfig

ENV_PREFIX = "DYNEVAL_"
#: env var -> top-level config key (roles are DYNEVAL_TARGET, DYNEVAL_EVALUATOR, ...).
_ENV_SCALARS = {"LIMIT": "limit", "CONCURRENCY": "concurrency", "SEED": "seed", "OUT": "out"}
_ENV_STORES = {"CHROMA_URL": "chroma_url", "POSTGRES_DSN": "postgres_dsn", "EMBEDDING_MODEL": "embedding_model"}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a TOML or YAML config file into a dict (exit-2 error on any problem)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read config file: {exc.strerror or exc}", file=str(path)) from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {exc}".splitlines()[0],
                         file=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError("top level must be a table/mapping", file=str(path))
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


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; values of ``override`` win, ``None`` means "not given"."""
    out = dict(base)
    for key, value in override.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(protocol: str, *, config_file: str | None, flags: dict[str, Any],
                environ: Mapping[str, str] | None = None) -> RunConfig:
    """Resolve the run configuration; any problem becomes one :class:`InputError`."""
    data: dict[str, Any] = {"protocol": protocol}
    source = "defaults"
    if config_file:
        data = merge(data, read_config_file(config_file))
        data["protocol"] = protocol
        source = config_file
    data = merge(data, env_overrides(os.environ if environ is None else environ))
    data = merge(data, flags)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise InputError(err["msg"].removeprefix("Value error, "), file=source, field=field) from None
