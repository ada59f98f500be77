"""JudgeAgent verdicts (issue 11): no substring rule marks an answer correct, free-form answers are judged
against the full reference, a judge failure is ungraded (never wrong) and adaptive difficulty ignores it,
unvalidated batches are visible and resumable."""

from __future__ import annotations

import pytest

from dyneval.nodes.judgeagent.judging import answer_format, grade_reply, is_phrase, judge_free
from dyneval.protocols.judgeagent import JudgeAgentProtocol
from dyneval.protocols.judgeagent.metrics import accuracy, dynamic_table, unvalidated, validation_metrics
from dyneval.state.judgeagent import BaseQuestion
from tests.fakes import ScriptedChat, last_text
from tests.test_judgeagent_support import FakeEvaluator, fake_services, run_batch, write_kb

QUESTION = "The Voss Canal links Lake Orden with which port?"


@pytest.fixture
def kb(tmp_path):
    return write_kb(tmp_path / "kb")


def _verdicts_then(base, bad: bool = True):
    """An evaluator whose Verdict replies are malformed (the repair too); other steps as ``base``."""

    def evaluator(messages, tool):
        if bad and tool and tool["function"]["name"] == "Verdict":
            return {"verdict": "maybe"}
        return base(messages, tool)

    return evaluator


def test_a_reply_that_names_the_reference_only_to_reject_it_goes_to_the_judge(tmp_path):
    ev = FakeEvaluator(verdict=False)
    svc = fake_services(tmp_path, ev, lambda m, t: "x")
    out = judge_free(svc, QUESTION, "Harl", "It is not Harl; it is Orden", step="judge")
    assert (out["verdict"], out["how"]) == ("wrong", "evaluator")
    [prompt] = ev.prompts["Verdict"]
    assert "It is not Harl; it is Orden" in prompt and "Reference answer: Harl" in prompt


def test_only_the_exact_normalised_reference_is_accepted_without_the_judge(tmp_path):
    ev = FakeEvaluator(verdict=False)
    svc = fake_services(tmp_path, ev, lambda m, t: "x")
    assert judge_free(svc, QUESTION, "Harl", "  the harl. ", step="j")["how"] == "exact"
    assert "Verdict" not in ev.prompts
    assert judge_free(svc, QUESTION, "Harl", "Harl, I think", step="j")["how"] == "evaluator"
    assert judge_free(svc, QUESTION, "Harl", "", step="j") == {"verdict": "wrong", "correct": False, "how": "empty"}


def test_option_letters_are_compared_in_code_and_option_text_goes_to_the_judge(tmp_path):
    ev = FakeEvaluator(verdict=False)
    svc = fake_services(tmp_path, ev, lambda m, t: "x")
    options = ["Orden", "Harl", "Brenmark"]
    assert grade_reply(svc, QUESTION, "B", "B. Harl", options, step="j")["how"] == "code"
    assert "Verdict" not in ev.prompts
    out = grade_reply(svc, QUESTION, "B", "Surely not Harl", options, step="j")
    assert (out["verdict"], out["how"], out["choice"]) == ("wrong", "evaluator", None)
    assert "Reference answer: B. Harl" in ev.prompts["Verdict"][0]


def test_a_judge_failure_is_ungraded_never_wrong(tmp_path):
    svc = fake_services(tmp_path, _verdicts_then(FakeEvaluator()), lambda m, t: "x")
    out = judge_free(svc, QUESTION, "Harl", "Orden", step="judge")
    assert (out["verdict"], out["correct"], out["how"]) == ("ungraded", None, "ungraded")
    assert "Verdict" in out["error"]


def test_answer_format_is_chosen_from_the_references():
    short = [
        BaseQuestion(id="1", question="q", answer="Harl"),
        BaseQuestion(id="2", question="q", answer="B", options=["x", "y"]),
    ]
    long = [*short, BaseQuestion(id="3", question="q", answer="Aspirin lowers fever. It also thins the blood.")]
    assert answer_format("auto", short) == "phrase" and answer_format("auto", long) == "free"
    assert answer_format("phrase", long) == "phrase" and answer_format("free", short) == "free"
    assert is_phrase("Mira Stolt") and not is_phrase("The canal was finished in 1871 by Mira Stolt herself")
    assert not is_phrase("Yes. It rises.")


def test_multi_sentence_references_run_in_free_form_mode_and_the_judge_sees_the_full_reference(tmp_path, kb):
    reference = (
        "The marsh surface rises because Spartina grasses trap silt at high tide. Over years the trapped "
        "silt builds up, so the marsh keeps pace with the sea."
    )
    q = BaseQuestion(id="m1", question="Why does the surface of a salt marsh slowly rise?", answer=reference)
    ev = FakeEvaluator(verdict=True)
    target_prompts = []

    def target(messages, tool):
        target_prompts.append(messages)
        return "Grasses catch silt, so the marsh builds up over time."

    out = run_batch(fake_services(tmp_path, ev, target), [q], kb, rounds=0)
    assert out["answer_format"] == "free" and out["base"][0]["verdict"] == "correct"
    base_system = str(target_prompts[0][0].content)
    assert "a word or a phrase" not in base_system and "few sentences" in base_system
    judged = [p for p in ev.prompts["Verdict"] if "salt marsh" in p]
    assert judged and all(reference in p and "Reference answer (complete)" in p for p in judged)


def test_ungraded_base_answers_leave_the_score_and_the_difficulty_alone(tmp_path, kb):
    """One option letter right (code, hard: gain 2), one free-form answer the judge cannot grade: the average is
    2/1 over the graded answer only -> hard. Every extension judgement fails too: rounds stay at hard."""
    mc = BaseQuestion(id="c", question="Which port, case 1?", options=["Orden", "Harl"], answer="B", difficulty="hard")
    free = BaseQuestion(id="f", question="Name the canal engineer.", answer="Mira Stolt")
    svc = fake_services(
        tmp_path, _verdicts_then(FakeEvaluator()), lambda m, t: "B" if "case 1" in last_text(m) else "Stolt, perhaps"
    )
    out = run_batch(svc, [mc, free], kb, rounds=2, no_validation=True)
    assert [b["verdict"] for b in out["base"]] == ["correct", "ungraded"]
    assert out["answered"] == 1 and out["score"] == pytest.approx(2.0)
    assert out["trajectory"][0] == {"after": "base", "avg": 2.0, "next": "hard", "ungraded": 1}
    assert [r["verdict"] for r in out["rounds"]] == ["ungraded", "ungraded"]
    assert [r["difficulty"] for r in out["rounds"]] == ["hard", "hard"] and out["difficulty"] == "hard"
    assert JudgeAgentProtocol().ungraded(out) == 3


def test_a_wholly_ungraded_base_round_starts_the_extension_at_medium_not_easy(tmp_path, kb):
    free = BaseQuestion(id="f", question="Name the canal engineer.", answer="Mira Stolt")
    svc = fake_services(tmp_path, _verdicts_then(FakeEvaluator()), lambda m, t: "Stolt, perhaps")
    out = run_batch(svc, [free], kb, rounds=1, no_validation=True)
    assert out["answered"] == 0 and out["trajectory"][0]["avg"] is None
    assert out["rounds"][0]["difficulty"] == "medium"


def test_failed_feedback_leaves_the_batch_unvalidated_visible_and_resumable(tmp_path, kb):
    base = FakeEvaluator()

    def evaluator(messages, tool):
        if tool and tool["function"]["name"] == "Feedback":
            return {"suggestions": 3}
        return base(messages, tool)

    q = BaseQuestion(id="c", question="Which port, case 1?", options=["Orden", "Harl"], answer="B")
    out = run_batch(fake_services(tmp_path, evaluator, lambda m, t: "B"), [q], kb, rounds=0)
    assert out["feedback"]["status"] == "failed" and not out.get("validation")
    assert JudgeAgentProtocol().ungraded(out) == 1
    why = unvalidated([{"unit_id": "batch-1", **out}])
    assert list(why) == ["batch-1"] and why["batch-1"].startswith("feedback failed")


def test_validation_rates_leave_ungraded_rows_out_and_count_them():
    rows = [
        {"correct1": True, "correct2": True},
        {"correct1": False, "correct2": True},
        {"correct1": True, "correct2": None},
        {"correct1": None, "correct2": False},
    ]
    m = validation_metrics(rows)
    assert (m["n"], m["ungraded"], m["acc1"], m["acc2"], m["cr"], m["cte"]) == (2, 2, 0.5, 1.0, 0.5, 0.0)


def test_base_accuracy_and_running_scores_show_denominators_and_ungraded_counts():
    records = [
        {
            "base": [
                {"gain": 1.0, "correct": True, "verdict": "correct"},
                {"gain": 0.0, "correct": None, "verdict": "ungraded"},
            ],
            "rounds": [
                {"round": 1, "status": "ok", "gain": 0.0, "correct": None, "verdict": "ungraded"},
                {"round": 2, "status": "ok", "gain": 1.5, "correct": True, "verdict": "correct"},
            ],
        }
    ]
    assert accuracy(records) == {"value": 1.0, "n": 1, "ungraded": 1}
    table = dynamic_table(records, 2)
    assert table["base"] == {"value": 1.0, "n": 1, "ungraded": 1}
    assert table["@1"] == {"value": 1.0, "n": 1, "ungraded": 2}
    assert table["@2"] == {"value": pytest.approx(1.25), "n": 2, "ungraded": 2}
    nothing = [{"base": [{"gain": 0.0, "correct": None, "verdict": "ungraded"}], "rounds": []}]
    assert accuracy(nothing) == {"value": None, "n": 0, "ungraded": 1}


def test_the_run_says_which_answer_format_it_chose_in_the_console_summary_and_report(tmp_path, kb):
    import json

    from rich.console import Console

    from dyneval.runtime.runner import execute, open_run
    from dyneval.state.config import RunConfig

    data = tmp_path / "long.jsonl"
    data.write_text(
        json.dumps(
            {
                "id": "m1",
                "question": "Why does a salt marsh rise?",
                "answer": "Grasses trap silt at high tide. The silt builds up over the years.",
            }
        )
        + "\n"
    )
    config = RunConfig(
        protocol="judgeagent", out=str(tmp_path / "runs"), params={"data": str(data), "kb": str(kb), "rounds": 0}
    )
    console = Console(record=True, width=200)
    chats = {"evaluator": ScriptedChat(FakeEvaluator(True)), "target": ScriptedChat(lambda m, t: "Silt.")}
    run = open_run(
        JudgeAgentProtocol(), config, run_id=None, console=console, chat_overrides=chats, retry_sleep=lambda s: None
    )
    summary = execute(JudgeAgentProtocol(), run, skip_preflight=True)
    assert "answer format: free (auto: chosen from the reference answers)" in console.export_text()
    assert summary["metrics"]["answer_format"] == "free"
    assert (
        "free-form answers (judged by the evaluator against the full reference)"
        in (run.run_dir / "report.md").read_text()
    )


def test_an_unknown_answer_format_is_an_input_error(tmp_path, kb):
    from rich.console import Console

    from dyneval.runtime.runner import open_run
    from dyneval.state.config import RunConfig
    from dyneval.state.errors import InputError

    config = RunConfig(protocol="judgeagent", out=str(tmp_path / "runs"), params={"answer_format": "essay"})
    run = open_run(JudgeAgentProtocol(), config, run_id=None, console=Console(quiet=True))
    with pytest.raises(InputError, match="answer-format"):
        JudgeAgentProtocol().plan(run)
