"""run.py as a user runs it: bad input exits 2 with one line; dry run; help; a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dyneval.state.errors import InputError

REPO = Path(__file__).resolve().parents[1]
TOY = {"DYNEVAL_PROTOCOLS": "toy=tests.toy_protocol:ToyProtocol"}


def run_cli(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **TOY, **(env or {})}
    return subprocess.run(
        [sys.executable, "run.py", *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def _one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unknown_protocol_is_exit_2_one_line(tmp_path):
    _one_line_error(run_cli("--protocol", "nope", "--out", str(tmp_path)), "unknown protocol 'nope'")


def test_unreadable_config_is_exit_2_one_line(tmp_path):
    _one_line_error(
        run_cli("--protocol", "toy", "--config", str(tmp_path / "none.toml"), "--out", str(tmp_path)),
        "none.toml: cannot read config file",
    )


def test_bad_model_spec_is_exit_2_one_line(tmp_path):
    _one_line_error(run_cli("--protocol", "toy", "--target", "gpt-9", "--out", str(tmp_path)), "unknown model 'gpt-9'")


def test_bad_model_field_in_config_names_file_and_field(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("models:\n  m:\n    model: x\n    max_tokens: -5\nroles:\n  target: m\n")
    _one_line_error(
        run_cli("--protocol", "toy", "--config", str(cfg), "--out", str(tmp_path)),
        f"{cfg}: models.m.max_tokens: Input should be greater than 0 (got -5)",
    )


def test_error_text_is_printed_without_markup_and_argument_errors_are_one_line(tmp_path):
    """'[models]' in a message survives printing (rich markup would swallow it); argparse's usage dump is gone."""
    _one_line_error(
        run_cli("--protocol", "toy", "--target", "gpt-9", "--out", str(tmp_path)),
        "a name under [models] in the config file",
    )
    _one_line_error(
        run_cli("--protocol", "toy", "--concurrency", "many", "--out", str(tmp_path)),
        "argument --concurrency: invalid int value: 'many'",
    )


def test_unreachable_endpoint_fails_preflight_with_exit_2_before_any_unit(tmp_path):
    proc = run_cli(
        "--protocol",
        "toy",
        "--target",
        "m@http://127.0.0.1:9/v1",
        "--evaluator",
        "m@http://127.0.0.1:9/v1",
        "--out",
        str(tmp_path),
    )
    _one_line_error(proc, "endpoint for role target")
    assert not any(tmp_path.iterdir())  # a refused start leaves no run directory


def test_help_documents_common_and_protocol_options():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for option in (
        "--protocol",
        "--config",
        "--target",
        "--evaluator",
        "--teacher",
        "--limit",
        "--concurrency",
        "--seed",
        "--out",
        "--resume",
        "--dry-run",
        "--chroma-url",
        "--postgres-dsn",
    ):
        assert option in proc.stdout
    for section in ("judgeagent options", "interview options", "atad options", "llmeval options"):
        assert section in proc.stdout


def test_two_protocols_may_own_the_same_flag_name():
    """judgeagent and interview both define --data: each run gets its own protocol's --data."""
    from dyneval.cli import build_parser

    for name in ("judgeagent", "interview"):
        parser, dests = build_parser(name)
        args = parser.parse_args(["--protocol", name, "--data", "x.jsonl"])
        assert "data" in dests and args.data == "x.jsonl"
    parser, dests = build_parser("interview")
    with pytest.raises(InputError, match="unrecognized arguments: --kb"):  # a judgeagent-only flag
        parser.parse_args(["--protocol", "interview", "--kb", "docs"])


def test_dry_run_prints_plan_and_spends_nothing(tmp_path):
    proc = run_cli("--protocol", "toy", "--dry-run", "--out", str(tmp_path), "--evaluator", "m@http://127.0.0.1:9/v1")
    assert proc.returncode == 0, proc.stderr
    assert "units: 3" in proc.stdout and "m@http://127.0.0.1:9/v1" in proc.stdout
    assert not list(tmp_path.iterdir()) and "resume with" not in proc.stdout  # a plan leaves no run folder


def test_resume_of_unknown_run_is_exit_2(tmp_path):
    _one_line_error(
        run_cli("--protocol", "toy", "--resume", "no-such-run", "--out", str(tmp_path)), "no run 'no-such-run'"
    )


@pytest.mark.integration
def test_full_run_on_embedded_model_warns_smoke_test_and_writes_run_dir(tmp_path, embedded_url):
    proc = run_cli("--protocol", "toy", "--out", str(tmp_path), env={"DYNEVAL_EMBEDDED_URL": embedded_url}, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "smoke test" in proc.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["units"] == 3 and summary["usage"]["calls"] >= 7  # 1 ping + 2 per unit (+ repairs)
    assert summary["smoke_test_warning"]
    assert str(run_dir) in proc.stdout.replace("\n", "")
    assert "smoke test" in (run_dir / "report.md").read_text()
