"""llmeval bank at scale (issue 14): the batched import reports what a record-by-record import reported, a killed
import leaves whole batches and its index catches up, sessions are drawn without reading the bank yet exactly as
sampling the list of unseen questions, and the import shows its progress."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from rich.console import Console

from dyneval.nodes.llmeval.bankio import NearDuplicateIndex, import_file, index_name
from dyneval.protocols.llmeval.protocol import import_progress
from dyneval.stores.question_bank import Question, QuestionBank
from dyneval.stores.vectors import chroma_client
from tests.fake_embedding import HashEmbedding

WORDS = [f"w{i}" for i in range(400)]


def question(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, 12)) + "?"


def corpus(tmp_path: Path) -> Path:
    """30 records: originals, exact duplicates (re-cased) and near duplicates (one word added) of records in the
    same batch of 4 and in earlier batches, a UUID clash and an invalid record."""
    rng = random.Random(7)
    texts = [question(rng) for _ in range(20)]
    records = [{"uuid": f"u{i}", "discipline": "Science", "question": t, "answer": "a"} for i, t in enumerate(texts)]
    records[1] = {**records[1], "question": texts[0].upper()}  # exact dup of record 1, same batch
    records[2] = {**records[2], "question": texts[0][:-1] + " indeed?"}  # near dup of record 1, same batch
    records[9] = {**records[9], "question": texts[4][:-1] + " indeed?"}  # near dup of record 5, earlier batch
    records[13] = {**records[13], "question": texts[5].upper()}  # exact dup, earlier batch
    records[15] = {**records[15], "uuid": "u3"}  # UUID of record 4, other text
    records.append({"discipline": "Science", "question": "no answer here?"})  # invalid: rejected
    records += [{"discipline": "Law", "question": question(rng), "answer": "b"} for _ in range(9)]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def imported(tmp_path: Path, name: str, batch: int, path: Path, *, prior: Path | None = None):
    bank = QuestionBank(tmp_path / f"{name}.sqlite")
    index = NearDuplicateIndex(chroma_client(tmp_path / f"{name}-chroma"), HashEmbedding(), index_name(bank))
    if prior is not None:
        import_file(bank, prior, index=index, threshold=0.9, batch=batch)
    return bank, index, import_file(bank, path, index=index, threshold=0.9, skip_invalid=True, batch=batch)


def test_batched_import_reports_every_duplicate_and_rejection_as_record_by_record_import_does(tmp_path):
    path = corpus(tmp_path)
    reports = {batch: imported(tmp_path, f"b{batch}", batch, path)[2] for batch in (1, 4, 1000)}
    one = reports[1]  # batches of one record: every record checked against all before it, one at a time
    assert [(d.record, d.kind, d.of) for d in one.duplicates] == [
        (2, "exact", "record 1"),
        (14, "exact", "record 6"),
        (3, "near", "record 1"),
        (10, "near", "record 5"),
    ]
    assert [r for r, _ in one.rejected] == [21, 16]  # invalid record (at load), then the UUID clash
    assert (one.read, one.imported) == (30, 24)
    for batch in (4, 1000):
        got = reports[batch]
        assert got.lines() == one.lines()
        assert len(got.imported_ids) == len(one.imported_ids)  # records without a UUID get a fresh one
        assert [u for u in got.imported_ids if u[0] == "u"] == [u for u in one.imported_ids if u[0] == "u"]


def test_near_duplicates_of_a_previous_import_name_the_bank_question(tmp_path):
    rng = random.Random(3)
    text = question(rng)
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"uuid": "old", "discipline": "X", "question": text, "answer": "a"}) + "\n")
    second = tmp_path / "second.jsonl"
    second.write_text(
        "\n".join(
            json.dumps({"discipline": "X", "question": q, "answer": "a"})
            for q in [question(rng), text[:-1] + " again?", text.lower()]
        )
        + "\n"
    )
    _, _, report = imported(tmp_path, "two", 2, second, prior=first)
    assert [(d.record, d.kind, d.of) for d in report.duplicates] == [
        (3, "exact", "bank question old"),
        (2, "near", "bank question old"),
    ]


def test_a_killed_import_leaves_whole_batches_and_the_next_import_indexes_the_unindexed_one(tmp_path):
    path = corpus(tmp_path)
    bank = QuestionBank(tmp_path / "bank.sqlite")
    index = NearDuplicateIndex(chroma_client(tmp_path / "chroma"), HashEmbedding(), index_name(bank))
    real_add = index.add

    def killed(ids, vectors):  # the process dies after the first batch was written, before it is indexed
        raise KeyboardInterrupt

    index.add = killed
    with pytest.raises(KeyboardInterrupt):
        import_file(bank, path, index=index, threshold=0.9, skip_invalid=True, batch=4)
    written = {q.uuid for q in bank.all_questions()}
    assert written == {"u0", "u3"}  # the first batch, whole (records 2 and 3 duplicate record 1)
    assert index.collection.count() == 0
    index.add = real_add
    report = import_file(bank, path, index=index, threshold=0.9, skip_invalid=True, batch=4)
    assert index.collection.count() == bank.count()  # the stray batch was indexed first
    assert [(d.record, d.kind, d.of) for d in report.duplicates if d.of.startswith("bank")] == [
        (1, "exact", "bank question u0"),
        (2, "exact", "bank question u0"),
        (4, "exact", "bank question u3"),
        (3, "near", "bank question u0"),
    ]  # the first batch, now in the bank
    assert report.imported == 22 and bank.count() == 24


def bank_of_questions(tmp_path: Path, n: int) -> QuestionBank:
    rng = random.Random(n)
    disciplines = ["Law", "Art", "Science", "Medicine", "History", "Economics"]
    bank = QuestionBank(tmp_path / "big.sqlite")
    bank.add_questions(
        [
            Question(
                uuid=f"{rng.getrandbits(64):016x}",
                discipline=rng.choice(disciplines[: 1 + i % 6]),
                sub_discipline="",
                qtype="short_answer",
                question=f"q{i}",
                answer="a",
            )
            for i in range(n)
        ]
    )
    bank.set_active([q.uuid for q in bank.all_questions()[::17]], False)
    return bank


def test_a_session_draws_the_questions_sampling_the_list_of_unseen_questions_would_draw(tmp_path):
    bank = bank_of_questions(tmp_path, 3000)
    pool = [q.uuid for q in bank.all_questions(active_only=True)]  # the bank in UUID order
    met: set[str] = set()
    for k in range(2):
        unseen = [u for u in pool if u not in met]
        rng = random.Random(f"s{k}")
        expected = rng.sample(unseen, 1000)
        rng.shuffle(expected)
        bank.create_session(f"s{k}", model="m", n=1000, seed=f"s{k}")
        assert bank.question_ids(f"s{k}") == expected
        met.update(expected)


def test_sessions_never_repeat_a_question_within_a_cycle_and_keep_discipline_quotas(tmp_path):
    bank = bank_of_questions(tmp_path, 3000)
    active = bank.disciplines()
    total = sum(active.values())
    met: list[str] = []
    for k in range(2):
        before = {q.uuid: q.discipline for q in bank.all_questions(active_only=True) if q.uuid not in set(met)}
        bank.create_session(f"st{k}", model="m", n=1000, seed=f"st{k}", stratified=True)
        ids = bank.question_ids(f"st{k}")
        assert len(set(ids)) == 1000 and not set(ids) & set(met)
        got: dict[str, int] = {}
        for u in ids:
            got[before[u]] = got.get(before[u], 0) + 1
        for d in got:  # largest remainder: each discipline within one question of its share of the unseen
            share = 1000 * sum(1 for x in before.values() if x == d) / len(before)
            assert abs(got[d] - share) < 1
        met += ids
    session = bank.create_session("st2", model="m", n=1000, seed="st2")  # fewer unseen than asked: a new cycle
    fresh = [u for u in bank.question_ids("st2") if u not in set(met)]
    assert len(fresh) == total - 2000 and session["cycle"] == 1
    assert bank.create_session("other", model="m2", n=10, seed="x")["cycle"] == 0  # another model is independent


def test_sampling_reads_only_the_drawn_questions_and_sees_questions_added_since(tmp_path):
    bank = bank_of_questions(tmp_path, 2000)
    bank.refresh_ranks()
    statements: list[str] = []
    sa.event.listen(bank.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    bank.create_session("a", model="m", n=500, seed="a")
    assert not any("FROM llmeval_questions" in s for s in statements)  # the bank is never read whole
    first = set(bank.question_ids("a"))
    seen_all = bank.create_session("b", model="m", n=bank.count() - 500, seed="b")
    assert seen_all["cycle"] == 0
    added = [
        Question(
            uuid=f"new{i}", discipline="Law", sub_discipline="", qtype="short_answer", question=f"n{i}", answer="a"
        )
        for i in range(5)
    ]
    bank.add_questions(added)
    bank.create_session("c", model="m", n=5, seed="c")
    assert set(bank.question_ids("c")) == {q.uuid for q in added}  # the only questions m has not met
    assert not first & set(bank.question_ids("b"))


def test_import_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere():
    plain = io.StringIO()
    with import_progress(Console(file=plain, force_terminal=False), "importing big.jsonl", 5000) as advance:
        for _ in range(5):
            advance(1000)
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("importing big.jsonl: 1000/5000 records (20%), ") and "ETA" in lines[0]
    assert len(lines) == 5 and lines[-1].startswith("importing big.jsonl: 5000/5000 records (100%)")
    small = io.StringIO()
    with import_progress(Console(file=small, force_terminal=False), "importing small.jsonl", 36) as advance:
        advance(36)
    assert small.getvalue() == ""  # one batch: nothing to follow
    term = io.StringIO()
    with import_progress(Console(file=term, force_terminal=True, width=100), "importing big.jsonl", 5000) as advance:
        advance(2500)
    assert "importing big.jsonl" in term.getvalue() and "2500/5000" in term.getvalue()


def test_import_reports_progress_per_batch(tmp_path):
    path = corpus(tmp_path)
    steps: list[int] = []
    import_file(QuestionBank(tmp_path / "p.sqlite"), path, skip_invalid=True, batch=8, progress=steps.append)
    assert steps == [8, 8, 8, 5]  # the 29 valid records in batches of 8


def test_sessions_on_postgresql_draw_unseen_questions_and_rebuild_places_after_an_import(fresh_postgres_db, tmp_path):
    bank = QuestionBank(fresh_postgres_db("llmeval_scale"))
    report = import_file(bank, corpus(tmp_path), skip_invalid=True, batch=8)
    assert report.imported == 26
    met: set[str] = set()
    for k in range(3):
        bank.create_session(f"pg{k}", model="m", n=8, seed=f"pg{k}", stratified=k == 1)
        ids = bank.question_ids(f"pg{k}")
        assert len(set(ids)) == 8 and not met & set(ids)
        met.update(ids)
    bank.add_questions(
        [
            Question(
                uuid="late",
                discipline="Law",
                sub_discipline="",
                qtype="short_answer",
                question="a late question?",
                answer="a",
            )
        ]
    )
    bank.create_session("pg3", model="m", n=3, seed="pg3")
    assert set(bank.question_ids("pg3")) == {q.uuid for q in bank.all_questions()} - met
    bank.close()
