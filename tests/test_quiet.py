"""Quiet runs: libraries' warnings and log records go to the run's ``library.log``, not into the console, and the
embedding model loads without transformers' progress bar. Each check runs ``dyneval`` (or the loader) in a
subprocess, so that the warnings and log records reach the interpreter's own filters, handlers and stderr, as they
do for a user, not pytest's capture."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.standin_endpoint import StandIn


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("DYNEVAL_", "OPENAI_"))} | {"COLUMNS": "160"}


def _dyneval(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyneval", *args], capture_output=True, text=True, env=_env(), timeout=600
    )


def test_a_cached_run_prints_no_library_warning_and_logs_it_in_the_run_folder(tmp_path):
    out = tmp_path / "runs"
    with StandIn() as standin:
        argv = ["--protocol", "interview", "--limit", "2", "--max-questions", "2", "--skip-preflight"]
        argv += ["--target", standin.spec("t"), "--evaluator", standin.spec("j"), "--out", str(out)]
        argv += ["--cache", "--cache-dir", str(tmp_path / "cache")]
        first = _dyneval(argv)
        assert first.returncode == 0, first.stderr[-2000:]
        standin.requests.clear()
        second = _dyneval(argv)
        assert second.returncode == 0, second.stderr[-2000:]
        assert standin.requests == []  # every reply came from the cache: its lookups ran
    console = second.stdout + second.stderr
    assert "Warning" not in console and "warnings.warn" not in console, console[-2000:]
    logs = [p / "library.log" for p in out.iterdir() if (p / "library.log").is_file()]
    assert any("LangChainPendingDeprecationWarning" in p.read_text() for p in logs), logs


def test_the_embedding_model_loads_without_a_progress_bar_on_the_console():
    code = "from dyneval.stores.vectors import embedding_function; print(len(embedding_function(None)(['a'])[0]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["384"]
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr[-2000:]


#: A run's time in a subprocess: transformers is loaded before it (its logger prints its records itself, with a
#: handler of its own), datasets during it (as --hf-dataset loads it); each of them, a plain library logger and a
#: warning say something during the run, transformers again after it.
LOGGING_RUN = """
import logging, sys, warnings
from pathlib import Path
from transformers.utils import logging as transformers_logging
from dyneval.runtime.library_output import library_output_to
from dyneval.stores.inputs import hf_records
run, data = Path(sys.argv[1]), Path(sys.argv[2])
run.mkdir()
with library_output_to(run / "library.log"):
    print(len(hf_records(str(data), "train")))
    logging.getLogger("datasets.builder").warning("said-by-datasets")
    transformers_logging.get_logger("transformers.modeling_utils").warning("said-by-transformers")
    logging.getLogger("chromadb.telemetry").warning("said-by-a-plain-logger")
    warnings.warn("said-as-a-warning")
transformers_logging.get_logger("transformers.modeling_utils").warning("transformers-after-the-run")
"""


def test_library_log_records_during_a_run_go_to_the_run_log_and_a_librarys_own_handler_comes_back(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", LOGGING_RUN, str(tmp_path / "run"), str(data)],
        capture_output=True,
        text=True,
        env=_env() | {"HF_HOME": str(tmp_path / "hf")},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]
    said = ("said-by-datasets", "said-by-transformers", "said-by-a-plain-logger", "said-as-a-warning")
    assert [s for s in said if s in done.stderr] == [], done.stderr[-2000:]
    assert "transformers-after-the-run" in done.stderr  # its own handler is back once the run is over
    log = (tmp_path / "run" / "library.log").read_text(encoding="utf-8")
    assert all(s in log for s in said), log
    assert "WARNING transformers.modeling_utils: said-by-transformers" in log


def test_version_prints_the_installed_version_and_exits_0():
    from importlib.metadata import version

    done = _dyneval(["--version"])
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, f"dyneval {version('dyneval')}", "")


def test_a_judgeagent_run_prints_no_library_warning_or_foreign_progress_bar(tmp_path):
    """JudgeAgent builds its context graph (embeddings, entity extraction) before its units: the console holds our
    lines and the context-graph table only."""
    from tests.golden_runs import ROLES, respond

    out = tmp_path / "runs"
    with StandIn(respond=respond) as standin:
        argv = ["--protocol", "judgeagent", "--limit", "1", "--skip-preflight", "--out", str(out)]
        argv += [a for role in ROLES for a in (f"--{role}", standin.spec(role))]
        done = _dyneval(argv)
    assert done.returncode == 0, done.stderr[-2000:]
    console = done.stdout + done.stderr
    foreign = ("Warning", "warnings.warn", "Loading weights", "it/s]", "Batches:", "{'")
    assert not [f for f in foreign if f in console], console[-3000:]
