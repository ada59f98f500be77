"""llmeval without ``--bank`` imports the shipped sample into each fresh ``--out`` without loading the embedding
model (it cost 3.2 s a run): the 36 hand-written questions are distinct, so they skip the near-duplicate check and
join the near-duplicate index at the bank's next import, where a near copy of one of them is still caught."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from dyneval.protocols.llmeval.protocol import LLMEvalProtocol
from dyneval.runtime.runner import open_run
from dyneval.state.config import RunConfig
from dyneval.stores.question_bank import QuestionBank
from tests.standin_endpoint import StandIn
from tests.test_startup_imports import loaded_after

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "llmeval" / "bank.jsonl"


def test_a_fresh_run_on_the_sample_bank_loads_no_embedding_model(tmp_path):
    with StandIn() as standin:
        loaded = loaded_after(
            "--protocol",
            "llmeval",
            "--out",
            str(tmp_path),
            "--questions",
            "2",
            "--target",
            standin.spec("t"),
            "--evaluator",
            standin.spec("j"),
            "--skip-preflight",
            printed="36 imported",
        )
    assert not loaded & {"sentence_transformers", "torch", "chromadb"}
    assert json.loads(next(tmp_path.glob("*/summary.json")).read_text())["status_counts"] == {"ok": 1}
    [bank] = tmp_path.glob("_cache/llmeval_bank.sqlite")
    assert len(QuestionBank(str(bank)).index_pending()) == 36  # waiting for the bank's next import's index


def test_the_next_import_indexes_the_sample_first_and_catches_a_near_copy_of_it(tmp_path):
    config = RunConfig(protocol="llmeval", out=str(tmp_path))
    run = open_run(LLMEvalProtocol(), config, run_id=None, console=Console(quiet=True))
    run.run_dir.mkdir(parents=True)
    LLMEvalProtocol().ensure_bank(run)  # the sample, without the embedding model
    first = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    near = {
        **first,
        "uuid": "aaaaaaaa-0000-4000-8000-000000000001",
        "question": first["question"].replace("Give your reason.", "Give the reason."),
    }
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps(near) + "\n", encoding="utf-8")
    report = LLMEvalProtocol().import_bank(run, mine)
    assert report.imported == 0 and len(report.duplicates) == 1  # caught against the sample's indexed question
    from dyneval.nodes.llmeval.common import bank_of

    assert bank_of(LLMEvalProtocol()._ctx(run)).index_pending() == []
