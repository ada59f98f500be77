"""``--hf-dataset`` for the interview's seed questions (JudgeAgent's reader, shared through the data layer), with
``--fields`` mapping its columns; without the ``datasets`` package the message names the ``[hub]`` extra. The
dataset is a local folder of data files, which ``datasets.load_dataset`` reads offline as it reads a hub id."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest

from dyneval import cli
from dyneval.protocols.interview.data import load_seeds
from dyneval.state.errors import InputError
from tests.standin_endpoint import StandIn

ROWS = [
    {"Problem": "What is 6 times 7?", "Final": "42", "Kind": "math"},
    {"Problem": "Name the capital of France.", "Final": "Paris", "Kind": "factual"},
]


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "my_seeds"
    folder.mkdir()
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (folder / "train.jsonl").write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    return folder


def test_interview_seeds_come_from_a_dataset_with_its_columns_mapped(dataset):
    seeds = load_seeds(fields="question=Problem,answer=Final,solution=Final,task=Kind", hf_dataset=str(dataset))
    assert [(s.id, s.question, s.answer, s.task) for s in seeds] == [
        ("q0001", "What is 6 times 7?", "42", "math"),
        ("q0002", "Name the capital of France.", "Paris", "factual"),
    ]
    train = load_seeds(fields="question=Problem,answer=Final,task=Kind", hf_dataset=str(dataset), hf_split="train")
    assert [s.question for s in train] == ["What is 6 times 7?"]
    with pytest.raises(InputError, match="give --data or --hf-dataset, not both"):
        load_seeds(str(dataset / "test.jsonl"), hf_dataset=str(dataset))


def test_an_interview_run_reads_hf_dataset_and_a_missing_package_names_the_hub_extra(tmp_path, dataset, monkeypatch):
    argv = ["--protocol", "interview", "--hf-dataset", str(dataset), "--fields", "question=Problem,answer=Final"]
    argv += ["--task", "math", "--max-questions", "1", "--skip-preflight", "--out", str(tmp_path / "runs")]
    with StandIn() as standin, contextlib.redirect_stdout(io.StringIO()) as out:
        code = cli.main([*argv, "--target", standin.spec("t"), "--evaluator", standin.spec("j")])
    assert code == 0, out.getvalue()[-2000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith("_")]
    planned = [json.loads(line) for line in (run_dir / "units.jsonl").read_text().splitlines()]
    assert [u["input"]["seed"]["question"] for u in planned] == [r["Problem"] for r in ROWS]

    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    err = io.StringIO()
    with StandIn() as standin, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--target", standin.spec("t"), "--evaluator", standin.spec("j")])
    assert code == 2 and "needs the [hub] extra: pip install 'dyneval[hub]'" in err.getvalue(), err.getvalue()
    assert "--hf-dataset" in err.getvalue()


def test_an_llmeval_run_imports_its_bank_from_a_dataset_with_its_columns_mapped(tmp_path):
    folder = tmp_path / "exam"
    folder.mkdir()
    rows = [{"Subject": "math", "Q": f"What is {n} plus {n}?", "A": str(2 * n)} for n in range(1, 5)]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    argv = ["--protocol", "llmeval", "--hf-dataset", str(folder), "--fields", "discipline=Subject,question=Q,answer=A"]
    argv += ["--questions", "2", "--concurrency", "1", "--skip-preflight", "--out", str(tmp_path / "runs")]
    argv += ["--bank-db", str(tmp_path / "bank.sqlite")]
    err = io.StringIO()
    with StandIn() as standin, contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--target", standin.spec("t"), "--evaluator", standin.spec("j")])
    assert code == 0, out.getvalue()[-2000:]
    assert "examples/s" not in err.getvalue()  # no progress bar of the datasets library on the console
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert (run_dir / "bank_source.txt").read_text().startswith(f"hf:{folder} (--hf-dataset) imported into")
    asked = [json.dumps(e["messages"]) for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())]
    assert sum(any(r["Q"] in m for m in asked) for r in rows) == 2  # the session's 2 questions came from the dataset
