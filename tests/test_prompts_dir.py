"""``--prompts DIR``: files that replace shipped prompts by name, validated before anything starts, recorded in the
run (name and SHA-256), sent to the endpoint, and named on the comparison page beside a run with the shipped ones."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dyneval import cli
from dyneval.prompts import PROMPT_DIR, load_prompt, use_prompt_dir
from dyneval.results.view.compare import compare_payload
from tests.standin_endpoint import StandIn

MARK = "GRADE WITH MY OWN RUBRIC: the answer must state its units."
GRADER = "interview/grader_math"


def _own_grader(folder: Path, user: str | None = None) -> Path:
    """``folder/interview/grader_math.yaml``: the shipped grader with ``MARK`` before its instructions."""
    shipped = yaml.safe_load((PROMPT_DIR / f"{GRADER}.yaml").read_text(encoding="utf-8"))
    shipped["user"] = user if user is not None else f"{MARK}\n{shipped['user']}"
    path = folder / f"{GRADER}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(shipped, sort_keys=False), encoding="utf-8")
    return path


def _run(out: Path, standin: StandIn, *extra: str) -> tuple[int, str]:
    argv = ["--protocol", "interview", "--limit", "2", "--max-questions", "2", "--skip-preflight"]
    argv += ["--target", standin.spec("t"), "--evaluator", standin.spec("j"), "--out", str(out), *extra]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue()


@pytest.fixture(autouse=True)
def _shipped_prompts_after():
    yield
    use_prompt_dir(None)  # a run sets this process's prompt folder: later tests get the shipped prompts


def test_the_interview_grader_sends_the_prompt_of_one_own_and_the_run_records_it(tmp_path):
    path = _own_grader(tmp_path / "prompts")
    bodies: list[dict[str, Any]] = []

    def keep(body: dict[str, Any]) -> None:
        bodies.append(body)

    with StandIn(respond=keep) as standin:
        code, err = _run(tmp_path / "runs", standin, "--prompts", str(tmp_path / "prompts"))
        assert code == 0, err
        own = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith("_")]
        code, err = _run(tmp_path / "runs", standin)  # the same run with the shipped prompts
        assert code == 0, err
    sent = [json.dumps(b["messages"]) for b in bodies]
    graded = [s for s in sent if "Error types" in s]  # the math grader's requests, in both runs
    assert graded and sum(MARK in s for s in graded) == len(graded) // 2 > 0
    (run_dir,) = own
    config = json.loads((run_dir / "config.json").read_text())
    assert config["prompt_overrides"] == {GRADER: hashlib.sha256(path.read_bytes()).hexdigest()}
    default = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir() and p not in own and p.name[0] != "_")
    differs = [r["differs"] for r in compare_payload([default, run_dir])["runs"]]
    assert "judge prompt differs: interview/grader_math shipped" in differs[0]
    assert f"judge prompt differs: {GRADER} {config['prompt_overrides'][GRADER][:12]}" in differs[1]


@pytest.mark.parametrize(
    ("name", "user", "said"),
    [
        ("interview/grader_maths", None, "'interview/grader_maths' is not a shipped prompt"),
        (GRADER, "Grade {question} against {solution}.", "missing ['answer', 'explanation', 'response']"),
        (GRADER, "Grade {question} {explanation} {solution} {answer} {response} {rubric}", "unknown ['rubric']"),
        (GRADER, "Grade {question {explanation} {solution} {answer} {response}", "broken prompt template"),
    ],
)
def test_a_bad_prompt_file_is_refused_in_one_line_before_any_request(tmp_path, name, user, said):
    folder = tmp_path / "prompts"
    path = _own_grader(folder, user)
    if name != GRADER:
        path = path.rename(folder / f"{name}.yaml")
    with StandIn() as standin:
        code, err = _run(tmp_path / "runs", standin, "--prompts", str(folder))
        assert standin.requests == []
    assert code == 2
    assert said in err and str(path) in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_prompts_folder_from_the_config_file_is_used_and_a_missing_one_is_named(tmp_path):
    _own_grader(tmp_path / "prompts")
    config = tmp_path / "eval.toml"
    config.write_text(f'prompts = "{tmp_path / "prompts"}"\n', encoding="utf-8")
    with StandIn() as standin:
        code, err = _run(tmp_path / "runs", standin, "--config", str(config), "--limit", "1")
        assert code == 0, err
        assert MARK in load_prompt(GRADER).template.messages[1].prompt.template  # type: ignore[union-attr]
        config.write_text(f'prompts = "{tmp_path / "nowhere"}"\n', encoding="utf-8")
        code, err = _run(tmp_path / "runs", standin, "--config", str(config))
    assert code == 2 and "eval.toml" in err and "is not a folder of prompt files" in err, err
