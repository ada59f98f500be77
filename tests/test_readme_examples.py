"""The examples of the README and of every page under ``docs/`` work as written.

Every ```python block runs as a user would run it: saved to a file and started with this interpreter in an empty
folder, with no ``DYNEVAL_*`` or ``OPENAI_*`` variable set. Its loopback URLs (``http://127.0.0.1:PORT/v1``) stand
for the reader's own servers and are pointed at the stand-in endpoint (:mod:`tests.standin_endpoint`), the embedded
model's URL too: so the block must name every model it uses, and the stand-in sees exactly those model names, never
the embedded one's. A loopback PostgreSQL address (``postgresql://USER@127.0.0.1:PORT/NAME``) stands for the
reader's database and is pointed at an empty database of the tests' throw-away server. A block that talks to the
exam server of docs/exam-server.md (``http://127.0.0.1:8765`` with ``runs/RUN_ID``) gets one, started on a free port
over the shipped sample bank with its own stand-in judge, and the run folder it made. A block that cannot run
offline (a real API key, a person at the keyboard) carries the comment ``# readme-test: skip REASON`` and is skipped
with that reason; every other block must run to exit code 0.

Every ``dyneval --protocol ...`` (or ``python run.py --protocol ...``) command anywhere in a page (shell blocks,
comments, inline code) is parsed by the real parser (:func:`dyneval.cli.build_parser`) without running, so a renamed
or removed flag breaks this test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from dyneval.state.config import embedded_spec
from dyneval.state.errors import InputError
from tests.standin_endpoint import StandIn

ROOT = Path(__file__).resolve().parents[1]
#: The README and every page under docs/, by their path from the repository root.
PAGES = {
    str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
LOOPBACK = re.compile(r"http://127\.0\.0\.1:\d+/v1")
MODEL_AT_LOOPBACK = re.compile(r"([\w.\-:/]+)@http://127\.0\.0\.1:\d+/v1")
SKIP = re.compile(r"#\s*readme-test:\s*skip\b(.*)")
POSTGRES = re.compile(r"postgresql://[\w.\-]+@127\.0\.0\.1:\d+/\w+")
EXAM_SERVER, EXAM_RUN = "http://127.0.0.1:8765", "runs/RUN_ID"
#: A model a block asks through the OpenAI client itself (``client.chat.completions.create(model="NAME", ...)``).
CLIENT_MODEL = re.compile(r"completions\.create\(\s*model=\"([^\"]+)\"")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def python_blocks() -> list[tuple[str, str]]:
    """(``PAGE:LINE`` of the fence, code) of every ```python block of every page."""
    return [
        (f"{page}:{_line_of(text, m.start())}", m.group(1))
        for page, text in PAGES.items()
        for m in re.finditer(r"^```python[ \t]*\n(.*?)^```", text, re.S | re.M)
    ]


def run_commands() -> list[tuple[str, str]]:
    """(``PAGE:LINE``, arguments after the command) of every ``dyneval --protocol`` (or ``python run.py
    --protocol``) command of every page; a command ends at a backtick, a line end or a ``#`` comment (a ``#``
    inside quotes, as in ``"langgraph:URL#ASSISTANT"``, is the argument's)."""
    command = r"(?:\bdyneval|python run\.py) (--protocol [a-z](?:\"[^\"\n]*\"|'[^'\n]*'|[^`\n#\"'])*)"
    return [
        (f"{page}:{_line_of(text, m.start())}", m.group(1).strip())
        for page, text in PAGES.items()
        for m in re.finditer(command, text)
    ]


def _clean_env(embedded_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNEVAL_", "OPENAI_"))}
    return env | {"DYNEVAL_EMBEDDED_URL": embedded_url, "PYTHONUNBUFFERED": "1"}


def test_every_page_is_searched_and_the_node_embedding_example_is_among_the_blocks():
    """Guards the patterns: the README and the docs pages are read, the node example of "Using a node in your own
    graph" is among the blocks found, and the README itself still shows commands of every protocol."""
    assert "README.md" in PAGES and "docs/python-api.md" in PAGES
    assert any("single_turn_judge" in code for _, code in python_blocks())
    readme = {command.split()[1] for where, command in run_commands() if where.startswith("README.md:")}
    assert readme >= {"atad", "interview", "judgeagent", "llmeval", "judgecheck"}
    assert len(run_commands()) >= 40


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=[where for where, _ in python_blocks()])
def test_python_block_runs_as_written_with_the_models_it_names(where, code, tmp_path, request):
    if m := SKIP.search(code):
        reason = m.group(1).strip(" :-—")
        assert reason, f"{where}: '# readme-test: skip' needs a reason"
        pytest.skip(f"{where}: {reason}")
    if POSTGRES.search(code):  # the throw-away server starts only for a block that names a database
        database = request.getfixturevalue("fresh_postgres_db")("readme_example")
        code = POSTGRES.sub(database, code)
    named = set(MODEL_AT_LOOPBACK.findall(code)) | set(CLIENT_MODEL.findall(code))
    with ExitStack() as stack:
        if EXAM_SERVER in code:
            from tests.test_llmeval_server_workers import Serving

            judge = stack.enter_context(StandIn())
            bank = request.getfixturevalue("fresh_postgres_db")("readme_exam_server")
            (tmp_path / "server").mkdir()
            server = Serving(tmp_path / "server", bank, 1, judge)
            stack.callback(server.close)
            code = code.replace(EXAM_SERVER, server.base).replace(EXAM_RUN, str(server.run_dir))
        _run_block(where, code, named, tmp_path / "block")


def _run_block(where: str, code: str, named: set[str], folder: Path) -> None:
    """Run ``code`` as a script in the empty ``folder`` against a fresh stand-in; it must exit 0 having asked
    exactly the models in ``named``."""
    folder.mkdir(parents=True)
    with StandIn() as standin:
        script = folder / "example.py"
        script.write_text(LOOPBACK.sub(standin.url, code), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=folder,
            env=_clean_env(standin.url),
            capture_output=True,
            text=True,
            timeout=900,
        )
        asked = {r.model for r in standin.requests}
    assert done.returncode == 0, f"{where} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert embedded_spec().model not in asked, f"{where} silently used the embedded model"
    assert asked == named, f"{where}: models asked {sorted(asked)}, named {sorted(named)}"


@pytest.mark.parametrize(("where", "command"), run_commands(), ids=[where for where, _ in run_commands()])
def test_run_command_parses(where, command):
    from dyneval.cli import build_parser
    from dyneval.protocols import REGISTRY

    argv = shlex.split(command)
    protocol = argv[argv.index("--protocol") + 1]
    assert protocol in REGISTRY, f"{where}: unknown protocol {protocol!r}"
    parser, _ = build_parser(protocol)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's own exit: 0 after --help, 2 on a bad flag
        assert exc.code == 0, f"{where}: dyneval {command}"
        return
    except InputError as exc:
        pytest.fail(f"{where}: dyneval {command}: {exc}")
    assert args.protocol == protocol
