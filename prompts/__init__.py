"""Every prompt template, one YAML file each, named ``<protocol>/<role>_<step>.yaml``.

A file declares its ``variables``; :func:`load_prompt` checks that the template
uses exactly those, so a renamed variable fails at load time, not mid-run.
Templates use ``{name}`` placeholders (literal braces are doubled).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # LangChain's prompt classes load with the first prompt, not with `dyneval --help`
    from langchain_core.messages import BaseMessage
    from langchain_core.prompts import ChatPromptTemplate

PROMPT_DIR = Path(__file__).resolve().parent


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


@cache
def load_prompt(name: str) -> Prompt:
    """Load ``prompts/<name>.yaml`` (e.g. ``"atad/teacher_generate"``)."""
    from langchain_core.prompts import ChatPromptTemplate

    path = PROMPT_DIR / f"{name}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    parts = [(role, data[role]) for role in ("system", "user") if data.get(role)]
    template = ChatPromptTemplate.from_messages(parts)
    declared = tuple(data.get("variables") or ())
    used = set(template.input_variables)
    if used != set(declared):
        raise ValueError(f"prompt {name}: declares {sorted(declared)} but uses {sorted(used)}")
    return Prompt(name=name, description=data.get("description", ""), variables=declared, template=template)


def all_prompt_names() -> list[str]:
    return sorted(str(p.relative_to(PROMPT_DIR).with_suffix("")) for p in PROMPT_DIR.rglob("*.yaml"))
