"""Public multiple-choice sets in the llmeval bank: an answer given as a 0-based index (MMLU's ``answer: 2``, a
CSV cell ``2``) or as an option's text is stored as its option letter, read by the one function judgeagent reads
its answers with (``stores.choices.option_letters``); an answer that reads as two different options is refused
naming file, record and field; ``--discipline`` gives a file without a discipline column one (a record's own
wins). The real-data checks import MMLU-Redux CSV files from ../shared/data."""

from __future__ import annotations

import ast
import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from dyneval.nodes.llmeval.bankio import import_file
from dyneval.protocols.judgeagent.data import load_questions
from dyneval.state.errors import InputError
from dyneval.stores.choices import key_letters
from dyneval.stores.question_bank import QuestionBank


def cli(*args: str) -> int:
    from dyneval.cli import main

    return main(["--protocol", "llmeval", *args])


def import_only(tmp_path: Path, *args: str) -> int:
    """``--import-only`` of ``args`` into ``tmp_path/bank.sqlite`` (exact-duplicate check only)."""
    return cli(
        "--out",
        str(tmp_path / "runs"),
        "--bank-db",
        str(tmp_path / "bank.sqlite"),
        "--near-dup-threshold",
        "0",
        *args,
        "--import-only",
    )


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[list[str]], delimiter: str = ",") -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, delimiter=delimiter).writerows(rows)
    return path


def answers(bank: QuestionBank) -> dict[str, str]:
    """question text -> stored answer."""
    return {q.question: q.answer for q in bank.all_questions()}


PLANETS = ["Venus", "Mercury", "Mars", "Jupiter"]


def test_an_integer_index_a_digit_text_and_an_option_text_import_as_the_options_letter(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    jsonl = write_jsonl(
        tmp_path / "mmlu.jsonl",
        [
            {"discipline": "Science", "question": "Q1 which is third?", "options": PLANETS, "answer": 2},
            # a JSON integer is only ever an index, even where an option's text reads like another index
            {"discipline": "Science", "question": "Q2 which number?", "options": ["2", "4", "1", "3"], "answer": 1},
            {"discipline": "Science", "question": "Q3 which is red?", "options": PLANETS, "answer": "mars."},
            {"discipline": "Science", "question": "Q4 lower-case letter?", "options": PLANETS, "answer": "d"},
        ],
    )
    assert import_file(bank, jsonl).imported == 4
    csv_file = write_csv(
        tmp_path / "mmlu.csv",
        [
            ["discipline", "question", "choices", "answer"],
            ["Science", "Q5 a CSV cell 0?", repr(PLANETS), "0"],
            ["Science", "Q6 a CSV cell 3?", repr(PLANETS), "3"],
        ],
    )
    assert import_file(bank, csv_file, fields="options=choices").imported == 2
    assert answers(bank) == {
        "Q1 which is third?": "C",
        "Q2 which number?": "B",
        "Q3 which is red?": "C",
        "Q4 lower-case letter?": "D",
        "Q5 a CSV cell 0?": "A",
        "Q6 a CSV cell 3?": "D",
    }


def judgeagent_reads(path: Path, form: str = "any") -> str:
    """The stored answer judgeagent's ``--data`` makes of the file's one question, or its refusal."""
    try:
        return load_questions({"data": str(path), "answer_form": form})[0][0].answer
    except InputError as exc:
        return exc.message.removesuffix(" [--data]")


def llmeval_reads(path: Path, bank: QuestionBank, form: str = "any") -> str:
    """The stored answer llmeval's ``--bank`` makes of the file's one question, or its refusal."""
    try:
        import_file(bank, path, form=form)
    except InputError as exc:
        return exc.message.removesuffix(" [--bank]")
    return answers(bank)["Which one?"]


@pytest.mark.parametrize(
    "options, answer, expected",
    [
        (PLANETS, 3, "D"),
        (PLANETS, "3", "D"),
        (PLANETS, "jupiter", "D"),
        (PLANETS, "b", "B"),
        (["2", "4", "1", "3"], 1, "B"),
        (
            ["2", "4", "1", "3"],
            "1",
            "answer '1' is ambiguous: 0-based index B, option text C (--answer-form letter, index or text says which)",
        ),
        (
            ["2", "4", "1", "3"],
            "9",
            "answer '9' is not an option letter, 0-based index or option text (A-D or 0-3 for 4 options)",
        ),
        (PLANETS, 7, "answer 7 is not a 0-based option index (0-3 for 4 options)"),
    ],
)
def test_judgeagent_and_llmeval_read_an_answer_alike(tmp_path, options, answer, expected):
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [{"discipline": "Science", "question": "Which one?", "options": options, "answer": answer}],
    )
    assert judgeagent_reads(path) == llmeval_reads(path, QuestionBank(tmp_path / "bank.sqlite")) == expected


@pytest.mark.parametrize(
    "options, answer, form, expected",
    [
        (["2", "4", "1", "3"], "1", "index", "B"),
        (["2", "4", "1", "3"], "1", "text", "C"),
        (
            ["2", "4", "1", "3"],
            "1",
            "letter",
            "answer '1' is not an option letter of the 4 options (--answer-form letter)",
        ),
        (PLANETS, "b", "index", "answer 'b' is not a 0-based index of the 4 options (--answer-form index)"),
        (PLANETS, "1", "text", "answer '1' is not an option's text of the 4 options (--answer-form text)"),
        (PLANETS, 2, "text", "C"),  # a JSON integer is an index whatever the form
    ],
)
def test_answer_form_reads_every_answer_the_one_way_it_names_in_both_protocols(
    tmp_path, options, answer, form, expected
):
    path = write_jsonl(
        tmp_path / "q.jsonl",
        [{"discipline": "Science", "question": "Which one?", "options": options, "answer": answer}],
    )
    assert judgeagent_reads(path, form) == llmeval_reads(path, QuestionBank(tmp_path / "bank.sqlite"), form) == expected


def test_a_key_of_several_letters_still_imports_as_written_and_reads_as_its_letters(tmp_path):
    bank = QuestionBank(tmp_path / "bank.sqlite")
    path = write_jsonl(
        tmp_path / "multi.jsonl",
        [
            {"discipline": "Science", "question": "Which are inner planets?", "options": PLANETS, "answer": "A, B, C"},
            {"discipline": "Science", "question": "Which are rocky?", "options": PLANETS, "answer": "ABC"},
        ],
    )
    assert import_file(bank, path).imported == 2
    stored = answers(bank)
    assert stored == {"Which are inner planets?": "A, B, C", "Which are rocky?": "ABC"}
    assert all(key_letters(a) == ["A", "B", "C"] for a in stored.values())


@pytest.mark.parametrize(
    "options, answer, says",
    [
        (["2", "4", "1", "3"], "1", "answer '1' is ambiguous: 0-based index B, option text C"),  # MMLU-Redux's case
        (["A", "B", "AB", "O"], "AB", "answer 'AB' is ambiguous: option letters A and B, option text C"),
        (["1", "0", "x", "y"], "0", "answer '0' is ambiguous: 0-based index A, option text B"),
    ],
)
def test_a_text_answer_that_reads_as_two_different_options_is_refused_naming_file_record_and_field(
    tmp_path, capsys, options, answer, says
):
    path = write_csv(
        tmp_path / "public.csv",
        [
            ["discipline", "question", "choices", "gold"],
            ["Science", "A fine first question?", repr(PLANETS), "B"],
            ["Science", "Which one?", repr(options), answer],
        ],
    )
    assert import_only(tmp_path, "--bank", str(path), "--fields", "options=choices,answer=gold") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (
        f"public.csv, record 2, field 'gold': (as answer) {says} (--answer-form letter, index or text says "
        "which) [--bank]" in err
    )
    assert not (tmp_path / "bank.sqlite").exists() and not (tmp_path / "runs").exists()  # nothing created


def test_an_index_beyond_the_options_is_refused_with_the_range(tmp_path):
    path = write_jsonl(
        tmp_path / "far.jsonl", [{"discipline": "Science", "question": "Which?", "options": PLANETS, "answer": 4}]
    )
    with pytest.raises(InputError) as err:
        import_file(QuestionBank(tmp_path / "bank.sqlite"), path)
    assert "far.jsonl, record 1, field 'answer': answer 4 is not a 0-based option index (0-3 for 4 options)" in str(
        err.value
    )


def no_discipline_file(tmp_path: Path) -> Path:
    """Records without a discipline (no column, a blank one) and one with its own."""
    return write_jsonl(
        tmp_path / "agieval.jsonl",
        [
            {"question": "What is 2 + 2?", "answer": "4"},
            {"discipline": "  ", "question": "What is 3 + 3?", "answer": "6"},
            {"discipline": "History", "question": "Who crossed the Rubicon?", "answer": "Caesar"},
        ],
    )


def test_discipline_flag_fills_records_without_one_and_never_overrides_a_records_own(tmp_path):
    assert import_only(tmp_path, "--bank", str(no_discipline_file(tmp_path)), "--discipline", "Mathematics") == 0
    assert {q.question: q.discipline for q in QuestionBank(tmp_path / "bank.sqlite").all_questions()} == {
        "What is 2 + 2?": "Mathematics",
        "What is 3 + 3?": "Mathematics",
        "Who crossed the Rubicon?": "History",
    }


def test_discipline_from_the_config_files_params_fills_records_too(tmp_path):
    config = tmp_path / "eval.toml"
    config.write_text("[params]\ndiscipline = 'Arithmetic'\n", encoding="utf-8")
    assert import_only(tmp_path, "--config", str(config), "--bank", str(no_discipline_file(tmp_path))) == 0
    assert sorted(q.discipline for q in QuestionBank(tmp_path / "bank.sqlite").all_questions()) == [
        "Arithmetic",
        "Arithmetic",
        "History",
    ]


def test_without_the_flag_a_record_without_discipline_is_refused_and_the_message_names_the_flag(tmp_path, capsys):
    assert import_only(tmp_path, "--bank", str(no_discipline_file(tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "agieval.jsonl, record 1, field 'discipline': missing" in err and "--discipline NAME" in err
    assert "this record has: question, answer" in err
    assert not (tmp_path / "bank.sqlite").exists()


@pytest.mark.parametrize(
    "args, blame",
    [
        (["--discipline", " "], "--discipline: must not be empty"),
        (
            ["--discipline", "Law", "--leaderboard"],
            "'--discipline': --fields, --skip-invalid, --discipline and "
            "--answer-form apply to a --bank file or --hf-dataset; neither was given",
        ),
        (
            ["--answer-form", "index", "--leaderboard"],
            "'--answer-form': --fields, --skip-invalid, --discipline and "
            "--answer-form apply to a --bank file or --hf-dataset; neither was given",
        ),
    ],
)
def test_an_empty_discipline_or_one_without_a_bank_file_is_refused_naming_the_flag(tmp_path, capsys, args, blame):
    bank = [] if "--leaderboard" in args else ["--bank", str(no_discipline_file(tmp_path))]
    assert cli("--out", str(tmp_path / "runs"), "--bank-db", str(tmp_path / "bank.sqlite"), *bank, *args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and blame in err
    assert not (tmp_path / "bank.sqlite").exists() and not (tmp_path / "runs").exists()


# -- real data: MMLU-Redux (../shared/data/mmlu_redux) ------------------------------------------------------------


def mmlu_rows(path: Path) -> list[dict[str, str]]:
    """The file's rows as Python's csv module reads them (MMLU-Redux ships ``;`` and ``,`` separated files)."""
    text = path.read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=";" if ";" in text.split("\n", 1)[0] else ","))


@pytest.mark.parametrize("name", ["mmlu_anatomy.csv", "mmlu_clinical_knowledge.csv"])
def test_mmlu_redux_indices_are_stored_as_their_letters_for_every_record(tmp_path, shared_data, name):
    path = tmp_path / name
    shutil.copy(shared_data / "mmlu_redux" / name, path)
    subject = name.removeprefix("mmlu_").removesuffix(".csv")
    assert import_only(tmp_path, "--bank", str(path), "--fields", "options=choices", "--discipline", subject) == 0
    rows = mmlu_rows(path)
    bank = QuestionBank(tmp_path / "bank.sqlite")
    stored = {q.question: q for q in bank.all_questions()}
    assert len(rows) == len(stored) == 100
    for row in rows:
        q = stored[row["question"]]
        assert q.answer == "ABCD"[int(row["answer"])], row["question"]
        assert q.options == ast.literal_eval(row["choices"]) and q.qtype == "mcq"
    assert {q.discipline for q in stored.values()} == {subject}


def test_mmlu_redux_digit_answers_among_digit_options_are_refused_and_the_rest_keep_their_index(tmp_path, shared_data):
    path = tmp_path / "mmlu_abstract_algebra.csv"
    shutil.copy(shared_data / "mmlu_redux" / path.name, path)
    bank = QuestionBank(tmp_path / "bank.sqlite")
    with pytest.raises(InputError) as err:
        import_file(bank, path, fields="options=choices", discipline="algebra")
    # record 11: options 0, 2, 1, 3 and the cell "1": index B or the option reading 1 (C)
    assert (
        "mmlu_abstract_algebra.csv, record 11, field 'answer': answer '1' is ambiguous: 0-based index B, option text C"
    ) in str(err.value)
    report = import_file(bank, path, fields="options=choices", discipline="algebra", skip_invalid=True)
    rows = mmlu_rows(path)
    refused = {n for n, _ in report.rejected}
    assert all("is ambiguous: 0-based index" in why for _, why in report.rejected)
    # refused: exactly the cells that are an index and also another option's text
    assert refused == {
        n
        for n, row in enumerate(rows, 1)
        if row["answer"] in ast.literal_eval(row["choices"])
        and ast.literal_eval(row["choices"]).index(row["answer"]) != int(row["answer"])
    }
    by_key = {(q.question, tuple(q.options)): q.answer for q in bank.all_questions()}
    repeats = {d.record for d in report.duplicates}  # exact repeats of an earlier record: not stored again
    kept = [row for n, row in enumerate(rows, 1) if n not in refused | repeats]
    assert len(by_key) == report.imported == len(kept) > 80
    for row in kept:
        assert by_key[(row["question"], tuple(ast.literal_eval(row["choices"])))] == "ABCD"[int(row["answer"])]


def test_mmlu_redux_with_answer_form_index_keeps_every_record_as_its_index(tmp_path, shared_data):
    """The file's answers are all 0-based indices: said so, the records read every way as two options import too."""
    path = tmp_path / "mmlu_abstract_algebra.csv"
    shutil.copy(shared_data / "mmlu_redux" / path.name, path)
    assert (
        import_only(
            tmp_path,
            "--bank",
            str(path),
            "--fields",
            "options=choices",
            "--discipline",
            "algebra",
            "--answer-form",
            "index",
            "--skip-invalid",
        )
        == 0
    )
    bank = QuestionBank(tmp_path / "bank.sqlite")
    by_key = {(q.question, tuple(q.options)): q.answer for q in bank.all_questions()}
    rows = mmlu_rows(path)
    ambiguous = [
        row
        for row in rows
        if row["answer"] in ast.literal_eval(row["choices"])
        and ast.literal_eval(row["choices"]).index(row["answer"]) != int(row["answer"])
    ]
    assert ambiguous  # the records the default reading refuses
    for row in ambiguous:
        assert by_key[(row["question"], tuple(ast.literal_eval(row["choices"])))] == "ABCD"[int(row["answer"])]
