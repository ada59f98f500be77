"""Every prompt template, one YAML file each, named ``<protocol>/<role>_<step>.yaml``.

A file declares its ``variables``; :func:`load_prompt` checks that the template
uses exactly those, so a renamed variable fails at load time, not mid-run.
Templates use ``{name}`` placeholders (literal braces are doubled).

``--prompts DIR`` (config key ``prompts``): a file ``DIR/<protocol>/<role>_<step>.yaml`` replaces the shipped prompt
of that name (a rubric of one's own for a judge, as deepeval's ``GEval(criteria=...)`` or promptfoo's
``llm-rubric``). :func:`check_prompt_dir` validates every file at the start of a run (a known name, the shipped
prompt's variables exactly, a template that parses) and gives each file's SHA-256, which the run records;
:func:`use_prompt_dir` makes this process's :func:`load_prompt` read them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # LangChain's prompt classes load with the first prompt, not with `dyneval --help`
    from langchain_core.messages import BaseMessage
    from langchain_core.prompts import ChatPromptTemplate

PROMPT_DIR = Path(__file__).resolve().parent


class VariablesError(ValueError):
    """A template whose placeholders are not its prompt's variables."""


class PromptDirError(ValueError):
    """A prompts folder, or a file in it (``file``), that cannot replace the shipped prompts (the caller makes it the
    run's input error)."""

    def __init__(self, message: str, file: str | None = None) -> None:
        super().__init__(message)
        self.message, self.file = message, file


@dataclass(frozen=True)
class Prompt:
    name: str
    description: str
    variables: tuple[str, ...]
    template: ChatPromptTemplate

    def render(self, **values: object) -> list[BaseMessage]:
        missing = set(self.variables) - set(values)
        extra = set(values) - set(self.variables)
        if missing or extra:
            raise KeyError(f"prompt {self.name}: missing {sorted(missing)}, unexpected {sorted(extra)}")
        return self.template.format_messages(**values)


#: The folder whose files replace shipped prompts of the same name in this process (:func:`use_prompt_dir`).
_override_dir: Path | None = None


@cache
def load_prompt(name: str) -> Prompt:
    """Load ``prompts/<name>.yaml`` (e.g. ``"atad/teacher_generate"``), or the file of that name in the folder
    :func:`use_prompt_dir` set (its variables are the shipped prompt's, whether it lists them or not)."""
    override = _override_dir / f"{name}.yaml" if _override_dir else None
    if override and override.is_file():
        return _read(override, name, load_shipped(name).variables)
    return load_shipped(name)


def load_shipped(name: str) -> Prompt:
    """The shipped prompt ``name``, whatever folder overrides it."""
    return _read(PROMPT_DIR / f"{name}.yaml", name)


def _read(path: Path, name: str, variables: tuple[str, ...] | None = None) -> Prompt:
    """The prompt in ``path``; its template must use exactly ``variables`` (default: those the file declares)."""
    from langchain_core.prompts import ChatPromptTemplate

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    parts = [(role, data[role]) for role in ("system", "user") if data.get(role)]
    template = ChatPromptTemplate.from_messages(parts)
    declared = tuple(data.get("variables") or ()) if variables is None else variables
    used = set(template.input_variables)
    if used != set(declared):
        missing, unknown = sorted(set(declared) - used), sorted(used - set(declared))
        raise VariablesError(
            f"prompt {name} takes the variables {sorted(declared)}: missing {missing}, unknown {unknown}"
        )
    return Prompt(name=name, description=data.get("description", ""), variables=declared, template=template)


def all_prompt_names() -> list[str]:
    return sorted(str(p.relative_to(PROMPT_DIR).with_suffix("")) for p in PROMPT_DIR.rglob("*.yaml"))


def check_prompt_dir(folder: str) -> dict[str, str]:
    """The prompts ``folder`` overrides, by name, each with its file's SHA-256; any file that is not a shipped
    prompt's name, does not parse, or does not use exactly the shipped prompt's variables is bad input."""
    root = Path(folder)
    if not root.is_dir():
        raise PromptDirError(f"{folder!r} is not a folder of prompt files")
    shipped = set(all_prompt_names())
    overrides: dict[str, str] = {}
    for path in sorted(root.rglob("*.yaml")):
        name = path.relative_to(root).with_suffix("").as_posix()
        if name not in shipped:
            raise PromptDirError(
                f"{name!r} is not a shipped prompt (names are <protocol>/<role>_<step>, as in "
                f"{PROMPT_DIR}; e.g. interview/grader_facts)",
                str(path),
            )
        try:
            _read(path, name, load_shipped(name).variables)
        except VariablesError as exc:  # other variables than the shipped prompt's
            raise PromptDirError(str(exc), str(path)) from None
        except (ValueError, yaml.YAMLError, AttributeError, TypeError) as exc:  # YAML, a template that does not parse
            raise PromptDirError(f"broken prompt template: {' '.join(str(exc).split())}", str(path)) from None
        overrides[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    if not overrides:
        raise PromptDirError(f"{folder!r} holds no prompt file (<protocol>/<role>_<step>.yaml)")
    return overrides


def use_prompt_dir(folder: str | None) -> None:
    """Read prompts from ``folder`` first (``None``: the shipped ones only) in this process from now on."""
    global _override_dir
    chosen = Path(folder).resolve() if folder else None
    if chosen != _override_dir:
        _override_dir = chosen
        load_prompt.cache_clear()
