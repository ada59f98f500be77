"""Layers point one way: every import of a project module goes down this list or stays in its own package.

    run.py -> protocols -> graphs -> nodes -> tools -> runtime -> stores -> state, prompts

``runtime`` (model resolver, LLM call layer, event log, runner) sits below the nodes and above ``stores``: it
builds on the Chroma client, the checkpointers and the result files; the pure error kinds live in
``state/errors.py`` and the user-file data layer in ``stores/inputs.py`` so that nothing below reaches up.
Imports inside functions count as much as top-level ones (a lazy import hides a cycle, it does not remove it).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Highest first; packages on one line are siblings and may not import each other.
LAYERS: list[tuple[str, ...]] = [("run",), ("protocols",), ("graphs",), ("nodes",), ("tools",), ("runtime",),
                                 ("stores",), ("state", "prompts")]
RANK = {package: len(LAYERS) - i for i, line in enumerate(LAYERS) for package in line}


def imported_modules(source: str) -> list[str]:
    """Every absolute import in ``source`` (top-level, in functions, in ``TYPE_CHECKING`` blocks); relative
    imports cannot leave their top-level package, so they never cross a layer."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append(node.module or "")
    return found


def violations(source: str, module: str) -> list[str]:
    """``module: imports target`` for each import of a project module that points up or sideways."""
    own = module.split(".")[0]
    out = []
    for target in imported_modules(source):
        top = target.split(".")[0]
        if top in RANK and top != own and RANK[top] >= RANK[own]:
            out.append(f"{module}: imports {target}")
    return out


def project_modules() -> dict[str, Path]:
    """Dotted name -> file, for run.py and every module of the layered packages."""
    modules = {"run": ROOT / "run.py"}
    for package in RANK:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def test_no_module_imports_against_the_layer_direction():
    found = [v for name, path in sorted(project_modules().items())
             for v in violations(path.read_text(encoding="utf-8"), name)]
    assert not found, "imports against the layer direction:\n" + "\n".join(found)


def test_every_installed_package_has_a_layer():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    installed = {p.rstrip("*") for p in setuptools["packages"]["find"]["include"]} | set(setuptools["py-modules"])
    assert installed == set(RANK), "place each installed package in LAYERS"


@pytest.mark.parametrize("source, module, expected", [
    ("from protocols.llmeval.metrics import mean\n", "nodes.llmeval.scoring",
     ["nodes.llmeval.scoring: imports protocols.llmeval.metrics"]),
    ("def f():\n    import runtime.inputs\n", "stores.context_graph", ["stores.context_graph: imports runtime.inputs"]),
    ("import graphs.atad, tools\n", "nodes.atad.teacher", ["nodes.atad.teacher: imports graphs.atad"]),
    ("from prompts import load_prompt\n", "state.atad", ["state.atad: imports prompts"]),
    ("from stores.files import append_line\nimport nodes.atad.common\n", "nodes.atad.teacher", []),
])
def test_the_check_sees_upward_lazy_and_sideways_imports(source, module, expected):
    assert violations(source, module) == expected
