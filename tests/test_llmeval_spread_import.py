"""llmeval's bank import spread over a run's workers (``services.spread``, runtime/spread.py): the embeddings are
made by the spread in items of ``EMBED_BATCH`` texts, the near-duplicate decisions and the writes stay in file
order here, so the bank does not depend on the order the items end in."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dyneval.nodes.llmeval.bankio import EMBED_BATCH, NearDuplicateIndex, SpreadEmbedding, import_file, index_name
from dyneval.runtime.spread import LocalSpread, in_order
from dyneval.stores.question_bank import QuestionBank
from dyneval.stores.vectors import chroma_client
from tests.fake_embedding import HashEmbedding
from tests.planted_bank import write_planted


class EmbeddingServices:
    """What a worker's ``embed_batch`` uses of its services: the run's embedding function."""

    def __init__(self) -> None:
        self.embedding = HashEmbedding()

    def embeddings(self) -> HashEmbedding:
        return self.embedding


class ReversedSpread:
    """A test-only spread whose items leave "this process" and end last first (as Ray may return them)."""

    remote = True

    def __init__(self, services: Any) -> None:
        self.services = services
        self.items: list[int] = []

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        self.items.append(len(items))
        for i in reversed(range(len(items))):
            yield i, fn(self.services, items[i])


def _import(tmp_path: Path, name: str, path: Path, embed: Any) -> tuple[QuestionBank, Any]:
    bank = QuestionBank(tmp_path / f"{name}.sqlite")
    index = NearDuplicateIndex(chroma_client(tmp_path / f"{name}-chroma"), embed, index_name(bank))
    return bank, import_file(bank, path, index=index, threshold=0.9, augment=True, batch=200)


def _bank(bank: QuestionBank, report: Any) -> dict[str, Any]:
    active = {q.uuid for q in bank.all_questions(active_only=True)}
    return {
        "questions": [
            (q.uuid, q.question, q.parent_uuid, q.uuid in active)
            for q in sorted(bank.all_questions(), key=lambda q: q.uuid)
        ],
        "report": report.lines(),
        "imported": report.imported_ids,
    }


def test_a_spread_import_whose_items_end_in_reverse_gives_the_bank_and_report_of_an_in_order_import(tmp_path):
    path = tmp_path / "bank.jsonl"
    write_planted(path, 700)
    plain = HashEmbedding()
    expected = _bank(*_import(tmp_path, "plain", path, plain))  # the index embedding in this process, as before
    local = EmbeddingServices()
    in_order_bank = _bank(*_import(tmp_path, "local", path, SpreadEmbedding(LocalSpread(local))))
    services = EmbeddingServices()
    spread = ReversedSpread(services)
    reversed_bank = _bank(*_import(tmp_path, "reversed", path, SpreadEmbedding(spread)))

    assert reversed_bank == in_order_bank == expected
    report = expected["report"]
    assert any("near duplicate of record" in line for line in report)  # near duplicates inside the file
    assert any("exact duplicate of record" in line for line in report)
    assert any(not active for *_, active in expected["questions"])  # --augment turned multiple-choice parents off
    # several items per import batch of 200 (so reversing them mattered), none larger than one embedding batch
    assert len(spread.items) == 4 and max(services.embedding.calls) == EMBED_BATCH
    assert sum(spread.items) == len(services.embedding.calls) > len(spread.items)
    # every text embedded once, and the same texts as the in-process index embedded, call for call here
    assert sorted(services.embedding.texts) == sorted(set(services.embedding.texts)) == sorted(plain.texts)
    assert local.embedding.calls == plain.calls  # threads: one call per batch, as the index made it


def test_spread_results_are_taken_in_index_order_each_as_soon_as_those_before_it_came():
    arrivals = [(2, "c"), (0, "a"), (3, "d"), (1, "b")]
    taken: list[tuple[int, str]] = []
    seen = 0

    def arriving() -> Iterator[tuple[int, str]]:
        nonlocal seen
        for pair in arrivals:
            seen += 1
            yield pair

    for result in in_order(arriving()):
        taken.append((seen, result))
    assert taken == [(2, "a"), (4, "b"), (4, "c"), (4, "d")]
