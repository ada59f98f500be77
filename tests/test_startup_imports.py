"""Start-up stays light: `run.py --help` and planning a run that needs no vectors, figures or statistics import
none of the heavy libraries (each costs 0.2-12 s: chromadb, sentence-transformers/torch, matplotlib, scipy,
scikit-learn, FastAPI). Checked through ``sys.modules`` of a fresh interpreter, not through wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Libraries no process may load before it needs them.
HEAVY = (
    "chromadb",
    "sentence_transformers",
    "torch",
    "transformers",
    "matplotlib",
    "scipy",
    "sklearn",
    "fastapi",
    "uvicorn",
)

#: What a protocol's graph, nodes, prompts and stores bring (0.3-1 s together): a run needs them, its help does not.
RUN_ONLY = ("openai", "langchain_openai", "langgraph", "langsmith", "sqlalchemy", "jinja2")

_PROBE = """
import json, runpy, sys
sys.argv = ["run.py", *json.loads(sys.argv[1])]
try:
    runpy.run_path("run.py", run_name="__main__")
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))
"""


def loaded_after(*argv: str, printed: str | None = None) -> set[str]:
    """Top-level packages imported by ``python run.py ARGV`` in a fresh interpreter (which printed ``printed``)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(argv))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")},
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, done.stderr[-2000:]
    assert printed is None or printed in done.stdout, done.stdout[-2000:]
    return set(json.loads(line.removeprefix("MODULES ")))


def test_help_imports_no_heavy_library_nor_any_graph():
    """The full help lists every protocol's options, still without any protocol's graph or model client."""
    loaded = loaded_after("--help")
    assert "argparse" in loaded  # the probe really ran run.py
    assert not loaded & {*HEAVY, *RUN_ONLY} - {"sqlalchemy"}


@pytest.mark.parametrize("protocol", ["atad", "interview", "judgecheck", "llmeval", "judgeagent"])
def test_protocol_help_imports_neither_the_graph_nor_a_model_client(protocol):
    """A protocol's help is built from its declared options alone: no graph (LangGraph and LangChain's tracing
    stack), no model client, no prompt templates, no database layer (but llmeval's bank types, 0.1 s)."""
    loaded = loaded_after("--protocol", protocol, "--help")
    assert "argparse" in loaded
    assert not loaded & {*HEAVY, *RUN_ONLY} - ({"sqlalchemy"} if protocol == "llmeval" else set())


@pytest.mark.parametrize("protocol", ["atad", "interview"])
def test_planning_a_run_without_vectors_loads_no_embedding_model_nor_plotting(protocol, tmp_path):
    loaded = loaded_after("--protocol", protocol, "--dry-run", "--out", str(tmp_path), printed="units:")
    assert not any(tmp_path.iterdir())  # the plan was really made (printed), and left no run folder behind
    assert not loaded & set(HEAVY)


_FIRST_LINE_PROBE = """
import importlib.abc, json, runpy, sys

class FirstLibrary(importlib.abc.MetaPathFinder):
    '''Prints a marker line when the first module outside the standard library and dyneval is imported.'''
    def find_spec(self, name, path=None, target=None):
        top = name.split('.')[0]
        ours = top in ('dyneval', '_distutils_hack') or top.startswith('__')
        if top not in sys.stdlib_module_names and not ours:
            sys.meta_path.remove(self)
            print('FIRST-LIBRARY ' + top, flush=True)
        return None

sys.meta_path.insert(0, FirstLibrary())
sys.argv = ["run.py", *json.loads(sys.argv[1])]
try:
    runpy.run_path("run.py", run_name="__main__")
except SystemExit:
    pass
"""


def _output_of(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_LINE_PROBE, json.dumps(list(argv))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")},
    )
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_a_run_says_what_it_does_before_it_imports_any_library(tmp_path):
    """The first line a run prints names the protocol and what is happening, and comes before the first library
    (rich, pydantic, LangChain ...) is imported: a person sees it within the interpreter's own start-up."""
    lines = _output_of("--protocol", "interview", "--dry-run", "--out", str(tmp_path))
    marker = next(i for i, line in enumerate(lines) if line.startswith("FIRST-LIBRARY "))
    assert marker == 1, lines[:5]
    assert "interview" in lines[0] and "loading" in lines[0]
    assert any(line.startswith("units:") for line in lines)  # the run went on to its plan


def test_help_prints_no_status_line_first():
    lines = [line for line in _output_of("--protocol", "atad", "--help") if not line.startswith("FIRST-LIBRARY ")]
    assert lines[0].startswith("usage:"), lines[:3]
