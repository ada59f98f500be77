"""JudgeAgent through the batch runner (fake models): concurrent batches, kill + resume, cached graph,
report; dataset loading with field mappings; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from dyneval.protocols.judgeagent import JudgeAgentProtocol
from dyneval.protocols.judgeagent.data import load_questions, split_batches
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat, all_text
from tests.test_judgeagent_support import FakeEvaluator, SimulatedTarget

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "judgeagent" / "questions.jsonl"
KILL_QUESTION = "Which member of a honeybee colony lays the eggs?"


class Killed(BaseException):
    """Stands in for the process being killed mid-run."""


def _open(tmp_path, chats, run_id=None, concurrency=2, **params):
    config = RunConfig(protocol="judgeagent", out=str(tmp_path), params=params, concurrency=concurrency)
    return open_run(
        JudgeAgentProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )


def _gold() -> dict[str, str]:
    return {json.loads(line)["question"]: json.loads(line)["answer"] for line in SAMPLE.read_text().splitlines()}


def test_sample_run_is_concurrent_resumable_and_reports(tmp_path):
    state = {"kill": True}
    ev = FakeEvaluator(verdict=False)

    def evaluator(messages, tool):
        if tool and tool["function"]["name"] == "Feedback" and KILL_QUESTION in all_text(messages) and state["kill"]:
            raise Killed()
        return ev(messages, tool)

    target = ScriptedChat(SimulatedTarget(0.6, _gold()))
    chats = {"evaluator": ScriptedChat(evaluator), "target": target}
    run = _open(tmp_path, chats, concurrency=1, rounds=2)
    with pytest.raises(Killed):
        execute(JudgeAgentProtocol(), run, skip_preflight=True)
    kb_calls = len([p for p in ev.prompts["EntityLabels"] if "Voss" not in p and "honeybee" in p.lower()])
    assert kb_calls >= 1

    state["kill"] = False
    resumed = _open(tmp_path, chats, run_id=run.run_dir.name, concurrency=2, rounds=2)
    summary = execute(JudgeAgentProtocol(), resumed, skip_preflight=True)
    assert summary["status_counts"] == {"ok": 5}
    base_asks = [
        all_text(m) for m, _ in target.calls if "Answer with the letter" in all_text(m) and KILL_QUESTION in all_text(m)
    ]
    assert len(base_asks) == 1  # graded before the kill, continued from the checkpoint afterwards
    records = [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["unit_id"] for r in records) == [f"batch-{i:04d}" for i in range(1, 6)]
    # the context graph came from the cache in the resumed session: no new knowledge-base labelling
    assert len([p for p in ev.prompts["EntityLabels"] if "honeybee" in p.lower() and "Voss" not in p]) == kb_calls
    m = summary["metrics"]
    assert m["batches"] == 5 and m["base_questions"] == 15
    # the resumed session did not plan again: the format still comes from what the batches were asked in
    assert m["answer_format"] == m["settings"]["answer_format"] == run.params["answer_format"] is not None
    assert set(m["dynamic_scores"]) == {"base", "@1", "@2"}
    assert m["difficulty_distribution"]["total"] == 10
    assert m["validation"]["overall"]["n"] == 15
    report = (run.run_dir / "report.md").read_text()
    for needle in (
        "ACC1",
        "CR | wrong",
        "Table 3 style",
        "avg tokens per seed question",
        "suggestions",
        "Read the question twice.",
    ):
        assert needle in report
    assert (run.run_dir / "figures" / "judgeagent_difficulty_trajectory.png").exists()


def test_build_kb_only_builds_once_then_loads_from_cache(tmp_path):
    ev = FakeEvaluator()
    chats = {"evaluator": ScriptedChat(ev), "target": ScriptedChat(lambda m, t: "A")}
    execute(JudgeAgentProtocol(), _open(tmp_path, chats, build_kb_only=True), skip_preflight=True)
    first = len(ev.prompts["EntityLabels"])
    assert first == 4  # 16 sample chunks, 5 per call
    run = _open(tmp_path, chats, build_kb_only=True)
    execute(JudgeAgentProtocol(), run, skip_preflight=True)
    assert len(ev.prompts["EntityLabels"]) == first
    stats = json.loads((run.run_dir / "kb_stats.json").read_text())
    assert stats["chunks"] == 16 and stats["documents"] == 4 and stats["entities"] > 10


def test_field_mapping_reads_pubmedqa_style_json_with_fixed_choices(tmp_path):
    data = tmp_path / "pq.json"
    data.write_text(
        json.dumps(
            {
                "111": {"QUESTION": "Does X help?", "CONTEXTS": ["ctx one", "ctx two"], "final_decision": "no"},
                "222": {"QUESTION": "Does Y help?", "CONTEXTS": ["ctx three"], "final_decision": "maybe"},
            }
        )
    )
    qs, _ = load_questions(
        {
            "data": str(data),
            "choices": "yes,no,maybe",
            "fields": "question=QUESTION,answer=final_decision,references=CONTEXTS",
        }
    )
    assert [(q.id, q.answer, q.options, q.references) for q in qs] == [
        ("111", "B", ["yes", "no", "maybe"], ["ctx one", "ctx two"]),
        ("222", "C", ["yes", "no", "maybe"], ["ctx three"]),
    ]
    assert [len(b) for b in split_batches(qs, 3)] == [2]


def test_field_mapping_joins_fields_and_reads_indices(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps(
            {"q": "Pick", "choices": ["a", "b", "c"], "gold": 2, "para_a": ["s1", "s2"], "para_b": ["s3"], "level": "2"}
        )
        + "\n"
    )
    [q], _ = load_questions(
        {
            "data": str(data),
            "fields": "question=q,options=choices,answer=gold,references=para_a+para_b,difficulty=level",
        }
    )
    assert (q.answer, q.references, q.difficulty, q.id) == ("C", ["s1", "s2", "s3"], "medium", "q1")


@pytest.mark.parametrize(
    "line,fields,message",
    [
        ({"question": "Q?"}, None, "record 1, field 'answer': missing"),
        ({"question": "Q?", "options": ["a", "b"], "answer": "Z"}, None, "not an option letter"),
        ({"question": "Q?", "answer": "x", "difficulty": "extreme"}, None, "difficulty 'extreme'"),
        ({"question": "Q?", "answer": "x"}, "bogus=1", "unknown field name 'bogus'.*valid names: id, question"),
    ],
)
def test_bad_datasets_name_the_record_and_field(tmp_path, line, fields, message):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(line) + "\n")
    with pytest.raises(InputError, match=message):
        load_questions({"data": str(data), "fields": fields})


def test_plan_refuses_gains_that_break_appendix_b_and_data_without_knowledge(tmp_path):
    run = _open(tmp_path, {}, gains="1,1.5,3")
    with pytest.raises(InputError, match="c1 \\+ c3"):
        JudgeAgentProtocol().plan(run)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "Q?", "answer": "x"}) + "\n")
    with pytest.raises(InputError, match="no knowledge base"):
        JudgeAgentProtocol().plan(_open(tmp_path, {}, data=str(data)))
    units = JudgeAgentProtocol().plan(_open(tmp_path, {}, batch_size=4))
    assert [len(u.input["batch"]) for u in units] == [4, 4, 4, 3]


def test_hugging_face_dataset_without_the_package_or_network_is_a_clear_input_error():
    with pytest.raises(InputError, match="needs the \\[hub\\] extra|cannot load"):
        load_questions({"hf_dataset": "no-such-user/no-such-dataset", "hf_split": "test"})
