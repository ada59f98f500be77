"""Question bank: import with per-record validation, duplicates, export, augmentation (A.2), sampling, quota.
(Corpus-based loader tests: tests/test_llmeval_inputs.py.)"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dyneval.nodes.llmeval.augment import check_format, expand_mcq, redundant_variants
from dyneval.nodes.llmeval.bankio import (
    CANONICAL,
    NearDuplicateIndex,
    export_bank,
    import_file,
    index_name,
    to_question,
)
from dyneval.state.errors import InputError
from dyneval.stores.bank_location import server_dsn
from dyneval.stores.bank_sessions import DELIVERED_FIELDS, QuotaError
from dyneval.stores.inputs import FieldMap, Record
from dyneval.stores.question_bank import Question, QuestionBank
from dyneval.stores.vectors import chroma_client

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
#: ``run.main`` restricted to llmeval: run.py puts every protocol's flags in one parser, so a clash between
#: two other protocols' flags would otherwise break these CLI tests (see the report to the lead).
CLI = [
    sys.executable,
    "-c",
    "import sys, dyneval.protocols as protocols, dyneval.cli as run; "
    "run.available = lambda: {'llmeval': protocols.protocol_class('llmeval')}; sys.exit(run.main(sys.argv[1:]))",
]


def bank_with_sample(tmp_path: Path, **kw) -> QuestionBank:
    bank = QuestionBank(tmp_path / "bank.sqlite")
    report = import_file(bank, SAMPLE, **kw)
    assert report.imported == 36 and not report.rejected
    return bank


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_import_of_a_file_with_bad_records_refuses_it_or_skips_and_reports_each_bad_record(tmp_path):
    good = {
        "discipline": "Science",
        "question": "What is the boiling point of water at sea level in Celsius?",
        "answer": "100",
    }
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            good,  # 1 ok
            {"discipline": "Law", "question": "Who signs a bill into law in the US?"},  # 2 no answer
            {"discipline": "Science", "question": "Pick one ( )", "options": ["a", "b", "c", "d"], "answer": "E"},  # 3
            {"discipline": "History", "qtype": "fill_blank", "question": "___ and ___ fought.", "answer": "Rome"},  # 4
            {"question": "A question without a discipline?", "answer": "yes"},  # 5 no discipline
            {"discipline": "Art", "qtype": "poem", "question": "Write a haiku", "answer": "..."},  # 6 unknown type
            {
                "uuid": "u-1",
                "discipline": "Art",
                "question": "Which colour do blue and yellow make?",
                "answer": "green",
            },
            {"uuid": "u-1", "discipline": "Art", "question": "Which colour do red and white make?", "answer": "pink"},
            {**good, "question": "what is the BOILING point of water at sea level, in celsius"},  # 9 exact dup
        ],
    )
    bank = QuestionBank(tmp_path / "bank.sqlite")
    with pytest.raises(InputError) as err:  # by default the first bad record stops the import
        import_file(bank, path)
    assert "mixed.jsonl, record 2, field 'answer'" in str(err.value) and bank.count() == 0
    report = import_file(bank, path, skip_invalid=True)
    assert report.read == 9
    assert report.imported == 2 and bank.count() == 2
    reasons = dict(report.rejected)
    assert sorted(reasons) == [2, 3, 4, 5, 6, 8]
    for record, name in ((2, "answer"), (3, "answer"), (4, "answer"), (5, "discipline"), (6, "qtype"), (8, "uuid")):
        assert f"record {record}, field '{name}'" in reasons[record]
    assert [(d.record, d.kind, d.of) for d in report.duplicates] == [(9, "exact", "record 1")]
    lines = report.lines()
    assert len(lines) == 6 + 1 + 1  # one line per bad record, one per duplicate, one summary
    assert all(str(path) in line for line in lines)
    assert "9 records: 2 imported, 1 duplicates skipped, 6 rejected" in lines[-1]
    broken = write_jsonl(tmp_path / "broken.jsonl", [good, "{not json"])
    with pytest.raises(InputError) as err:  # an unreadable line is a broken file, even with skip_invalid
        import_file(QuestionBank(tmp_path / "other.sqlite"), broken, skip_invalid=True)
    assert "broken.jsonl, record 2" in str(err.value) and "JSON" in str(err.value)


def test_llmeval_record_layout_and_csv_are_imported(tmp_path):
    llmeval = write_jsonl(
        tmp_path / "llmeval.jsonl",
        [
            {
                "category": "Engineering",
                "sub_category": "Computer Science",
                "question_uuid": "a4b9-1",
                "dialog": [{"role": "user", "content": "True or false: a hash table lookup is always O(n)."}],
                "hint": "false",
            },
            {
                "category": "Engineering",
                "sub_category": "Computer Science",
                "question_uuid": "a4b9-2",
                "dialog": {"role": "user", "content": "Name the data structure used by breadth-first search."},
                "hint": "a queue",
            },
            {
                "category": "Engineering",
                "question_uuid": "a4b9-3",
                "dialog": [{"role": "assistant", "content": "x"}],
                "hint": "y",
            },
        ],
    )
    bank = QuestionBank(tmp_path / "bank.sqlite")
    report = import_file(bank, llmeval, skip_invalid=True)
    assert report.imported == 2
    assert [r for r, _ in report.rejected] == [3] and "field 'dialog'" in report.rejected[0][1]
    q = bank.get("a4b9-1")
    assert (q.discipline, q.sub_discipline, q.qtype, q.answer) == (
        "Engineering",
        "Computer Science",
        "true_false",
        "false",
    )
    path = tmp_path / "q.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["discipline", "question", "options", "answer"])
        w.writeheader()
        w.writerow(
            {
                "discipline": "Science",
                "question": "Which planet is largest? ( )",
                "options": json.dumps(["Mars", "Jupiter", "Venus"]),
                "answer": "B",
            }
        )
        w.writerow({"discipline": "Science", "question": "", "options": "", "answer": "x"})
    report = import_file(bank, path, skip_invalid=True)
    assert report.imported == 1 and [r for r, _ in report.rejected] == [2]
    assert "field 'question'" in report.rejected[0][1]
    mcq = [q for q in bank.all_questions() if q.qtype == "mcq"][0]
    assert mcq.options == ["Mars", "Jupiter", "Venus"]


def test_export_round_trips_through_both_layouts(tmp_path):
    bank = bank_with_sample(tmp_path)
    for layout, name in (("native", "out.jsonl"), ("llmeval", "out_llmeval.jsonl"), ("native", "out.csv")):
        path = tmp_path / name
        assert export_bank(bank, path, layout=layout) == 36
        other = QuestionBank(tmp_path / f"{name}.sqlite")
        report = import_file(other, path)
        assert report.imported == 36, report.lines()[:3]
        a = {q.uuid: (q.question, q.answer, q.discipline, q.qtype, q.options) for q in bank.all_questions()}
        b = {q.uuid: (q.question, q.answer, q.discipline, q.qtype, q.options) for q in other.all_questions()}
        assert a == b


VOCAB = "alpha beta gamma delta epsilon zeta eta one two three four five six seven".split()


def bag_of_words(texts):
    """A deterministic stand-in embedding: word counts over a fixed vocabulary."""
    return [[float(t.lower().split().count(w)) for w in VOCAB] for t in texts]


def test_near_duplicates_are_found_through_the_chroma_index(tmp_path):
    path = write_jsonl(
        tmp_path / "near.jsonl",
        [
            {"discipline": "X", "question": "alpha beta gamma delta epsilon zeta", "answer": "1"},
            {"discipline": "X", "question": "alpha beta gamma delta epsilon eta", "answer": "2"},
            {"discipline": "X", "question": "one two three four five six", "answer": "3"},
        ],
    )
    bank = QuestionBank(tmp_path / "bank.sqlite")
    index = NearDuplicateIndex(chroma_client(tmp_path / "chroma"), bag_of_words, index_name(bank))
    report = import_file(bank, path, index=index, threshold=0.8)
    assert report.imported == 2
    assert [(d.record, d.kind, d.of) for d in report.duplicates] == [(2, "near", "record 1")]
    assert report.duplicates[0].similarity == pytest.approx(5 / 6, abs=1e-4)  # cosine of 5 shared words out of 6
    # a later file is checked against what the index already holds
    again = write_jsonl(
        tmp_path / "again.jsonl", [{"discipline": "X", "question": "one two three four five seven", "answer": "4"}]
    )
    report = import_file(bank, again, index=index, threshold=0.8)
    assert report.imported == 0 and report.duplicates[0].kind == "near"


def test_near_duplicate_paraphrase_is_caught_with_the_offline_embeddings(tmp_path):
    from dyneval.stores.vectors import embedding_function

    bank = QuestionBank(tmp_path / "bank.sqlite")
    index = NearDuplicateIndex(chroma_client(tmp_path / "chroma"), embedding_function(), index_name(bank))
    assert import_file(bank, SAMPLE, index=index, threshold=0.9).imported == 36  # no near duplicates in it
    assert index.collection.count() == 36
    path = write_jsonl(
        tmp_path / "para.jsonl",
        [
            {
                "discipline": "Engineering",
                "question": "True or false: a stack removes its elements in first in, first "
                "out order. Explain your reasoning.",
                "answer": "false",
            },
            {
                "discipline": "Science",
                "question": "Which gas do green plants release during photosynthesis?",
                "answer": "oxygen",
            },
        ],
    )
    report = import_file(bank, path, index=index, threshold=0.9)
    assert [d.record for d in report.duplicates] == [1]
    assert report.imported == 1


def test_mcq_with_n_options_becomes_n_true_false_variants(tmp_path):
    q = Question(
        uuid="p1",
        discipline="Engineering",
        sub_discipline="CS",
        qtype="mcq",
        question="A complete binary tree of height 3 has at most ( ) nodes.",
        options=["3", "7", "8", "15"],
        answer="B",
    )
    variants = expand_mcq(q)
    assert len(variants) == 4
    assert [v.answer for v in variants] == ["false", "true", "false", "false"]
    assert all(v.qtype == "true_false" and v.parent_uuid == "p1" for v in variants)
    assert all('"' + o + '"' in v.question for o, v in zip(q.options, variants))
    assert len({v.uuid for v in variants}) == 4 and expand_mcq(q)[0].uuid == variants[0].uuid
    # redundancy check among split questions: a variant repeating an earlier one (up to case/punctuation)
    twin = Question(**{**variants[1].__dict__, "uuid": "twin", "question": variants[1].question.upper()})
    assert [v.uuid for v in redundant_variants([*variants, twin])] == ["twin"]
    # import with augmentation: the variants replace their parent in sampling
    bank = bank_with_sample(tmp_path, augment=True)
    mcqs = [x for x in bank.all_questions() if x.qtype == "mcq"]
    kids = [x for x in bank.all_questions() if x.parent_uuid]
    assert len(kids) == sum(len(m.options) for m in mcqs)
    assert bank.count() == 36 - len(mcqs) + len(kids)
    assert all(m.uuid not in {x.uuid for x in bank.all_questions(active_only=True)} for m in mcqs)


def test_format_validation_checks_option_counts_and_answer_slots():
    def q(**kw):
        base = dict(
            uuid="x", discipline="d", sub_discipline="", qtype="mcq", question="q ( )", answer="A", options=["a", "b"]
        )
        base.update(kw)
        return Question(**base)

    assert check_format(q()) == []
    assert check_format(q(options=["a"]))[0][0] == "options"
    assert check_format(q(options=["a", "a"]))[0][0] == "options"
    assert check_format(q(answer="C"))[0][0] == "answer"
    assert check_format(q(qtype="fill_blank", options=None, question="___ and ___", answer="a; b")) == []
    assert check_format(q(qtype="fill_blank", options=None, question="___ and ___", answer="a"))[0][0] == "answer"
    assert check_format(q(qtype="true_false", options=None, answer="maybe"))[0][0] == "answer"
    rec = Record("f.csv", 1, {"discipline": "d", "question": "q", "answer": "A", "options": "x||y"}, "--bank")
    parsed = to_question(rec, FieldMap.parse(None, CANONICAL), "f.csv")
    assert parsed.qtype == "mcq" and parsed.options == ["x", "y"]


def test_sampling_is_seeded_and_without_replacement(tmp_path):
    bank = bank_with_sample(tmp_path)
    a = bank.create_session("a", model="m1", n=12, seed="0:u1")
    other = QuestionBank(tmp_path / "b2.sqlite")
    import_file(other, SAMPLE)
    b = other.create_session("a", model="m1", n=12, seed="0:u1")
    c = other.create_session("c", model="m2", n=12, seed="1:u1")
    assert a["n"] == b["n"] == c["n"] == 12
    ids_a, ids_b, ids_c = bank.question_ids("a"), other.question_ids("a"), other.question_ids("c")
    assert ids_a == ids_b  # same seed, same bank -> same questions in the same order
    assert ids_a != ids_c
    assert len(set(ids_a)) == 12
    assert bank.create_session("a", model="m1", n=12, seed="other")["seed"] == "0:u1"  # idempotent


def test_sessions_of_one_model_do_not_repeat_until_the_bank_is_exhausted(tmp_path):
    bank = bank_with_sample(tmp_path)  # 36 questions
    seen: list[str] = []
    for i in range(3):
        bank.create_session(f"s{i}", model="m", n=12, seed=f"0:s{i}")
        seen += bank.question_ids(f"s{i}")
    assert len(seen) == 36 and len(set(seen)) == 36  # three sessions cover the bank exactly once
    bank.create_session("other", model="m2", n=12, seed="0:x")  # another model is independent
    assert len(bank.question_ids("other")) == 12
    # a fourth session of m starts a new cycle
    bank.create_session("s3", model="m", n=10, seed="0:s3")
    assert bank.session("s3")["cycle"] == 1 and len(set(bank.question_ids("s3"))) == 10
    # partial exhaustion: 30 of 36 seen, the next session takes the 6 unseen ones first
    b2 = QuestionBank(tmp_path / "b3.sqlite")
    import_file(b2, SAMPLE)
    b2.create_session("x1", model="m", n=30, seed="1")
    first = set(b2.question_ids("x1"))
    b2.create_session("x2", model="m", n=10, seed="2")
    second = b2.question_ids("x2")
    unseen = {q.uuid for q in b2.all_questions()} - first
    assert unseen <= set(second) and len(set(second)) == 10


def test_few_shot_examples_come_from_outside_the_session(tmp_path):
    bank = bank_with_sample(tmp_path)
    s = bank.create_session("fs", model="m", n=20, seed="3", paradigm="few-shot", fewshot_k=3)
    assert len(s["fewshot"]) == 3 and not set(s["fewshot"]) & set(bank.question_ids("fs"))


def test_stratified_sampling_follows_discipline_shares(tmp_path):
    bank = bank_with_sample(tmp_path)
    shares = bank.disciplines()
    bank.create_session("st", model="m", n=18, seed="5", stratified=True)
    got = Counter(bank.get(u).discipline for u in bank.question_ids("st"))
    assert sum(got.values()) == 18
    for d, count in shares.items():  # largest remainder: each discipline within one of its exact share
        assert abs(got.get(d, 0) - 18 * count / 36) < 1


def test_quota_delivers_in_order_and_rejects_extras_and_resubmissions(tmp_path):
    bank = bank_with_sample(tmp_path)
    bank.create_session("q", model="m", n=3, seed="1")
    first = bank.next_item("q")
    assert tuple(first) == DELIVERED_FIELDS and first["position"] == 0
    assert bank.next_item("q")["position"] == 0  # the pending question again, not a new one
    with pytest.raises(QuotaError) as e:
        bank.submit("q", 1, "skipping ahead")
    assert e.value.kind == "out_of_order"
    assert bank.submit("q", 0, "a0") == {"allocated": 3, "undelivered": 2, "pending": 0, "completed": 1}
    with pytest.raises(QuotaError) as e:
        bank.submit("q", 0, "again")
    assert e.value.kind == "resubmission"
    for pos in (1, 2):
        assert bank.next_item("q")["position"] == pos
        bank.submit("q", pos, f"a{pos}")
    with pytest.raises(QuotaError) as e:
        bank.next_item("q")
    assert e.value.kind == "exhausted"
    with pytest.raises(QuotaError) as e:
        bank.submit("q", 3, "beyond")
    assert e.value.kind == "exhausted"
    assert [i["response"] for i in bank.judged_items("q")] == ["a0", "a1", "a2"]


def test_cli_import_only_refuses_bad_records_skips_them_on_request_and_missing_file_exits_2(tmp_path):
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"discipline": "Science", "question": "What is H2O commonly called?", "answer": "water"},
            {"discipline": "Science", "question": "no answer here"},
        ],
    )
    cmd = [*CLI, "--protocol", "llmeval", "--out", str(tmp_path / "runs"), "--import-only", "--near-dup-threshold", "0"]
    refused = subprocess.run([*cmd, "--bank", str(path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "record 2, field 'answer': missing" in refused.stderr
    ok = subprocess.run(
        [*cmd, "--bank", str(path), "--skip-invalid"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert "record 2, field 'answer': missing" in ok.stdout
    assert "1 imported, 0 duplicates skipped, 1 rejected" in " ".join(ok.stdout.split())
    bad = subprocess.run(
        [*cmd, "--bank", str(tmp_path / "missing.jsonl")], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "missing.jsonl" in bad.stderr and "Traceback" not in bad.stderr


def test_material_questions_are_rewritten_into_checked_true_false_statements(tmp_path):
    from dyneval.nodes.llmeval.augment import rewrite_material
    from tests.conftest import make_services
    from tests.fakes import ScriptedChat

    q = Question(
        uuid="m1",
        discipline="Economics",
        sub_discipline="Macro",
        qtype="material",
        question="Read the report on inflation in the material and analyse its causes.",
        answer="Demand grew faster than supply; energy prices rose; wages followed prices.",
    )
    good = ScriptedChat(
        lambda m, t: {
            "statements": [
                "Demand grew faster than supply in the report.",
                "Energy prices fell during the period described.",
            ],
            "truths": [True, False],
        }
    )
    variants, problem = rewrite_material(make_services(tmp_path, chats={"teacher": good}), q)
    assert problem is None and [v.answer for v in variants] == ["true", "false"]
    assert all(v.qtype == "true_false" and v.parent_uuid == "m1" for v in variants)
    assert "Demand grew faster" in variants[0].question
    uneven = ScriptedChat(
        lambda m, t: {"statements": ["One statement only here.", "Another statement here."], "truths": [True]}
    )
    variants, problem = rewrite_material(make_services(tmp_path, chats={"teacher": uneven}), q)
    assert variants == [] and "truth values" in problem


def test_the_bank_works_on_postgresql(fresh_postgres_db, tmp_path):
    bank = QuestionBank(fresh_postgres_db("llmeval_test"))
    assert bank.url.startswith("postgresql+psycopg://")
    report = import_file(bank, SAMPLE)
    assert report.imported == 36 and bank.count() == 36
    bank.create_session("pg", model="m", n=4, seed="1")
    item = bank.next_item("pg")
    bank.submit("pg", item["position"], "x")
    with pytest.raises(QuotaError):
        bank.submit("pg", item["position"], "again")
    assert bank.quota("pg")["completed"] == 1
    bank.close()


def test_a_libpq_key_value_dsn_opens_the_postgresql_bank_not_a_file_of_that_name(
    fresh_postgres_db, tmp_path, monkeypatch
):
    from psycopg.conninfo import conninfo_to_dict

    url = fresh_postgres_db("llmeval_keywords")
    keywords = " ".join(f"{k}={v}" for k, v in conninfo_to_dict(url).items())  # host=... port=... dbname=...
    monkeypatch.chdir(tmp_path)
    bank = QuestionBank(keywords)
    assert bank.url.startswith("postgresql+psycopg://")
    assert import_file(bank, SAMPLE).imported == 36
    bank.close()
    for same in (QuestionBank(url), QuestionBank(server_dsn(keywords))):
        assert same.count() == 36  # the questions are in that database
        same.close()
    assert server_dsn(keywords).startswith("postgresql://")  # what the protocol's server-or-file checks read
    assert list(tmp_path.iterdir()) == []  # it used to be a SQLite file named after the DSN in the working folder
    named = QuestionBank(tmp_path / "bank=1.sqlite")
    assert named.url.startswith("sqlite")  # a file name with '=' stays one
    named.close()


#: One import of a bank file and one seeded session, in a process of its own: prints the exam's questions in order.
_IMPORT_AND_SAMPLE = """
import json, sys
from dyneval.nodes.llmeval.bankio import import_file
from dyneval.stores.question_bank import QuestionBank
bank = QuestionBank(sys.argv[1])
import_file(bank, sys.argv[2])
bank.create_session("exam", model="m", n=12, seed="7:exam")
print(json.dumps([bank.get(uid).question for uid in bank.question_ids("exam")]))
"""


def _exam_in_own_process(bank: str, bank_file: Path, cwd: Path) -> list[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_AND_SAMPLE, bank, str(bank_file)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _sample_without_uuids(tmp_path: Path) -> Path:
    lines = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return write_jsonl(tmp_path / "no_ids.jsonl", [{k: v for k, v in q.items() if k != "uuid"} for q in lines])


def test_one_bank_file_and_seed_give_the_same_exam_on_every_import_in_any_folder_and_process(tmp_path):
    """A file without ids: each question's id comes from its content, so two imports (two folders, two processes)
    sample the same questions in the same order under one seed (LLMEval-3, section 2.2)."""
    bank_file = _sample_without_uuids(tmp_path)
    first = _exam_in_own_process("bank.sqlite", bank_file, tmp_path / "one")
    second = _exam_in_own_process(str(tmp_path / "two" / "b.sqlite"), bank_file, tmp_path / "two")
    assert len(first) == 12 and first == second


def test_one_bank_file_and_seed_give_the_same_exam_on_two_postgresql_banks(fresh_postgres_db, tmp_path):
    bank_file = _sample_without_uuids(tmp_path)
    first = _exam_in_own_process(fresh_postgres_db("llmeval_exam_a"), bank_file, tmp_path / "a")
    second = _exam_in_own_process(fresh_postgres_db("llmeval_exam_b"), bank_file, tmp_path / "b")
    assert len(first) == 12 and first == second


def test_a_question_without_an_id_is_named_by_its_content_and_a_given_id_is_kept(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [
            {"discipline": "d", "question": "What is  the capital of France?", "answer": "Paris"},
            {"uuid": "given-1", "discipline": "d", "question": "What is 2 + 2?", "answer": "4"},
        ],
    )
    import_file(bank, path)
    other = QuestionBank(tmp_path / "other.sqlite")
    import_file(other, path)
    ids = {q.question: q.uuid for q in bank.all_questions()}
    assert ids == {q.question: q.uuid for q in other.all_questions()}
    assert ids["What is 2 + 2?"] == "given-1"
