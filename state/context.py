"""The run context every protocol graph takes (``context_schema``).

Fields are plain values so LangGraph Studio can show and edit them; each falls
back to a ``DYNEVAL_*`` environment variable. ``run.py`` also passes the live
:class:`runtime.services.Services` in ``services``; in Studio it stays empty and
is built from the fields on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import InputError


def env_default(name: str, default: str = "") -> Any:
    """A dataclass default read from ``DYNEVAL_<NAME>`` when the context is created."""
    return field(default_factory=lambda: os.environ.get(f"DYNEVAL_{name.upper()}", default))


def described(default: Any, description: str, env: str | None = None) -> Any:
    """A documented context field (Studio shows the description), optionally env-backed."""
    if env:
        return field(default_factory=lambda: _from_env(f"DYNEVAL_{env.upper()}", default),
                     metadata={"description": description})
    return field(default=default, metadata={"description": description})


def _from_env(name: str, default: Any) -> Any:
    """``default``, or the environment variable's value as the same type (a bad value names the variable)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return type(default)(raw)
    except ValueError:
        raise InputError(f"{raw!r} is not a valid {type(default).__name__}", setting=name) from None


@dataclass(kw_only=True)
class BaseContext:
    """Models, stores and seed shared by every protocol."""

    target: str = described("local", "Model under test: 'local', a name from the config file, or MODEL@BASE_URL.",
                            env="target")
    evaluator: str = described("local", "Evaluator / judge / interviewer model (same forms as target).",
                               env="evaluator")
    teacher: str = described("", "Teacher model; empty = evaluator.", env="teacher")
    orchestrator: str = described("", "Orchestrator model; empty = evaluator.", env="orchestrator")
    student: str = described("", "Student model; empty = target.", env="student")
    grader: str = described("", "Grader model; empty = evaluator.", env="grader")
    config_file: str = described("", "TOML/YAML file defining named models under [models.NAME].", env="config")
    run_dir: str = described("", "Folder for stores and logs; empty = runs/studio.", env="run_dir")
    seed: int = described(0, "Seed for every random choice of the unit.", env="seed")
    services: Any = field(default=None, metadata={"description": "Set by run.py; leave empty in Studio."})

    def role_refs(self) -> dict[str, str]:
        """Roles set in this context (empty ones follow the default chain)."""
        names = ("target", "evaluator", "teacher", "orchestrator", "student", "grader")
        return {name: getattr(self, name) for name in names if getattr(self, name)}
