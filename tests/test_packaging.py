"""dyneval installs as one name and works outside this repository.

The wheel is built from a copy of the working tree, must hold the top-level name ``dyneval`` alone (and its
dist-info) with every module and data file of the card's folders, and is installed into a new virtual environment
whose dependencies come from this one. From a host application's folder holding its own ``state.py``, ``tools.py``,
``nodes/`` and ``run.py`` (names a LangGraph app often has), the installed package imports a node, runs the
README's embedding example, the Python API and the ``dyneval`` command against a stand-in endpoint. The editable
install that ``make`` makes is checked from the same kind of folder.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.standin_endpoint import StandIn
from tests.test_readme_examples import LOOPBACK, MODEL_AT_LOOPBACK, _clean_env, python_blocks

REPO = Path(__file__).resolve().parents[1]
#: The repository folders installed as `dyneval.<folder>` (each linked from `dyneval/<folder>`).
FOLDERS = ("graphs", "nodes", "tools", "state", "prompts", "stores", "runtime", "results", "protocols", "samples")
SHIPPED = {".py", ".yaml", ".j2", ".jsonl", ".md", ".html", ".js"}

#: A host application's own modules, named like ours; importing any of ours in their place would show.
HOST_FILES = {
    "state.py": "WHO = 'host state'\n",
    "tools.py": "WHO = 'host tools'\n",
    "nodes/__init__.py": "WHO = 'host nodes'\n",
    "graphs/__init__.py": "WHO = 'host graphs'\n",
    "run.py": "raise SystemExit('the host app run.py was imported')\n",
}

PROBE = """
import state, tools, nodes, graphs
from dyneval import RunResult, create_graph, evaluate
from dyneval.nodes.interview.grader import single_turn_judge
from dyneval.state.interview import InterviewContext, InterviewState
import dyneval.nodes.interview.grader as grader
assert (state.WHO, tools.WHO, nodes.WHO, graphs.WHO) == ("host state", "host tools", "host nodes", "host graphs")
print("NODE", grader.__file__)
print("GRAPH", sorted(create_graph("interview").nodes))
"""


def _host(folder: Path) -> Path:
    for name, text in HOST_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _run(python: Path | str, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built without build isolation (offline) from a copy of the working tree."""
    src = tmp_path_factory.mktemp("src") / "dyneval"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "runs", "__pycache__", "build", "*.egg-info", ".pytest_cache", ".langgraph_api"
        ),
    )
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return next(dist.glob("dyneval-*.whl"))


@pytest.fixture(scope="module")
def wheel_python(wheel, tmp_path_factory) -> Path:
    """The interpreter of a new virtual environment with the wheel installed; its dependencies are this
    environment's site-packages, appended to its path (no registry is asked)."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (site / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def test_the_wheel_installs_one_top_level_name_with_every_module_and_data_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"dyneval", wheel.name.split("-py3")[0] + ".dist-info"}
    expected = {
        f"dyneval/{p.relative_to(REPO)}"
        for folder in FOLDERS
        for p in (REPO / folder).rglob("*")
        if p.suffix in SHIPPED and "__pycache__" not in p.parts
    }
    expected |= {f"dyneval/{p.name}" for p in (REPO / "dyneval").glob("*.py")}
    assert expected - set(names) == set(), "files missing from the wheel (add the sub-package to pyproject.toml)"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "dyneval = dyneval.__main__:run" in entry_points


def test_the_installed_wheel_works_from_a_host_app_folder_with_its_own_state_tools_nodes_and_run(
    wheel_python, tmp_path
):
    host = _host(tmp_path / "host")
    with StandIn() as standin:
        env = _clean_env(standin.url)
        probe = _run(wheel_python, ["-c", PROBE], host, env)
        assert probe.returncode == 0, probe.stderr[-3000:]
        assert str(wheel_python.parents[1]) in probe.stdout.split("NODE ")[1], "the node came from outside the wheel"
        assert "'single_turn_judge'" in probe.stdout

        example = next(code for _, code in python_blocks() if "single_turn_judge" in code)
        (host / "example.py").write_text(LOOPBACK.sub(standin.url, example), encoding="utf-8")
        done = _run(wheel_python, ["example.py"], host, env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split(" - ")[0].strip() in {"correct", "wrong", "ungraded"}

        api = (
            "from dyneval import evaluate\n"
            f"r = evaluate('atad', evaluate=['api@{standin.url}'], out='runs', skip_preflight=True)\n"
            "print('UNITS', len(r.records), sorted({x['status'] for x in r.records}))\n"
        )
        done = _run(wheel_python, ["-c", api], host, env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "UNITS 7 ['ok']" in done.stdout  # the shipped sample: seven hand-written problems

        command = wheel_python.parent / "dyneval"
        done = subprocess.run(
            [str(command), "--protocol", "atad", "--evaluate", f"cli@{standin.url}", "--out", "runs"],
            cwd=host,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        asked = {r.model for r in standin.requests}
    assert asked == set(MODEL_AT_LOOPBACK.findall(example)) | {"api", "cli"}, asked
    assert len(list((host / "runs").glob("*-atad-*"))) == 2  # beside the example's runs/my-graph
    dry = _run(wheel_python, ["-m", "dyneval", "--protocol", "interview", "--dry-run", "--out", "runs"], host, env)
    assert dry.returncode == 0 and "units:" in dry.stdout, dry.stdout[-2000:] + dry.stderr[-2000:]


def test_the_editable_install_works_from_a_host_app_folder(tmp_path):
    """``make``'s install (``pip install -e``) is a path entry to the repository, whose ``dyneval/<folder>`` links
    lead to the card's folders: the host's modules (``state``, ``nodes``...) stay its own."""
    host = _host(tmp_path / "host")
    env = _clean_env("http://127.0.0.1:9/v1")
    probe = _run(sys.executable, ["-c", PROBE], host, env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    node = Path(probe.stdout.split("NODE ")[1].splitlines()[0])
    assert node.resolve().is_relative_to(REPO / "nodes"), probe.stdout
    dry = _run(sys.executable, ["-m", "dyneval", "--protocol", "interview", "--dry-run", "--out", "runs"], host, env)
    assert dry.returncode == 0 and "units:" in dry.stdout, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert not (host / "runs").exists()  # a plan leaves nothing behind
