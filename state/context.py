"""The run context every protocol graph takes (``context_schema``), and how a protocol parameter is declared.

Fields are plain values so LangGraph Studio can show and edit them; the shared
ones fall back to a ``DYNEVAL_*`` environment variable. The command line also passes the
live :class:`runtime.services.Services` in ``services``; in Studio it stays empty
and is built from the fields on first use.

A protocol parameter is declared once, as a field made with :func:`described`
(description, default, range, custom check; a ``Literal`` type gives its choices, which Studio
shows as a dropdown); :func:`options` reads the
declarations back, and the CLI flags, their help, the ``[params]`` check and the
range checks are generated from them.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from dyneval.state.errors import InputError


def described(
    default: Any,
    description: str,
    env: str | None = None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    check: Callable[[Any], Any] | None = None,
    cli: bool = True,
    negatable: bool = False,
    metavar: str | None = None,
) -> Any:
    """A documented parameter field (Studio shows the description), optionally env-backed.

    ``minimum``, ``maximum`` and ``check`` (a function raising ``ValueError`` with the reason) are the
    value's checks, besides the choices of a ``Literal`` field type; ``cli=False`` keeps a Studio-only field off
    the command line; ``negatable`` gives a boolean that defaults to off a ``--no-`` flag
    too; ``metavar`` names the flag's value in ``--help``.
    """
    metadata = {
        "description": description,
        "minimum": minimum,
        "maximum": maximum,
        "check": check,
        "cli": cli,
        "negatable": negatable,
        "metavar": metavar,
    }
    if env:
        return field(default_factory=lambda: _from_env(f"DYNEVAL_{env.upper()}", default), metadata=metadata)
    return field(default=default, metadata=metadata)


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

    target: str = described(
        "local", "Model under test: 'local', a name from the config file, openai/MODEL or MODEL@BASE_URL.", env="target"
    )
    evaluator: str = described(
        "local", "Evaluator / judge / interviewer model (same forms as target).", env="evaluator"
    )
    teacher: str = described("", "Teacher model; empty = evaluator.", env="teacher")
    orchestrator: str = described("", "Orchestrator model; empty = evaluator.", env="orchestrator")
    student: str = described("", "Student model; empty = target.", env="student")
    grader: str = described("", "Grader model; empty = evaluator.", env="grader")
    config_file: str = described("", "TOML/YAML file defining named models under [models.NAME].", env="config")
    run_dir: str = described("", "Folder for stores and logs; empty = runs/studio.", env="run_dir")
    seed: int = described(0, "Seed for every random choice of the unit.", env="seed")
    services: Any = field(default=None, metadata={"description": "Set by the command line; leave empty in Studio."})

    def role_refs(self) -> dict[str, str]:
        """Roles set in this context (empty ones follow the default chain)."""
        names = ("target", "evaluator", "teacher", "orchestrator", "student", "grader")
        return {name: getattr(self, name) for name in names if getattr(self, name)}


@dataclass(frozen=True)
class Option:
    """One declared parameter, as :func:`described` made it: the source of its flag, help and checks."""

    name: str
    type: Any  # the field's type, ``X | None`` unwrapped to ``X``
    default: Any
    description: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], Any] | None = None
    cli: bool = True
    negatable: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is refused (its choices, range or check), or ``None``."""
        for v in value if isinstance(value, list) else [value]:
            if self.choices is not None and v not in self.choices:
                return f"{v!r} is not one of {', '.join(map(str, self.choices))}"
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            low, high = self.minimum, self.maximum
            if low is not None and high is not None and not low <= v <= high:
                return f"must be between {low} and {high} (got {v})"
            if low is not None and v < low:
                return f"must be at least {low} (got {v})"
            if high is not None and v > high:
                return f"must be at most {high} (got {v})"
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                return str(exc)
        return None

    def validate(self, value: Any) -> None:
        """:class:`InputError` naming the flag when ``value`` (given, not ``None``) is refused."""
        if value is not None and (problem := self.problem(value)):
            raise InputError(problem, field=self.flag)


def options(cls: type | None) -> list[Option]:
    """The parameters a dataclass declares with :func:`described` (the shared :class:`BaseContext` fields
    excepted), in declaration order."""
    if cls is None:
        return []
    hints = typing.get_type_hints(cls)
    shared = {f.name for f in dataclasses.fields(BaseContext)}
    out = []
    for f in dataclasses.fields(cls):
        if f.name in shared or "cli" not in f.metadata:
            continue
        kind = hints[f.name]
        if type(None) in get_args(kind):
            kind = next(a for a in get_args(kind) if a is not type(None))
        meta = dict(f.metadata)
        choices = get_args(kind) if get_origin(kind) is Literal else None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{cls.__name__}.{f.name} is a parameter without a default: declare it with described()")
        out.append(Option(f.name, kind, default, choices=choices, **meta))
    return out
