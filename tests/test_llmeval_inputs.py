"""llmeval question files through the data layer (corpus in tests/data_corpus/llmeval, written for these tests):
byte-exact storage of multi-line fields, BOM, CRLF, TSV, JSON arrays, the LLMEval layout, --fields, one-line
errors naming file, record and field, record-counting import reports, a near-duplicate index per bank, and
the shipped sample used only when the user gave no input."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest

from dyneval.nodes.llmeval.bankio import NearDuplicateIndex, import_file, index_name, load_file
from dyneval.protocols.llmeval.analyses import read_labels
from dyneval.state.errors import InputError
from dyneval.stores.question_bank import QuestionBank
from dyneval.stores.vectors import chroma_client

CORPUS = Path(__file__).resolve().parent / "data_corpus" / "llmeval"
TSV_FIELDS = "discipline=Subject,sub_discipline=Area,question=Question,answer=Answer"
SAMPLE_SOURCE = "dyneval original sample"


def rows_of(path: Path, delimiter: str = ",") -> list[dict[str, str]]:
    """The file's rows as Python's csv module reads the raw bytes (the expected values)."""
    text = path.read_bytes().decode("utf-8-sig")
    return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter))


def stored(bank: QuestionBank) -> dict[str, tuple[str, str]]:
    """question text -> (answer, discipline) of every question in the bank."""
    return {q.question: (q.answer, q.discipline) for q in bank.all_questions()}


def test_bom_crlf_csv_keeps_line_breaks_inside_quoted_fields_byte_exact(tmp_path):
    path = CORPUS / "bom_crlf.csv"
    bank = QuestionBank(tmp_path / "bank.sqlite")
    report = import_file(bank, path)
    assert (report.read, report.imported) == (3, 3)
    expected = {r["question"]: (r["answer"], r["discipline"]) for r in rows_of(path)}
    assert stored(bank) == expected
    assert any("\r\n" in q for q in expected) and any("\r\n" in a for a, _ in expected.values())
    assert {d for _, d in expected.values()} == {"Science", "History", "Law"}  # the BOM did not eat 'discipline'
    explanation = {q.explanation for q in bank.all_questions()}
    assert "d = g t^2 / 2, so 10 * 4 / 2 = 20." in explanation


def test_multi_line_reference_answers_are_stored_unchanged(tmp_path):
    path = CORPUS / "multiline.csv"
    bank = QuestionBank(tmp_path / "bank.sqlite")
    import_file(bank, path)
    rows = rows_of(path)
    by_question = {q.question: q for q in bank.all_questions()}
    for row in rows:
        assert by_question[row["question"]].answer == row["answer"]
    answers = [r["answer"] for r in rows]
    assert answers[0].endswith("\n") and answers[0].count("\n") == 3  # trailing line break kept
    assert answers[2].startswith("  A narrator") and "\n\n" in answers[2]  # leading spaces, blank line kept
    assert by_question[rows[1]["question"]].options == ["GDP", "CPI", "Gini coefficient"]


def test_tsv_with_the_users_column_names_needs_and_honours_fields(tmp_path):
    path = CORPUS / "renamed.tsv"
    bank = QuestionBank(tmp_path / "bank.sqlite")
    with pytest.raises(InputError) as err:
        import_file(bank, path)
    message = str(err.value)
    assert "renamed.tsv, record 1" in message and "'discipline'" in message
    assert "Subject, Area, Question, Answer" in message  # it lists the columns it found
    assert bank.count() == 0
    report = import_file(bank, path, fields=TSV_FIELDS)
    assert report.imported == 2
    expected = {r["Question"]: (r["Answer"], r["Subject"]) for r in rows_of(path, "\t")}
    assert stored(bank) == expected
    assert "Cost leadership;\tdifferentiation\nor focus" in {a for a, _ in expected.values()}
    assert {q.sub_discipline for q in bank.all_questions()} == {"Physiology", "Strategy"}


def test_json_array_and_llmeval_layout_load_with_typed_values(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    assert import_file(bank, CORPUS / "array.json").imported == 4
    assert bank.get("corpus-arr-1").options == ["Nitrogen", "Sodium", "Neon"]
    assert bank.get("corpus-arr-2").options == ["North", "South"]  # an options object in letter order
    assert (bank.get("corpus-arr-3").qtype, bank.get("corpus-arr-3").answer) == ("true_false", "true")
    assert bank.get("corpus-arr-4").answer == "6"  # a number answer in its JSON spelling
    assert import_file(bank, CORPUS / "llmeval_layout.jsonl").imported == 2
    q = bank.get("corpus-ll-1")
    assert (q.discipline, q.sub_discipline, q.answer) == ("Engineering", "Networks", "The network layer (layer 3).")
    assert q.question == "Which layer of the OSI model routes packets?\nAnswer briefly."


@pytest.mark.parametrize(
    "name, record, field, says",
    [
        ("missing_answer.jsonl", 2, "answer", "this record has: discipline, question"),
        ("nested_question.jsonl", 2, "question", "expected text, got an object"),
        ("number_question.json", 2, "question", "expected text, got a number (1789)"),
        ("list_answer.jsonl", 1, "answer", "got a list"),
        ("bad_option_letter.csv", 2, "answer", "not an option letter, 0-based index or option text (A-B or 0-1 for 2"),
    ],
)
def test_a_bad_record_is_one_line_naming_file_record_and_field_and_nothing_is_imported(
    tmp_path, name, record, field, says
):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    with pytest.raises(InputError) as err:
        import_file(bank, CORPUS / name)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert f"{name}, record {record}, field '{field}'" in message and says in message and "--bank" in message
    assert bank.count(active_only=False) == 0  # the good record before it was not imported either


def test_non_utf8_file_names_the_byte_offset(tmp_path):
    with pytest.raises(InputError) as err:
        load_file(CORPUS / "latin1.csv")
    assert "latin1.csv" in str(err.value) and "byte offset 50" in str(err.value)


def test_skip_invalid_counts_records_not_errors_and_names_what_a_duplicate_repeats(tmp_path):
    good = [
        {"discipline": "Science", "question": f"Question number {i} about physics?", "answer": str(i)} for i in range(5)
    ]
    broken = {"qtype": "poem"}  # no discipline, question or answer and an unknown type: one record, not four
    lines = [*good, dict(good[0]), broken, broken, broken]
    path = tmp_path / "nine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    bank = QuestionBank(tmp_path / "bank.sqlite")
    with pytest.raises(InputError):
        import_file(bank, path)
    report = import_file(bank, path, skip_invalid=True)
    assert (report.read, report.imported, len(report.duplicates), len(report.rejected)) == (9, 5, 1, 3)
    assert report.summary().endswith(
        "9 records: 5 imported, 1 duplicates skipped, 3 rejected; 0 true/false variants added"
    )
    assert [r for r, _ in report.rejected] == [7, 8, 9]
    assert all("nine.jsonl, record" in why and "field" in why for _, why in report.rejected)
    dup = report.duplicates[0]
    assert (dup.record, dup.kind, dup.of) == (6, "exact", "record 1")
    again = import_file(bank, path, skip_invalid=True)  # re-import: every valid record repeats a bank question
    assert again.imported == 0 and len(again.duplicates) == 6
    first = next(q.uuid for q in bank.all_questions() if q.question == good[0]["question"])
    assert again.duplicates[0].of == f"bank question {first}"


def test_a_uuid_naming_another_question_in_the_bank_is_refused(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    import_file(bank, CORPUS / "array.json")
    path = tmp_path / "clash.jsonl"
    path.write_text(
        json.dumps({"uuid": "corpus-arr-1", "discipline": "Law", "question": "Another question?", "answer": "yes"})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError) as err:
        import_file(bank, path)
    assert "record 1, field 'uuid'" in str(err.value) and "another question" in str(err.value)
    assert bank.get("corpus-arr-1").question.startswith("Which element")


def trigram_embedding(texts: list[str]) -> list[list[float]]:
    """A deterministic stand-in embedding: hashed character trigrams in 64 dimensions."""
    out = []
    for t in texts:
        v = [0.0] * 64
        for i in range(len(t) - 2):
            v[hashlib.md5(t[i : i + 3].lower().encode()).digest()[0] % 64] += 1.0
        out.append(v)
    return out


def test_a_second_bank_in_the_same_folder_imports_all_of_its_own_records(tmp_path):
    folder = tmp_path / "banks"
    chroma = chroma_client(folder / "llmeval_chroma")  # one Chroma folder next to both SQLite banks
    bank_a, bank_b = QuestionBank(folder / "a.sqlite"), QuestionBank(folder / "b.sqlite")
    index_a = NearDuplicateIndex(chroma, trigram_embedding, index_name(bank_a))
    index_b = NearDuplicateIndex(chroma, trigram_embedding, index_name(bank_b))
    assert import_file(bank_a, CORPUS / "bank_a.jsonl", index=index_a).imported == 3
    report = import_file(bank_b, CORPUS / "bank_b.jsonl", index=index_b)
    assert (report.imported, report.duplicates) == (4, [])  # B never held A's questions
    assert bank_b.count() == 4 and bank_a.count() == 3
    # a near duplicate is still caught within the bank that holds the original
    path = tmp_path / "near.jsonl"
    path.write_text(
        json.dumps({"discipline": "Medicine", "question": "Which blood cells carry the oxygen?", "answer": "red cells"})
        + "\n",
        encoding="utf-8",
    )
    near = import_file(bank_b, path, index=index_b, threshold=0.9)
    assert near.imported == 0 and near.duplicates[0].kind == "near"
    assert near.duplicates[0].of.startswith("bank question ")
    assert import_file(bank_a, path, index=index_a, threshold=0.9).imported == 1


def test_human_labels_must_be_whole_stars(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("model,question_uuid,label\nm,q1,2\nm,q2,2.5\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_labels(path)
    assert "labels.csv, record 2, field 'label'" in str(err.value)
    path.write_text("model,question_uuid,label\nm,q1,2\nm,q2,3\n", encoding="utf-8")
    assert [r["label"] for r in read_labels(path)] == [2, 3]


# -- through the CLI ---------------------------------------------------------------------------------------


def cli(*args: str) -> int:
    from dyneval.cli import main

    return main(["--protocol", "llmeval", *args])


def test_cli_a_new_bank_file_in_a_used_folder_imports_everything_and_never_the_sample(tmp_path, capsys):
    folder, out = tmp_path / "banks", str(tmp_path / "runs")
    assert (
        cli(
            "--out", out, "--bank-db", str(folder / "a.sqlite"), "--bank", str(CORPUS / "bank_a.jsonl"), "--import-only"
        )
        == 0
    )
    assert (
        cli(
            "--out", out, "--bank-db", str(folder / "b.sqlite"), "--bank", str(CORPUS / "bank_b.jsonl"), "--import-only"
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "bank_b.jsonl: 4 records: 4 imported, 0 duplicates skipped, 0 rejected" in " ".join(printed.split())
    b = QuestionBank(folder / "b.sqlite")
    assert b.count() == 4 and not any(q.source == SAMPLE_SOURCE for q in b.all_questions())
    assert "shipped sample" not in printed


def test_cli_an_empty_bank_the_user_named_is_an_error_not_the_sample(tmp_path, capsys):
    db, out = tmp_path / "empty.sqlite", tmp_path / "runs"
    assert cli("--out", str(out), "--bank-db", str(db), "--leaderboard") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no question bank at" in err and "--bank-db" in err
    assert not db.exists() and not out.exists()  # nothing created, no run directory left behind
    QuestionBank(db)  # now it exists, with no question: still refused, never replaced by the sample
    assert cli("--out", str(out), "--bank-db", str(db), "--leaderboard") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is empty" in err and "--bank FILE" in err
    assert QuestionBank(db).count(active_only=False) == 0 and not out.exists()


def test_cli_bad_record_exits_2_and_skip_invalid_imports_the_rest(tmp_path, capsys):
    args = (
        "--out",
        str(tmp_path / "runs"),
        "--bank-db",
        str(tmp_path / "bank.sqlite"),
        "--near-dup-threshold",
        "0",
        "--bank",
        str(CORPUS / "missing_answer.jsonl"),
        "--import-only",
    )
    assert cli(*args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing_answer.jsonl, record 2, field 'answer'" in err
    assert not (tmp_path / "bank.sqlite").exists()  # refused before the bank was opened
    assert not (tmp_path / "runs").exists()  # and no run directory left behind
    assert cli(*args, "--skip-invalid") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 records: 1 imported, 0 duplicates skipped, 1 rejected" in out
    assert QuestionBank(tmp_path / "bank.sqlite").count() == 1


def test_cli_fields_map_the_users_columns(tmp_path):
    db = tmp_path / "bank.sqlite"
    assert (
        cli(
            "--out",
            str(tmp_path / "runs"),
            "--bank-db",
            str(db),
            "--near-dup-threshold",
            "0",
            "--bank",
            str(CORPUS / "renamed.tsv"),
            "--fields",
            TSV_FIELDS,
            "--import-only",
        )
        == 0
    )
    assert {q.discipline for q in QuestionBank(db).all_questions()} == {"Medicine", "Management"}


def test_cli_the_sample_is_used_only_without_input_and_the_run_says_so(tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli("--out", str(out), "--near-dup-threshold", "0", "--import-only") == 0
    assert "using the shipped sample samples/llmeval/bank.jsonl" in " ".join(capsys.readouterr().out.split())
    note = next(out.glob("*/bank_source.txt")).read_text()
    assert "shipped sample" in note and "36 active questions" in note


def batch_run(tmp_path: Path, params: dict) -> Path:
    """A batch run through the runner with fake target and judge; returns the run directory."""
    from rich.console import Console

    from dyneval.protocols.llmeval.protocol import LLMEvalProtocol
    from dyneval.runtime.config_loader import load_config
    from dyneval.runtime.runner import execute, open_run
    from tests.fakes import ScriptedChat

    config = load_config(
        "llmeval", config_file=None, environ={}, flags={"out": str(tmp_path / "runs"), "params": params}
    )
    chats = {
        "target": ScriptedChat(lambda m, t: "an answer"),
        "evaluator": ScriptedChat(lambda m, t: {"rating": 2, "reason": "close"}),
    }
    protocol = LLMEvalProtocol()
    run = open_run(
        protocol,
        config,
        run_id=None,
        console=Console(record=True, width=200),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    execute(protocol, run, skip_preflight=True)
    return run.run_dir


def test_a_batch_run_on_a_new_bank_in_a_used_folder_examines_its_questions_not_the_samples(tmp_path):
    folder = tmp_path / "banks"
    batch_run(tmp_path, {"bank": str(CORPUS / "bank_a.jsonl"), "bank_db": str(folder / "a.sqlite"), "questions": 2})
    run_dir = batch_run(
        tmp_path, {"bank": str(CORPUS / "bank_b.jsonl"), "bank_db": str(folder / "b.sqlite"), "questions": 4}
    )
    bank = QuestionBank(folder / "b.sqlite")
    (record,) = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    asked = [bank.get(u).question for u in bank.question_ids(record["session_id"])]
    expected = [json.loads(x)["question"] for x in (CORPUS / "bank_b.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and sorted(asked) == sorted(expected)
    report = (run_dir / "report.md").read_text()
    assert "bank_b.jsonl (--bank) imported into" in report and "shipped sample" not in report


def test_a_batch_run_without_input_says_it_used_the_shipped_sample(tmp_path):
    run_dir = batch_run(tmp_path, {"questions": 2, "near_dup_threshold": 0})
    assert (
        "Questions: the shipped sample samples/llmeval/bank.jsonl (no --bank or --bank-db given)"
        in (run_dir / "report.md").read_text()
    )


def test_cli_skip_invalid_with_no_valid_record_is_refused_before_anything_is_created(tmp_path, capsys):
    out, db = tmp_path / "runs", tmp_path / "bank.sqlite"
    assert (
        cli(
            "--out",
            str(out),
            "--bank-db",
            str(db),
            "--bank",
            str(CORPUS / "list_answer.jsonl"),
            "--skip-invalid",
            "--dry-run",
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no valid record" in err and "list_answer.jsonl, record 1" in err
    assert not out.exists() and not db.exists()


def _reading_file(tmp_path: Path) -> Path:
    """Two questions on one reading passage (in its own column, as reading-comprehension sets ship them) and one
    without a passage; a ``note`` column nothing maps."""
    rows = [
        {
            "subject": "reading",
            "passage": "The lighthouse keeper kept a log of every ship.",
            "question": "What did the keeper record?",
            "label": "ships",
            "note": "set A",
        },
        {
            "subject": "reading",
            "passage": "The lighthouse keeper kept a log of every ship.",
            "question": "Who kept the log?",
            "label": "the keeper",
            "note": "",
        },
        {"subject": "math", "passage": None, "question": "What is 7 times 6?", "label": "42", "note": "set B"},
    ]
    path = tmp_path / "reading.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_columns_no_field_maps_are_named_in_the_import_report_with_their_record_counts(tmp_path):
    report = import_file(
        QuestionBank(tmp_path / "bank.sqlite"), _reading_file(tmp_path), fields="discipline=subject,answer=label"
    )
    assert report.imported == 3
    [line] = [x for x in report.lines() if "not imported" in x]
    assert "note (2 records)" in line and "passage (2 records)" in line  # blank values are not counted


def test_a_passage_column_joins_its_question_with_a_plus_mapping(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    report = import_file(
        bank,
        _reading_file(tmp_path),
        fields="discipline=subject,answer=label,question=passage+question,explanation=note",
    )
    assert report.imported == 3 and not [x for x in report.lines() if "not imported" in x]
    assert sorted(q.question for q in bank.all_questions()) == [
        "The lighthouse keeper kept a log of every ship.\n\nWhat did the keeper record?",
        "The lighthouse keeper kept a log of every ship.\n\nWho kept the log?",
        "What is 7 times 6?",
    ]  # no passage: the question alone, nothing invented


def test_options_written_as_a_python_list_literal_are_read_as_written_and_a_broken_list_is_refused(tmp_path):
    def write(path: Path, choices: str) -> Path:
        with path.open("w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows(
                [["discipline", "question", "choices", "answer"], ["Logic", "Which pair holds?", choices, "A"]]
            )
        return path

    # a list column as pandas writes it to CSV: its repr, single quotes, a comma and a quote inside an option
    path = write(tmp_path / "pandas.csv", repr(["True, True", "False, False", "it's both"]))
    bank = QuestionBank(tmp_path / "bank.sqlite")
    import_file(bank, path, fields="options=choices")
    [q] = bank.all_questions()
    assert q.options == ["True, True", "False, False", "it's both"]
    broken = write(tmp_path / "broken.csv", "['a', __import__('os')]")  # not a literal: refused, never run
    with pytest.raises(InputError, match="not a valid JSON list"):
        import_file(QuestionBank(tmp_path / "other.sqlite"), broken, fields="options=choices")
