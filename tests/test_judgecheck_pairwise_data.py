"""Pairwise data read as the papers read it: an empty output is an item like any other (the other output should
win), left out only with ``--skip-empty``; ``--label-vote`` takes the majority of three annotator columns (an
annotator tie leaves the item out, counted); ``--invalid-verdict tie`` counts an unusable verdict as a tie where
the default leaves it ungraded; a multi-turn pair (two conversations) is judged on its last turn. Every figure
below is computed by hand from the six records of :func:`records`."""

from __future__ import annotations

import json

import pytest

from dyneval.protocols.judgecheck.data import load_labelled
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat, all_text
from tests.test_judgecheck import _execute, _records

FIELDS = "question=instruction,output_1=response1,output_2=response2"
VOTE = "annotator1,annotator2,annotator3"


def records() -> list[dict]:
    """Six pairs written for this test, labels 0 = tie, 1, 2 by three annotators:

    ============  ===========  ===========  ===========  ===========  =================
    instruction   response1    response2    annotators   majority     the judge says
    ============  ===========  ===========  ===========  ===========  =================
    river         The Nile.    (empty)      1 1 2        1            1 (A: B is empty)
    colour        (empty)      Blue.        2 2 2        2            2 (B: A is empty)
    metal         Iron.        Copper.      1 2 0        tied: out    -
    planet        Mars.        Venus.       0 0 1        tie          unusable
    fruit         Apple.       Pear.        2 2 1        2            1 (A)
    bird          Robin.       (empty)      1 1 1        1            unusable
    ============  ===========  ===========  ===========  ===========  =================
    """
    rows = [
        ("name a river", "The Nile.", "", (1, 1, 2)),
        ("name a colour", "", "Blue.", (2, 2, 2)),
        ("name a metal", "Iron.", "Copper.", (1, 2, 0)),
        ("unusable: name a planet", "Mars.", "Venus.", (0, 0, 1)),
        ("name a fruit", "Apple.", "Pear.", (2, 2, 1)),
        ("unusable: name a bird", "Robin.", "", (1, 1, 1)),
    ]
    return [
        {"id": q.split()[-1], "instruction": q, "response1": a, "response2": b}
        | {f"annotator{k + 1}": v for k, v in enumerate(votes)}
        for q, a, b, votes in rows
    ]


def judge(messages, tool):
    """A over an empty B, B over an empty A, no usable verdict on an ``unusable`` instruction, else A."""
    if tool is None:
        return "pong"
    text = all_text(messages)
    if "unusable" in text:
        return {"unexpected": 1}  # never a valid PairwiseVerdict, not even after the repair
    a, b = text.split("[Output A]")[1].split("[Output B]")
    b = b.split("[End of outputs]")[0]
    return {"winner": "B" if not a.strip() else "A" if not b.strip() else "A", "reason": "."}


def run(tmp_path, **options):
    tmp_path.mkdir(exist_ok=True)
    labels = tmp_path / "pairs.json"
    labels.write_text(json.dumps(records()), encoding="utf-8")
    params = {
        "judge": "pairwise",
        "swap": False,
        "labels": str(labels),
        "fields": FIELDS,
        "label_map": "0=tie,1=1,2=2",
        "label_vote": VOTE,
        **options,
    }
    return _execute(tmp_path, params, {"evaluator": ScriptedChat(judge)})


def test_empty_outputs_are_judged_and_the_annotator_tie_is_left_out_and_counted(tmp_path):
    run_, summary = run(tmp_path)
    got = {r["item_id"]: (r["label"], r["verdicts"][0]["value"]) for r in _records(run_)}
    # river and colour: an empty output is an item; the other output wins
    assert got == {
        "river": ("1", "1"),
        "colour": ("2", "2"),
        "planet": ("tie", None),
        "fruit": ("2", "1"),
        "bird": ("1", None),
    }
    read = summary["metrics"]["labels_read"]
    assert (read["read"], read["kept"], read["skipped_by_reason"]) == (6, 5, {"annotators tied": 1})
    assert read["skipped_by"] == ["--label-vote"]
    m = summary["metrics"]["raters"]["m0"]["measures"]
    # graded: river right, colour right, fruit wrong; planet and bird ungraded
    assert (m["accuracy_original"]["value"], m["accuracy_original"]["n"], m["accuracy_original"]["ungraded"]) == (
        2 / 3,
        3,
        2,
    )
    # labels 1, 2, 2 vs verdicts 1, 2, 1: p_o = 2/3, p_e = 1/3 * 2/3 + 2/3 * 1/3 = 4/9 -> kappa 0.4
    assert m["kappa_original"]["value"] == pytest.approx(0.4)
    report = (run_.run_dir / "report.md").read_text()
    assert "1 skipped with --label-vote (annotators tied: 1)" in report


def test_invalid_verdict_tie_counts_an_unusable_verdict_as_a_tie(tmp_path):
    _, summary = run(tmp_path, invalid_verdict="tie")
    m = summary["metrics"]["raters"]["m0"]["measures"]
    # planet (label tie) now right, bird (label 1) wrong: 3 of 5
    assert (m["accuracy_original"]["value"], m["accuracy_original"]["n"], m["accuracy_original"]["ungraded"]) == (
        3 / 5,
        5,
        0,
    )
    # labels 1, 2, tie, 2, 1 vs verdicts 1, 2, tie, 1, tie: p_o = 3/5, p_e = (2*2 + 2*1 + 1*2) / 25 = 8/25 -> 7/17
    assert m["kappa_original"]["value"] == pytest.approx(7 / 17)
    assert summary["metrics"]["invalid_verdict"] == "tie"
    assert summary["metrics"]["raters"]["m0"]["decided_by"]["ungraded"] == 2  # still said how they came about


def test_skip_empty_leaves_out_empty_outputs_counted_per_column(tmp_path):
    _, summary = run(tmp_path, skip_empty=True)
    read = summary["metrics"]["labels_read"]
    assert read["skipped_by_reason"] == {"response2 empty": 2, "response1 empty": 1, "annotators tied": 1}
    assert (read["kept"], read["skipped_by"]) == (2, ["--label-vote", "--skip-empty"])
    m = summary["metrics"]["raters"]["m0"]["measures"]["accuracy_original"]
    assert (m["value"], m["n"], m["ungraded"]) == (0.0, 1, 1)  # fruit wrong; planet ungraded
    _, tie = run(tmp_path / "tie", skip_empty=True, invalid_verdict="tie")
    m = tie["metrics"]["raters"]["m0"]["measures"]["accuracy_original"]
    assert (m["value"], m["n"], m["ungraded"]) == (1 / 2, 2, 0)  # planet a tie (right), fruit wrong


def test_one_annotator_column_reads_the_tied_item_with_that_annotators_label(tmp_path):
    labels = tmp_path / "pairs.json"
    labels.write_text(json.dumps(records()), encoding="utf-8")
    got = load_labelled(labels, "pairwise", FIELDS + ",label=annotator2", label_map="0=tie,1=1,2=2")
    assert [(i.id, i.label) for i in got.items][2] == ("metal", "2") and not got.skipped


@pytest.mark.parametrize(
    "vote, expected",
    [
        ("annotator1", "--label-vote"),
        ("annotator1,annotator1", "--label-vote"),
        ("annotator1,annotator2,annotator9", "annotator9"),
    ],
)
def test_bad_label_vote_names_the_flag_or_the_column(tmp_path, vote, expected):
    labels = tmp_path / "pairs.json"
    labels.write_text(json.dumps(records()), encoding="utf-8")
    with pytest.raises(InputError) as refused:
        run_params = {"judge": "pairwise", "labels": str(labels), "fields": FIELDS, "label_vote": vote}
        _execute(tmp_path, run_params | {"label_map": "0=tie,1=1,2=2"}, {"evaluator": ScriptedChat(judge)})
    assert expected in str(refused.value)


def test_invalid_verdict_tie_is_refused_for_a_judge_without_a_tie(tmp_path):
    with pytest.raises(InputError) as refused:
        _execute(tmp_path, {"judge": "interview.grader", "invalid_verdict": "tie"}, {})
    assert "--invalid-verdict" in str(refused.value)


def conversation(question: str, answers: tuple[str, str]) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": answers[0]},
        {"role": "user", "content": "Now in one word."},
        {"role": "assistant", "content": answers[1]},
    ]


def test_a_multi_turn_pair_is_judged_on_its_last_turn_in_both_orders(tmp_path):
    pair = {
        "id": "mt1",
        "conversation_a": conversation("Which planet is largest?", ("Jupiter, by far.", "Jupiter")),
        "conversation_b": conversation("Which planet is largest?", ("Saturn.", "")),
        "winner": "model_a",
    }
    labels = tmp_path / "mt.jsonl"
    labels.write_text(json.dumps(pair) + "\n", encoding="utf-8")
    seen = []

    def multi(messages, tool):
        if tool is None:
            return "pong"
        text = all_text(messages)
        seen.append(text)
        first = text.split("[Conversation with Assistant A]")[1].split("[Conversation with Assistant B]")[0]
        return {"winner": "A" if "Jupiter" in first else "B", "reason": "."}

    fields = "conversation_1=conversation_a,conversation_2=conversation_b,label=winner"
    run_, summary = _execute(
        tmp_path, {"judge": "pairwise", "labels": str(labels), "fields": fields}, {"evaluator": ScriptedChat(multi)}
    )
    record = _records(run_)[0]
    assert [(v["order"], v["value"]) for v in record["verdicts"]] == [("original", "1"), ("swapped", "1")]
    assert "### User:\nNow in one word.\n\n### Assistant A:\nJupiter" in seen[0]  # the whole conversation, A first
    assert "### Assistant A:\nSaturn." in seen[1]  # swapped: the second conversation shown first
    assert summary["metrics"]["raters"]["m0"]["measures"]["accuracy_mean"]["value"] == 1.0


def test_a_multi_turn_pair_whose_user_turns_differ_is_refused_naming_the_field(tmp_path):
    pair = {
        "conversation_1": conversation("Which planet is largest?", ("Jupiter.", "Jupiter")),
        "conversation_2": conversation("Which planet is smallest?", ("Mercury.", "Mercury")),
        "label": "1",
    }
    labels = tmp_path / "mt.jsonl"
    labels.write_text(json.dumps(pair) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as refused:
        load_labelled(labels, "pairwise")
    assert "field 'conversation_1'" in str(refused.value) and "user turns differ" in str(refused.value)
