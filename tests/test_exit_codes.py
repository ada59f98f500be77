"""The exit codes a CI job gates on (README "Exit codes", ``dyneval.gate``), each produced by a run as a user starts
it: 0 every unit ok and every threshold met, 1 an internal error, 2 bad input, 4 units failed or ungraded, 5 a
``--fail-under`` threshold missed, 6 a store down outside any unit. 3 (budget) is produced by
``tests/test_budget.py``, 130 (Ctrl-C) and 143 (SIGTERM) by ``tests/test_interrupt.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dyneval import gate
from dyneval.cli import main
from dyneval.protocols import REGISTRY
from tests.standin_endpoint import StandIn
from tests.toy_protocol import ToyProtocol

REPO = Path(__file__).resolve().parents[1]


class ChromaDownProtocol(ToyProtocol):
    """A protocol whose preparation needs a Chroma server that is down (as JudgeAgent's graph build does)."""

    name = "chromadown"

    def prepare(self, run: Any, units: list) -> None:
        from dyneval.stores.vectors import chroma_client

        chroma_client(run.run_dir, "http://127.0.0.1:9").heartbeat()


class BrokenProtocol(ToyProtocol):
    """A protocol with a bug: planning raises what no input check foresaw."""

    def plan(self, run: Any) -> list:
        raise RuntimeError("a bug in planning")


def _interview(tmp_path: Path, target: str, judge: str, *extra: str, questions: int = 1) -> list[str]:
    return [
        "--protocol",
        "interview",
        "--target",
        target,
        "--evaluator",
        judge,
        "--out",
        str(tmp_path),
        "--limit",
        "2",
        "--max-questions",
        str(questions),
        "--skip-preflight",
        *extra,
    ]


def _summary(tmp_path: Path) -> dict[str, Any]:
    return json.loads(next(tmp_path.glob("*/summary.json")).read_text())


def test_a_run_with_every_unit_ok_and_its_thresholds_met_exits_0(tmp_path):
    with StandIn() as standin:
        code = main(
            _interview(
                tmp_path,
                standin.spec("t"),
                standin.spec("j"),
                "--fail-under",
                "score@1=0",
                "--fail-under",
                "followup_accuracy.overall=0",
                questions=2,
            )
        )
    assert code == gate.EXIT_OK == 0
    assert _summary(tmp_path)["status_counts"] == {"ok": 2}


def test_a_run_whose_every_unit_failed_never_exits_0(tmp_path, capsys):
    """The endpoint refuses every connection: both units end infra_error after their retries; exit 4 names them and
    the command that retries them."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[models.down]\nmodel = "down"\nbase_url = "http://127.0.0.1:9/v1"\nmax_retries = 0\n'
        '[roles]\ntarget = "down"\nevaluator = "down"\n'
    )
    code = main(
        [
            "--protocol",
            "interview",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "runs"),
            "--limit",
            "2",
            "--skip-preflight",
        ]
    )
    assert code == gate.EXIT_UNITS_FAILED == 4
    assert _summary(tmp_path / "runs")["status_counts"] == {"infra_error": 2}
    out = capsys.readouterr().out
    assert "2 of 2 units did not finish ok (2 infra_error)" in " ".join(out.split())
    assert "--resume" in out and "retries 2 of them" in " ".join(out.split())


def test_a_partly_failed_run_exits_4(tmp_path):
    """One unit's judge answers nothing usable (also after the repair): that unit ends model_error, the other ok."""

    def respond(body: dict[str, Any]) -> dict[str, Any] | None:
        text = json.dumps(body.get("messages"))
        if body.get("tools") and "question 1" in text:
            return {"role": "assistant", "content": "I would rather not give a verdict."}
        return None

    env = {**os.environ, "DYNEVAL_PROTOCOLS": "toy=tests.toy_protocol:ToyProtocol"}
    with StandIn(respond=respond) as standin:
        done = subprocess.run(
            [
                sys.executable,
                "run.py",
                "--protocol",
                "toy",
                "--target",
                standin.spec("t"),
                "--evaluator",
                standin.spec("j"),
                "--out",
                str(tmp_path),
                "--units",
                "3",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert _summary(tmp_path)["status_counts"] == {"ok": 2, "model_error": 1}


def test_a_run_whose_executor_lost_a_unit_exits_4_naming_it_and_its_resume_runs_it(tmp_path, capsys, monkeypatch):
    """An executor hands back a unit without a record while the run was not stopped (as a Ray runner whose lease
    ran out did): the run must not end 0 with that unit out of every count; the resume runs it."""
    import dyneval.runtime.executors.threads as threads

    real, lost = threads.run_unit, []

    def run_unit(protocol, run, graph, unit, context):
        if unit.id == "q1" and not lost:
            lost.append(unit.id)
            return {"unit_id": unit.id, "meta": unit.meta, "status": "interrupted"}
        return real(protocol, run, graph, unit, context)

    monkeypatch.setattr(threads, "run_unit", run_unit)
    monkeypatch.setitem(REGISTRY, "toy", "tests.toy_protocol:ToyProtocol")
    with StandIn() as standin:
        argv = [
            "--protocol",
            "toy",
            "--target",
            standin.spec("t"),
            "--evaluator",
            standin.spec("j"),
            "--out",
            str(tmp_path),
            "--units",
            "3",
            "--skip-preflight",
        ]
        assert main(argv) == gate.EXIT_UNITS_FAILED
        summary = _summary(tmp_path)
        assert summary["status_counts"] == {"ok": 2, "missing": 1} and summary["units"] == 3
        assert summary["missing_units"] == ["q1"]
        out = " ".join(capsys.readouterr().out.split())
        assert "1 of 3 units did not finish ok (1 missing)" in out and "have no record (q1)" in out
        assert main(["--protocol", "toy", "--resume", summary["run_id"], "--out", str(tmp_path)]) == gate.EXIT_OK
    assert _summary(tmp_path)["status_counts"] == {"ok": 3}


def test_a_missed_threshold_exits_5_and_says_which(tmp_path, capsys):
    with StandIn() as standin:
        code = main(_interview(tmp_path, standin.spec("t"), standin.spec("j"), "--fail-under", "score@1=1.01"))
    assert code == gate.EXIT_BELOW_THRESHOLD == 5
    assert "--fail-under: score@1 = " in capsys.readouterr().out


@pytest.mark.parametrize(
    "spec, says",
    [
        ("score@1", "is not METRIC=NUMBER"),
        ("score@1=high", "is not METRIC=NUMBER"),
        ("accuracy=0.5", "'accuracy' is not a headline metric of interview (one of: score@1"),
    ],
)
def test_a_bad_threshold_is_bad_input_before_any_request(tmp_path, capsys, spec, says):
    with StandIn() as standin:
        code = main(_interview(tmp_path, standin.spec("t"), standin.spec("j"), "--fail-under", spec))
        asked = len(standin.requests)
    assert code == gate.EXIT_BAD_INPUT == 2 and asked == 0 and not any(tmp_path.iterdir())
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--fail-under" in err and says in err


def test_an_internal_error_exits_1_with_its_traceback(tmp_path):
    env = {**os.environ, "DYNEVAL_PROTOCOLS": "broken=tests.test_exit_codes:BrokenProtocol"}
    done = subprocess.run(
        [sys.executable, "run.py", "--protocol", "broken", "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == gate.EXIT_INTERNAL == 1
    assert "Traceback" in done.stderr and "a bug in planning" in done.stderr


def test_a_store_down_outside_any_unit_exits_6_with_one_line_and_the_resume_command(tmp_path):
    env = {**os.environ, "DYNEVAL_PROTOCOLS": "chromadown=tests.test_exit_codes:ChromaDownProtocol"}
    with StandIn() as standin:
        done = subprocess.run(
            [
                sys.executable,
                "run.py",
                "--protocol",
                "chromadown",
                "--target",
                standin.spec("t"),
                "--evaluator",
                standin.spec("j"),
                "--out",
                str(tmp_path),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == gate.EXIT_INFRA == 6, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("error: Chroma server http://127.0.0.1:9") and "attempt(s)" in line
    assert "once it is back, resume with: python run.py --protocol chromadown --resume" in done.stdout


def test_the_readme_table_lists_every_exit_code():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    codes = {v for k, v in vars(gate).items() if k.startswith("EXIT_")}
    table = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert {int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)} == codes


@pytest.mark.parametrize(
    "extra, named", [(["--executor", "ray"], "--postgres-dsn"), (["--ray-address", "127.0.0.1:6379"], "--executor ray")]
)
def test_an_executor_that_cannot_run_is_refused_in_one_line_with_exit_2_before_anything_is_created(
    tmp_path, capsys, extra, named
):
    out = tmp_path / "runs"
    code = main(_interview(out, "t@http://127.0.0.1:9/v1", "j@http://127.0.0.1:9/v1", *extra))
    assert code == gate.EXIT_BAD_INPUT == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and named in lines[0], lines
    assert not out.exists()  # no run directory, no --out folder
