"""The one data layer (stores/inputs.py) through every loader that reads users' files: JudgeAgent questions
and knowledge bases, interview seeds, ATAD benchmarks. The files are in tests/data_corpus/ (written for these
tests): good files load byte-exact, bad ones raise one InputError line naming file, record, field and flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dyneval.protocols.atad.benchmark import load_benchmark
from dyneval.protocols.interview import InterviewProtocol
from dyneval.protocols.interview.data import load_seeds
from dyneval.protocols.judgeagent import JudgeAgentProtocol
from dyneval.protocols.judgeagent.data import load_questions
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.inputs import MAX_NESTING, FieldMap, TooDeep, check_nesting, iter_records, read_records
from dyneval.stores.knowledge_base import load_knowledge_base
from tests.fakes import ScriptedChat
from tests.test_judgeagent_support import FakeEvaluator

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "data_corpus"


def judgeagent_questions(name: str, fields: str | None = None) -> list:
    return load_questions({"data": str(CORPUS / name), "fields": fields})[0]


def interview_seeds(name: str, fields: str | None = None) -> list:
    return load_seeds(CORPUS / name, None, fields)


def atad_items(name: str, fields: str | None = None) -> list:
    return load_benchmark(CORPUS / name, fields)


def kb_documents(name: str, fields: str | None = None) -> list:
    return load_knowledge_base(CORPUS / name, fields)


QUESTION_LOADERS = {"judgeagent": judgeagent_questions, "interview": interview_seeds}
ALL_LOADERS = {**QUESTION_LOADERS, "atad": atad_items, "kb": kb_documents}
FLAG = {"judgeagent": "--data", "interview": "--data", "atad": "--benchmark", "kb": "--kb"}


def error_of(load, *args) -> str:
    with pytest.raises(InputError) as exc:
        load(*args)
    message = str(exc.value)
    assert "\n" not in message.strip()  # one line
    return message


# -- good files load byte-exact --------------------------------------------------------------------


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_bom_crlf_csv_maps_its_header_and_keeps_quoted_crlf_and_commas(loader):
    q1, q2 = QUESTION_LOADERS[loader]("questions_bom_crlf.csv")
    assert q1.id == "c1"  # the BOM is not glued to the first column name
    assert q1.question == "Which river, the longest in Brenmark, feeds Lake Orden?"
    assert q1.answer == "The Vell.\r\nIt rises in the Kessel Hills, runs 412 km, and ends in Lake Orden."
    assert (q2.id, q2.answer) == ("c2", "1871")


def test_a_csv_with_a_semicolon_header_is_read_semicolon_delimited_and_a_comma_csv_keeps_its_semicolons(tmp_path):
    semi = tmp_path / "semi.csv"
    semi.write_text("question;choices;answer\nWhich gas, if any?;['argon, neon', 'none'];0\n", encoding="utf-8")
    assert [r.data for r in read_records(semi)] == [
        {"question": "Which gas, if any?", "choices": "['argon, neon', 'none']", "answer": "0"}
    ]
    comma = tmp_path / "comma.csv"
    comma.write_text("question,answer\nA; or B?,B\n", encoding="utf-8")
    assert [r.data for r in read_records(comma)] == [{"question": "A; or B?", "answer": "B"}]


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_multiline_reference_answer_is_stored_unchanged(loader):
    m1, m2 = QUESTION_LOADERS[loader]("questions_multiline.csv")
    assert m1.question == "What does the harbour master of Harl check, and when?"
    assert m1.answer == (
        "She checks three things:\n\n1. the draught of every barge, before it enters;\n"
        '2. the "timber mark", a stamp on each log;\n3. the tide table, at dawn.'
    )
    assert m2.answer == "Mira Stolt"


def test_judgeagent_keeps_multiline_references_exact():
    m1, m2 = judgeagent_questions("questions_multiline.csv")
    assert m1.references == [
        "The harbour master of Harl inspects barges at the lock gate.\n\n"
        "Timber without the mark is sent back, however late the hour."
    ]
    assert m2.references == []  # an empty cell is no reference, not an empty one


def test_tsv_with_other_column_names_loads_through_fields():
    qs = judgeagent_questions(
        "questions_renamed.tsv", "question=Prompt,answer=Reference answer,id=QID,difficulty=Level"
    )
    assert [(q.id, q.difficulty) for q in qs] == [("t1", "easy"), ("t2", "medium")]
    assert qs[1].answer == "Silt, at high tide;\nso the marsh rises."
    seeds = interview_seeds("questions_renamed.tsv", "question=Prompt,answer=Reference answer,id=QID,level=Level")
    assert [(s.id, s.level, s.answer) for s in seeds] == [
        ("t1", "1", "The Orden Delta"),
        ("t2", "2", "Silt, at high tide;\nso the marsh rises."),
    ]


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_json_array_numbers_and_booleans_are_answers_in_their_json_spelling(loader):
    qs = QUESTION_LOADERS[loader]("questions_array.json")
    assert [(q.id, q.answer) for q in qs] == [("j1", "42"), ("7", "2.5"), ("j3", "true")]


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_json_file_with_one_object_per_line_is_read(loader):
    assert [q.answer for q in QUESTION_LOADERS[loader]("questions_object_per_line.json")] == ["To Harl", "Brenmark"]


def test_atad_benchmark_with_bom_and_crlf_loads_exact():
    b1, b2 = atad_items("atad_bom_crlf.jsonl")
    assert (b1["id"], b1["task"], b1["item_status"], b1["topic"]) == ("b1", "T1", "finalized", "canals")
    assert b1["problem"]["sentences"][3] == "Volcanic ash can travel thousands of kilometres."
    assert b1["problem"]["answer"] == 4
    assert (b2["id"], b2["item_status"], b2["problem"]) == ("b2", "discarded", None)


def test_jsonl_lines_end_at_cr_lf_and_crlf_only_and_a_line_separator_inside_a_text_stays_in_it(tmp_path):
    """JSONL is read a line at a time (universal newlines, as a text file reads it): U+2028, valid inside a JSON
    string, is no line end, and a record's number counts the lines."""
    path = tmp_path / "mixed.jsonl"
    path.write_bytes('{"id": "a"}\r\n{"id": "b", "text": "one\u2028two"}\r{"id": "c"}\n\n{"id": 7\n'.encode())
    with pytest.raises(InputError) as bad:
        list(iter_records(path, flag="--data"))
    assert "record 5" in str(bad.value)
    path.write_bytes('{"id": "a"}\r\n{"id": "b", "text": "one\u2028two"}\r{"id": "c"}\n\n{"id": "d"}'.encode())
    got = [(r.n, r.data["id"]) for r in iter_records(path, flag="--data")]
    assert got == [(1, "a"), (2, "b"), (3, "c"), (5, "d")]
    assert read_records(path, flag="--data")[1].data["text"] == "one\u2028two"


def test_atad_benchmark_with_other_names_loads_through_fields():
    items = atad_items("atad_renamed.json", "id=item_id,task=type,item_status=status,problem=final,base_problem=base")
    assert [(i["id"], i["task"], i["problem"]["answer"]) for i in items] == [("r1", "T1", 2), ("2", "T1", 5)]


def test_a_single_text_file_is_one_knowledge_base_document():
    [doc] = kb_documents("kb_single.txt")
    assert doc.id == "kb_single.txt"
    assert "The Voss Canal links Lake Orden" in doc.chunks[0] and "timber mark" in " ".join(doc.chunks)
    [md] = kb_documents("kb_single.md")
    assert md.title == "Orden Delta" and "Spartina" in md.chunks[0]


def test_knowledge_base_records_with_other_names_load_through_kb_fields():
    docs = kb_documents("kb_records_renamed.jsonl", "id=doc,title=name,text=body")
    assert [(d.id, d.title) for d in docs] == [("d1", "Harl"), ("d2", "Kessel Hills")]
    assert docs[0].chunks == ["Harl is a port at the end of the Voss Canal. Its lighthouse was designed by Mira Stolt."]


# -- bad files: one line naming file, record, field and flag ---------------------------------------

BAD_FILES = {
    "empty.csv": ["empty.csv", "file is empty"],
    "empty.jsonl": ["empty.jsonl", "file is empty"],
    "header_only.csv": ["header_only.csv", "holds no records"],
    "binary.jsonl": ["binary.jsonl", "binary file", "byte offset 8"],
    "latin1.csv": ["latin1.csv", "not UTF-8", "0xe9", "byte offset 32"],
    "ragged_row.csv": ["ragged_row.csv", "record 1", "3 values but the header has 2 columns"],
    "questions_gzip.jsonl": ["questions_gzip.jsonl", "binary file (gzip-compressed)", "decompress it first"],
    "questions_utf16le.csv": ["questions_utf16le.csv", "UTF-16 text", "no byte-order mark", "save the file as UTF-8"],
    "questions_nul.csv": ["questions_nul.csv", "NUL byte at line 2 (byte offset 44)"],
}


@pytest.mark.parametrize("loader", ALL_LOADERS)
@pytest.mark.parametrize("name", BAD_FILES)
def test_unreadable_files_are_refused_by_every_loader(loader, name):
    message = error_of(ALL_LOADERS[loader], name)
    for needle in BAD_FILES[name]:
        assert needle in message
    assert FLAG[loader] in message
    assert "Traceback" not in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_missing_field_lists_the_fields_the_record_has(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_missing_field.jsonl")
    assert "questions_missing_field.jsonl, record 2, field 'question': missing;" in message
    assert "this record has: id, prompt, reference" in message and "--fields question=COLUMN" in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_unmapped_column_names_are_reported_with_the_columns_found(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_renamed.tsv")
    assert "record 1, field 'question'" in message and "QID, Prompt, Reference answer, Level" in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_nested_object_question_is_an_error_not_its_str(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_nested_question.jsonl")
    assert "record 2, field 'question': expected text, got an object {\"nested\": 1}" in message
    assert "{'nested': 1}" not in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_nested_object_answer_is_an_error(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_nested_answer.json")
    assert "record 1, field 'answer': expected text or a number, got an object" in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_a_number_where_question_text_is_expected_is_an_error(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_number_question.jsonl")
    assert "record 1, field 'question': expected text, got a number (17)" in message


@pytest.mark.parametrize("loader", QUESTION_LOADERS)
def test_an_error_in_a_renamed_column_names_the_users_column_and_its_role(loader):
    message = error_of(QUESTION_LOADERS[loader], "questions_array.json", "question=answer,answer=id")
    assert "record 1, field 'answer': (as question) expected text, got a number (42)" in message


@pytest.mark.parametrize(
    "name, fields, needles",
    [
        (
            "atad_renamed.json",
            None,
            ["record 1, field 'id': missing;", "this record has: item_id, type, status, final, base"],
        ),
        ("atad_problem_as_text.csv", None, ["record 1, field 'problem'", "valid dictionary"]),
        ("atad_missing_task.jsonl", None, ["record 1, field 'task'", "this record has: id, kind, item_status"]),
        ("atad_nested_id.jsonl", None, ["record 1, field 'id': expected text or a number, got an object"]),
        ("atad_renamed.json", "id=item_id,task=kind", ["record 1, field 'kind': (as task) missing;"]),
    ],
)
def test_bad_atad_benchmarks_name_record_and_field(name, fields, needles):
    message = error_of(atad_items, name, fields)
    assert name in message and "--benchmark" in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize(
    "name, fields, needles",
    [
        (
            "kb_records_renamed.jsonl",
            None,
            ["record 1, field 'text': missing;", "this record has: doc, name, body", "--kb-fields text=COLUMN"],
        ),
        ("kb_records_nested.jsonl", None, ["record 1, field 'text'", "found an object"]),
        ("kb_empty.txt", None, ["kb_empty.txt", "file is empty"]),
        ("kb_folder_binary", None, ["scan.txt", "binary file", "byte offset 0"]),
        ("kb_folder_latin1", None, ["notes.md", "not UTF-8", "byte offset 5"]),
        ("kb_folder_unsupported", None, ["map.pdf", "unsupported knowledge-base file type '.pdf'"]),
        ("kb_folder_empty", None, ["kb_folder_empty", "holds no documents"]),
        ("kb_folder_zero_byte", None, ["placeholder.md", "file is empty"]),
        ("missing_kb", None, ["missing_kb", "knowledge base not found"]),
        (
            "kb_records_renamed.jsonl",
            "txt=body",
            ["unknown field name 'txt'", "valid names: id, title, text", "--kb-fields"],
        ),
    ],
)
def test_bad_knowledge_bases_are_refused_with_the_file(name, fields, needles):
    message = error_of(kb_documents, name, fields)
    assert "--kb" in message
    for needle in needles:
        assert needle in message


# -- the field mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("qestion=Q", "unknown field name 'qestion' in 'qestion=Q'; valid names: id, question, answer"),
        ("question=", "bad mapping 'question='"),
        ("question", "bad mapping 'question'"),
        ("question=A+B", "'question' takes one column"),
        ("question=A,question=B", "'question' is mapped twice"),
    ],
)
def test_field_specs_are_validated_in_one_place(spec, needle):
    with pytest.raises(InputError, match="--fields") as exc:
        FieldMap.parse(spec, ("id", "question", "answer"), joinable=("answer",))
    assert needle in str(exc.value)


def test_joined_columns_keep_blank_positions_so_options_never_shift(tmp_path):
    path = tmp_path / "mc.csv"
    path.write_text("q,A,B,C,gold\nPick one,red,,blue,C\n", encoding="utf-8")
    message = error_of(lambda: load_questions({"data": str(path), "fields": "question=q,options=A+B+C,answer=gold"}))
    assert "record 1, field 'A+B+C': (as options) option B is empty" in message


def test_a_text_answer_that_is_both_an_index_and_another_options_text_is_refused(tmp_path):
    path = tmp_path / "mc.jsonl"
    path.write_text(
        json.dumps({"question": "Which?", "options": ["2", "4", "1", "3"], "answer": "1"})
        + "\n"
        + json.dumps({"question": "Which?", "options": ["2", "4", "1", "3"], "answer": 1})
        + "\n"
    )
    message = error_of(lambda: load_questions({"data": str(path)}))
    assert "record 1, field 'answer': answer '1' is ambiguous: 0-based index B, option text C" in message
    path.write_text(path.read_text().splitlines()[1] + "\n")
    [q], _ = load_questions({"data": str(path)})
    assert q.answer == "B"  # a JSON integer is an index (MMLU's answer: 1)


def test_parquet_is_read_with_pyarrow(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "q.parquet"
    pq.write_table(pa.table({"question": ["What is 6 x 7?"], "answer": [42]}), path)
    [record] = read_records(path, flag="--data")
    assert record.data == {"question": "What is 6 x 7?", "answer": 42} and record.n == 1


def test_parquet_is_refused_with_a_clear_message_without_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed: importing it raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "q.parquet"
    path.write_bytes(b"PAR1\x00\x00PAR1")
    message = error_of(read_records, path)
    assert "q.parquet" in message and "needs pyarrow" in message


# -- the protocols: validation in plan(), visible samples and fallbacks --------------------------------


def _open(tmp_path, protocol, chats=None, **params):
    config = RunConfig(protocol=protocol.name, out=str(tmp_path), params=params, concurrency=1, limit=1)
    return open_run(
        protocol,
        config,
        run_id=None,
        console=Console(record=True, width=200),
        chat_overrides=chats or {},
        retry_sleep=lambda s: None,
    )


@pytest.mark.parametrize(
    "kb, needle",
    [
        ("kb_folder_binary", "binary file"),
        ("kb_empty.txt", "file is empty"),
        ("kb_records_nested.jsonl", "found an object"),
    ],
)
def test_judgeagent_plan_refuses_a_bad_knowledge_base_before_anything_runs(tmp_path, kb, needle):
    with pytest.raises(InputError, match=needle):
        JudgeAgentProtocol().plan(_open(tmp_path, JudgeAgentProtocol(), kb=str(CORPUS / kb)))


def test_kb_fields_without_kb_is_refused(tmp_path):
    with pytest.raises(InputError, match="--kb-fields"):
        JudgeAgentProtocol().plan(_open(tmp_path, JudgeAgentProtocol(), kb_fields="text=body"))


@pytest.mark.parametrize(
    "kb, kb_fields, documents",
    [("kb_single.txt", None, 1), ("kb_records_renamed.jsonl", "id=doc,title=name,text=body", 2)],
)
def test_the_context_graph_is_built_from_the_given_kb_file(tmp_path, kb, kb_fields, documents):
    ev = FakeEvaluator()
    chats = {"evaluator": ScriptedChat(ev), "target": ScriptedChat(lambda m, t: "A")}
    run = _open(tmp_path, JudgeAgentProtocol(), chats, kb=str(CORPUS / kb), kb_fields=kb_fields, build_kb_only=True)
    execute(JudgeAgentProtocol(), run, skip_preflight=True)
    stats = json.loads((run.run_dir / "kb_stats.json").read_text())
    assert stats["documents"] == documents and stats["entities"] > 3 and "warning" not in stats
    assert stats["source"] == str(CORPUS / kb)


def test_keyword_fallback_for_every_chunk_and_the_shipped_samples_are_reported(tmp_path):
    ev = FakeEvaluator(entity_labels=False)  # the evaluator labels no entity at all
    chats = {"evaluator": ScriptedChat(ev), "target": ScriptedChat(lambda m, t: "A")}
    run = _open(tmp_path, JudgeAgentProtocol(), chats, rounds=1, no_validation=True)
    summary = execute(JudgeAgentProtocol(), run, skip_preflight=True)
    inputs = summary["metrics"]["inputs"]
    assert "all context-graph entities come from the keyword fallback" in inputs["knowledge_base_warning"]
    assert inputs["questions"].startswith("shipped sample") and "no --data given" in inputs["questions"]
    assert inputs["knowledge_base"].startswith("shipped sample") and "no --kb given" in inputs["knowledge_base"]
    report = (run.run_dir / "report.md").read_text()
    assert "keyword fallback" in report and "shipped sample" in report
    console = run.console.export_text()
    assert "warning: the evaluator labelled no entity" in console and "questions: shipped sample" in console
    assert "keyword fallback" in json.loads((run.run_dir / "kb_stats.json").read_text())["warning"]


def test_interview_says_when_it_uses_the_shipped_sample(tmp_path):
    run = _open(tmp_path, InterviewProtocol())
    InterviewProtocol().plan(run)
    assert "seed questions: shipped sample" in run.console.export_text()
    given = _open(tmp_path, InterviewProtocol(), data=str(CORPUS / "questions_array.json"))
    InterviewProtocol().plan(given)
    text = given.console.export_text()
    assert "questions_array.json" in text and "shipped sample" not in text


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--protocol", "interview", "--data", str(CORPUS / "latin1.csv")], ["latin1.csv", "byte offset 32"]),
        (["--protocol", "judgeagent", "--kb", str(CORPUS / "kb_folder_binary")], ["scan.txt", "binary file"]),
        (
            ["--protocol", "atad", "--evaluate", "local", "--benchmark", str(CORPUS / "atad_missing_task.jsonl")],
            ["record 1, field 'task'", "this record has: id, kind, item_status"],
        ),
    ],
)
def test_cli_bad_file_exits_2_with_one_line(tmp_path, argv, needles):
    env = {**os.environ, "OPENAI_API_KEY": "unused"}
    proc = subprocess.run(
        [sys.executable, "run.py", *argv, "--out", str(tmp_path), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]
    assert not list(tmp_path.iterdir())  # no run directory left behind


def test_an_empty_cell_is_reported_as_empty_without_a_mapping_hint(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("question,answer\n,4\n", encoding="utf-8")
    message = error_of(lambda: load_questions({"data": str(path)}))
    assert message.endswith("record 1, field 'question': empty; this record has: answer [--data]")


@pytest.mark.parametrize(
    "name, data, needle",
    [
        (
            "dup.jsonl",
            b'{"question": "a", "question": "b", "answer": "c"}\n',
            "record 1, field 'question': key given twice",
        ),
        ("dup.json", b'[{"question": "a", "answer": "c", "answer": "d"}]', "key 'answer' given twice"),
        ("utf16.csv", "question,answer\nq,a\n".encode("utf-16"), "UTF-16 text"),
    ],
)
def test_json_keys_given_twice_and_utf16_files_are_refused(tmp_path, name, data, needle):
    path = tmp_path / name
    path.write_bytes(data)
    message = error_of(read_records, path)
    assert name in message and needle in message


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    "name, text, needle",
    [
        (
            "field.jsonl",
            f'{{"id": "a", "question": "q", "answer": 1}}\n{{"id": "b", "answer": {_nested(100)}}}\n',
            "field.jsonl, record 2, field 'answer': nested deeper than 100 levels of lists and objects [--data]",
        ),
        (
            "deep_field.jsonl",
            f'{{"id": "a", "question": {_nested(10_000)}}}\n',
            "deep_field.jsonl, record 1: nested",
        ),
        ("line.jsonl", _nested(10_000) + "\n", "line.jsonl, record 1: nested deeper than 100 levels"),
        (
            "array.json",
            f'[{{"id": "a"}}, {{"id": "b", "question": {_nested(500)}}}]',
            "array.json, record 2, field 'question': nested deeper",
        ),
        (
            "by_id.json",
            f'{{"a": {{"q": 1}}, "b": {{"q": {_nested(500)}}}}}',
            "by_id.json, record b, field 'q': nested",
        ),
        ("document.json", _nested(10_000), "document.json, field '--data': nested deeper than 100 levels"),
    ],
)
def test_json_nested_deeper_than_the_limit_is_refused_naming_record_and_field(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert needle in error_of(read_records, path)


def test_json_nested_exactly_to_the_limit_loads(tmp_path):
    path = tmp_path / "limit.jsonl"
    path.write_text(f'{{"id": "a", "answer": {_nested(MAX_NESTING - 1)}}}\n', encoding="utf-8")
    assert read_records(path)[0].data["id"] == "a"


def test_the_nesting_check_walks_without_recursion_and_ends_on_a_cycle():
    deep: list = []
    for _ in range(100_000):  # far past Python's recursion limit
        deep = [deep]
    with pytest.raises(TooDeep) as exc:
        check_nesting({"question": deep})
    assert exc.value.path == ("question", 0)
    cycle: list = []
    cycle.append(cycle)  # what a YAML alias (&a [*a]) makes
    with pytest.raises(TooDeep):
        check_nesting(cycle)


def test_a_kb_folder_follows_linked_folders_and_refuses_a_link_loop_or_a_broken_link(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "canal.md").write_text("The Voss Canal links Lake Orden with Harl.\n", encoding="utf-8")
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "delta.md").write_text("Herons feed in the Orden Delta.\n", encoding="utf-8")
    (kb / "linked").symlink_to(tmp_path / "shared")
    assert [d.id for d in load_knowledge_base(kb)] == ["delta.md", "linked/canal.md"]
    (kb / "sub" / "loop").symlink_to(kb)
    message = error_of(load_knowledge_base, kb)
    assert f"{kb}/sub/loop, field '--kb': symbolic link loop: leads back to {kb.resolve()}" in message
    (kb / "sub" / "loop").unlink()
    (kb / "gone.md").symlink_to(tmp_path / "nothing.md")
    assert "gone.md, field '--kb': neither a file nor a folder (a broken or looping symbolic link?)" in error_of(
        load_knowledge_base, kb
    )
