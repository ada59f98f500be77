"""ATAD's judging roles in the judge check: the orchestrator's validation (Appendix D.2.1 / D.2.3) and the
quality reviewer (section 4.4, Table 3) run ATAD's own node functions and prompts over hand-labelled problems;
problems ATAD would reject in code are refused as input."""

from __future__ import annotations

import json

import pytest

from dyneval.protocols.judgecheck.data import load_items
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat, all_text
from tests.test_judgecheck import _execute, _records


def test_the_orchestrator_check_runs_atads_validation_prompts_and_scores_approval(tmp_path):
    seen: dict[str, str] = {}

    def approves_initial_rejects_scaled(messages, tool):
        if tool is None:
            return "pong"
        text = all_text(messages)
        scaled = "A harder version" in text
        seen["scaled" if scaled else "initial"] = text
        return {"approved": not scaled, "feedback": "" if not scaled else "too easy for the tier"}

    run, summary = _execute(
        tmp_path, {"judge": "atad.orchestrator"}, {"evaluator": ScriptedChat(approves_initial_rejects_scaled)}
    )
    items = load_items(None, "atad.orchestrator")
    hard = [i for i in items if i.level]
    assert hard and 'difficulty "hard"' in seen["scaled"] and "be lenient" in seen["scaled"]
    assert "Fairness: is there exactly one clear" in seen["initial"] and "Correct answer: option" in seen["initial"]
    expected = sum((i.label == "approved") == (not i.level) for i in items) / len(items)
    rater = summary["metrics"]["raters"]["m0"]
    assert rater["measures"]["accuracy"]["value"] == pytest.approx(expected)
    assert rater["decided_by"] == {"initial": len(items) - len(hard), "scaled": len(hard)}
    assert rater["confusion"]["labels"] == ["approved", "rejected"]
    by_id = {r["item_id"]: r["verdicts"][0] for r in _records(run)}
    assert by_id[hard[0].id]["value"] == "rejected" and by_id[hard[0].id]["reason"] == "too easy for the tier"


def test_a_strict_orchestrator_check_uses_the_strict_scaled_prompt(tmp_path):
    seen = []

    def judge(messages, tool):
        seen.append(all_text(messages))
        return {"approved": True, "feedback": ""} if tool else "pong"

    _execute(tmp_path, {"judge": "atad.orchestrator", "lenient_escalation": False}, {"evaluator": ScriptedChat(judge)})
    scaled = [t for t in seen if "A harder version" in t]
    assert scaled and all("same standard as for a base problem" in t for t in scaled)


@pytest.mark.parametrize("aspect, score", [("validity", 5), ("coherence", 3), ("fairness", 1)])
def test_the_reviewer_check_compares_the_chosen_table3_score_with_its_column(tmp_path, aspect, score):
    def reviewer(messages, tool):
        if tool is None:
            return "pong"
        assert "Score each from 1 (very poor) to 5" in all_text(messages)
        return {"validity": 5, "coherence": 3, "fairness": 1, "approved": True}

    _, summary = _execute(tmp_path, {"judge": "atad.reviewer", "aspect": aspect}, {"evaluator": ScriptedChat(reviewer)})
    rows = [json.loads(line) for line in open("samples/judgecheck/problems.jsonl")]
    rater = summary["metrics"]["raters"]["m0"]
    assert rater["measures"]["accuracy"]["value"] == pytest.approx(sum(r[aspect] == score for r in rows) / len(rows))
    assert {"kappa_quadratic", "spearman"} <= set(rater["measures"])  # an ordinal 1-5 scale
    assert rater["confusion"]["labels"] == ["1", "2", "3", "4", "5"]


def test_a_reviewer_that_gives_no_usable_review_leaves_the_item_ungraded(tmp_path):
    def broken(messages, tool):
        return {"nonsense": 1} if tool else "pong"

    _, summary = _execute(tmp_path, {"judge": "atad.reviewer"}, {"evaluator": ScriptedChat(broken)})
    m = summary["metrics"]["raters"]["m0"]["measures"]["accuracy"]
    assert (m["value"], m["n"], m["ungraded"]) == (None, 0, len(load_items(None, "atad.reviewer")))


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"task": "T9"}, "task", "unknown ATAD task"),
        ({"problem": {"sentences": ["One.", "Two.", "Three."], "answer": 1}}, "problem", "sentence_count"),
        (
            {"problem": {"sentences": ["A cat.", "A dog.", "A cow.", "A pig.", "A hen."], "answer": 9}},
            "problem",
            "answer_range",
        ),
        ({"problem": "not json"}, "problem", "not a JSON object"),
        ({"label": "maybe"}, "label", "approved"),
    ],
)
def test_a_problem_atad_would_reject_in_code_is_refused_naming_record_and_field(tmp_path, change, field, words):
    good = json.loads(open("samples/judgecheck/problems.jsonl").readline())
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"id": "bad"} | change) + "\n")
    with pytest.raises(InputError) as exc:
        load_items(path, "atad.orchestrator")
    text = str(exc.value)
    assert "record 2" in text and repr(field) in text and words in text


def test_a_csv_problem_is_read_from_its_json_text_and_the_reviewer_label_can_be_mapped(tmp_path):
    path = tmp_path / "p.csv"
    problem = json.dumps(
        {
            "sentence": "She was ___ to hear the good news.",
            "choices": ["happy", "glad", "thrilled", "miserable", "delighted"],
            "answer": 4,
        }
    )
    path.write_text('id,task,problem,Human\nx1,T3,"' + problem.replace('"', '""') + '",4\n')
    item = load_items(path, "atad.reviewer", "label=Human")[0]
    assert (item.task, item.problem["answer"], item.label) == ("T3", 4, "4")
