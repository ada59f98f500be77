"""Layers point one way: every import of a project module goes down this list or stays in its own package.

    dyneval (cli, api; run.py) -> protocols -> graphs -> nodes -> tools -> results -> runtime -> stores
    -> state, prompts -> samples

Every project module is imported as ``dyneval.<folder>...``: a bare ``import state`` would take a host
application's own ``state.py`` (and work only inside this repository).

``runtime`` (model resolver, LLM call layer, event log, runner) sits below the nodes and above ``stores``: it
builds on the Chroma client, the checkpointers and the result files; the pure error kinds live in
``state/errors.py`` and the user-file data layer in ``stores/inputs.py`` so that nothing below reaches up.
``results`` (summary, report, viewer, statistics, export, re-score) reads what the engine wrote; the engine hands a
finished run over at one seam, ``runtime.runner`` -> ``results.finish``, its only import of ``results``.

No import circles: among the project's modules, no module reaches itself through imports (a circle inside one
layer is allowed by the layer rule, so it has a check of its own).
Imports inside functions count as much as top-level ones (a lazy import hides a cycle, it does not remove it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Highest first; packages on one line are siblings and may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("dyneval",),
    ("protocols",),
    ("graphs",),
    ("nodes",),
    ("tools",),
    ("results",),
    ("runtime",),
    ("stores",),
    ("state", "prompts"),
    ("samples",),
]
RANK = {package: len(LAYERS) - i for i, line in enumerate(LAYERS) for package in line}
#: The repository's folders that install as ``dyneval.<folder>``.
FOLDERS = set(RANK) - {"dyneval"}
#: Imports allowed against the layer direction: the engine handing a finished run to the results.
SEAMS = {("dyneval.runtime.runner", "dyneval.results.finish")}


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


def layer(module: str) -> str | None:
    """The layer of a dotted ``dyneval...`` name: its folder, or ``dyneval`` for the package's own modules."""
    parts = module.split(".")
    if parts[0] != "dyneval":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "dyneval"


def violations(source: str, module: str) -> list[str]:
    """``module: imports target`` for each import of a project module that points up or sideways, or that names a
    project folder outside the ``dyneval`` namespace."""
    own = layer(module)
    out = []
    for target in imported_modules(source):
        top = layer(target)
        if target.split(".")[0] in FOLDERS:
            out.append(f"{module}: imports {target} (not dyneval.{target})")
        elif top is not None and top != own and RANK[top] >= RANK[own] and (module, target) not in SEAMS:
            out.append(f"{module}: imports {target}")
    return out


def project_modules() -> dict[str, Path]:
    """Dotted name -> file, for run.py, the dyneval package and every module of the layered folders."""
    modules = {"dyneval.run": ROOT / "run.py"}
    for package in RANK:
        root = ROOT / package
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            dotted = ["dyneval"] + ([package] if package != "dyneval" else []) + list(parts)
            modules[".".join(dotted[:-1] if dotted[-1] == "__init__" else dotted)] = path
    return modules


def test_no_module_imports_against_the_layer_direction():
    found = [
        v
        for name, path in sorted(project_modules().items())
        for v in violations(path.read_text(encoding="utf-8"), name)
    ]
    assert not found, "imports against the layer direction:\n" + "\n".join(found)


def test_every_installed_folder_has_a_layer():
    linked = {p.name for p in (ROOT / "dyneval").iterdir() if p.is_symlink()}
    assert linked | {"dyneval"} == set(RANK), "place each folder linked from dyneval/ in LAYERS"


def _eager(tree: ast.Module) -> list[ast.stmt]:
    """The statements run when the module is imported: top level, outside ``if TYPE_CHECKING:``, functions and
    classes (whose methods' imports are lazy)."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += node.orelse
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append(node)
    return out


def imported_project_modules(source: str, module: str, known: set[str], *, eager: bool = False) -> set[str]:
    """The project modules ``module`` imports (``from package import name`` counts as the submodule
    ``package.name`` when there is one, else the package), relative imports resolved. ``eager``: only the imports
    run when the module is imported, and the packages whose ``__init__`` each of them runs first."""
    found = set()
    package = module if (module + ".__init__") in known else module.rpartition(".")[0]
    tree = ast.parse(source)
    nodes = [n for stmt in _eager(tree) for n in ast.walk(stmt)] if eager else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    found = {name for name in found if name in known}
    if eager:  # importing a.b.c first runs package a.b's __init__, unless a.b is the importer's own ancestor
        ancestors = {module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1)}
        found |= {
            parent
            for name in found
            for k in range(1, name.count(".") + 1)
            if (parent := name.rsplit(".", k)[0]) + ".__init__" in known and parent not in ancestors
        }
    return {name for name in found if name != module}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return sorted(found)


def import_graph(*, eager: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports, for the package (top-level, lazy and ``TYPE_CHECKING`` imports;
    ``eager``: those run at import, with the package ``__init__`` each runs first) and the benches."""
    modules = project_modules()
    modules |= {"bench." + p.stem: p for p in (ROOT / "bench").glob("*.py")}
    known = set(modules) | {name + ".__init__" for name, path in modules.items() if path.name == "__init__.py"}
    return {
        name: imported_project_modules(path.read_text(encoding="utf-8"), name, known, eager=eager)
        for name, path in modules.items()
    }


def test_no_import_circles_among_the_package_and_the_benches():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_module_reaches_itself_at_import_through_a_package_init():
    """Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so a package that re-exports its modules puts them on
    every import path through it: a circle there leaves a module half-initialized, and whether the import fails
    depends on which module a program imports first."""
    found = circles(import_graph(eager=True))
    assert not found, "import-time circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_circle_through_three_modules_and_none_in_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    known = {"dyneval.x", "dyneval.x.server", "dyneval.x.protocol", "dyneval.x.__init__"}
    assert imported_project_modules(
        "from dyneval.x import server\nfrom . import protocol\n", "dyneval.x.workers", known
    ) == {"dyneval.x.server", "dyneval.x.protocol"}


def test_tests_and_benches_import_the_project_through_its_namespace():
    """tests/ and bench/ run from the repository root, where a bare ``import state`` would still work."""
    found = [
        f"{path.relative_to(ROOT)}: imports {target}"
        for folder in ("tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        for target in imported_modules(path.read_text(encoding="utf-8"))
        if target.split(".")[0] in FOLDERS
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source, module, expected",
    [
        (
            "from dyneval.protocols.llmeval.metrics import mean\n",
            "dyneval.nodes.llmeval.scoring",
            ["dyneval.nodes.llmeval.scoring: imports dyneval.protocols.llmeval.metrics"],
        ),
        (
            "def f():\n    import dyneval.runtime.inputs\n",
            "dyneval.stores.context_graph",
            ["dyneval.stores.context_graph: imports dyneval.runtime.inputs"],
        ),
        (
            "import dyneval.graphs.atad, dyneval.tools\n",
            "dyneval.nodes.atad.teacher",
            ["dyneval.nodes.atad.teacher: imports dyneval.graphs.atad"],
        ),
        (
            "from dyneval.prompts import load_prompt\n",
            "dyneval.state.atad",
            ["dyneval.state.atad: imports dyneval.prompts"],
        ),
        ("from dyneval.cli import main\n", "dyneval.protocols.atad", ["dyneval.protocols.atad: imports dyneval.cli"]),
        (
            "from dyneval.results.finish import finish_run\nfrom dyneval.results.summary import build_summary\n",
            "dyneval.runtime.runner",
            ["dyneval.runtime.runner: imports dyneval.results.summary"],
        ),
        (
            "from dyneval.results.finish import finish_run\n",
            "dyneval.runtime.unit",
            ["dyneval.runtime.unit: imports dyneval.results.finish"],
        ),
        (
            "from state.atad import TASK_IDS\n",
            "dyneval.nodes.atad.teacher",
            ["dyneval.nodes.atad.teacher: imports state.atad (not dyneval.state.atad)"],
        ),
        (
            "from dyneval.stores.files import append_line\nimport dyneval.nodes.atad.common\nimport tools\n",
            "dyneval.nodes.atad.teacher",
            ["dyneval.nodes.atad.teacher: imports tools (not dyneval.tools)"],
        ),
    ],
)
def test_the_check_sees_upward_lazy_and_sideways_imports(source, module, expected):
    assert violations(source, module) == expected
