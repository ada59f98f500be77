"""Project conventions that Studio, the runner and users rely on, checked for every protocol."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
from pathlib import Path

import pytest

from dyneval.prompts import all_prompt_names, load_prompt
from dyneval.protocols import REGISTRY, protocol_class
from dyneval.state.context import BaseContext

REPO = Path(__file__).resolve().parents[1]
PROTOCOLS = sorted(REGISTRY)


@pytest.mark.parametrize("name", all_prompt_names())
def test_every_prompt_declares_exactly_the_variables_it_uses(name):
    prompt = load_prompt(name)  # raises when declared and used variables differ
    messages = prompt.render(**{v: f"<{v}>" for v in prompt.variables})
    text = "\n".join(str(m.content) for m in messages)
    assert all(f"<{v}>" in text for v in prompt.variables)
    assert prompt.description


@pytest.mark.parametrize("name", PROTOCOLS)
def test_graph_module_exports_builder_and_a_graph_without_checkpointer(name):
    module = importlib.import_module(f"dyneval.graphs.{name}")
    assert module.graph.checkpointer is None  # langgraph dev refuses graphs with their own
    assert module.graph.name == name
    assert issubclass(module.builder.context_schema, BaseContext)
    assert protocol_class(name)().builder() is module.builder
    fields = {f.name: f for f in dataclasses.fields(module.builder.context_schema)}
    assert all(f.metadata.get("description") for n, f in fields.items()), "undocumented context field"


def test_langgraph_json_lists_every_protocol_graph():
    graphs = json.loads((REPO / "langgraph.json").read_text())["graphs"]
    modules = {p.stem for p in (REPO / "graphs").glob("*.py") if p.stem != "__init__"}
    assert graphs == {name: f"dyneval.graphs.{name}:graph" for name in modules}
    assert set(PROTOCOLS) <= set(graphs)


@pytest.mark.parametrize("folder", ["graphs", "nodes", "tools", "stores", "state", "protocols", "runtime"])
def test_no_eval_or_exec_of_model_output_in_package_code(folder):
    for path in (REPO / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"eval", "exec"}, f"{path}:{node.lineno}"


@pytest.mark.parametrize("folder", ["nodes", "graphs"])
def test_prompts_are_not_inlined_in_nodes(folder):
    """Nodes build messages from prompts/ templates; a long literal addressed to a model is a smell."""
    for path in (REPO / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                assert len(node.value) < 300, f"{path}:{node.lineno} long string literal; move it to prompts/"


GRAPH_MODULES = sorted(p.stem for p in (REPO / "graphs").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", GRAPH_MODULES)
def test_every_router_is_typed_and_defined_beside_its_edges_in_the_graph_module(name):
    """Routing lives in graphs/<p>.py: no node routes itself with Command(goto=...), and every router is a
    function of that module with a Literal return type (else Studio draws an edge to every node)."""
    module = importlib.import_module(f"dyneval.graphs.{name}")
    assert not [n for n, spec in module.builder.nodes.items() if spec.ends], "a node routes with Command(goto=...)"
    for source, branches in module.builder.branches.items():
        for spec in branches.values():
            router = spec.path.func
            assert router.__module__ == module.__name__, f"router of {source!r} defined in {router.__module__}"
            assert spec.ends, f"router {router.__name__} of {source!r} has no Literal return type"


@pytest.mark.parametrize("name", GRAPH_MODULES)
def test_drawn_graph_has_an_edge_into_and_out_of_every_node(name):
    graph = importlib.import_module(f"dyneval.graphs.{name}").graph
    edges = graph.get_graph().edges
    nodes = set(graph.builder.nodes)
    assert nodes - {e.source for e in edges} == set(), "a node with no drawn edge out"
    assert nodes - {e.target for e in edges} == set(), "a node with no drawn edge in"
    assert "__end__" in {e.target for e in edges}


def test_node_modules_hold_no_routing():
    """No Command(goto=...) and no Literal naming a graph node or END anywhere under nodes/: routers go to graphs/."""
    targets = {"__end__"} | {
        n for name in GRAPH_MODULES for n in importlib.import_module(f"dyneval.graphs.{name}").builder.nodes
    }
    for path in (REPO / "nodes").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Command":
                assert all(k.arg != "goto" for k in node.keywords), f"{path}:{node.lineno} Command(goto=...)"
            if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
                names = {c.value for c in ast.walk(node.slice) if isinstance(c, ast.Constant)} & targets
                assert not names, f"{path}:{node.lineno} a router returning {sorted(names)}; move it to graphs/"
