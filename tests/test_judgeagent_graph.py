"""The JudgeAgent graph with fake models: adaptive difficulty per round, no answer leakage, validation,
ablations and failure handling (seed 000, Algorithms 1, 2 and 4; Tables 12-14)."""

from __future__ import annotations

import re

import pytest

from dyneval.state.judgeagent import BaseQuestion
from tests.fakes import last_text
from tests.test_judgeagent_support import FakeEvaluator, SimulatedTarget, fake_services, run_batch, write_kb

LEVEL = re.compile(r"required difficulty level is \[(\w+)\]")


@pytest.fixture
def kb(tmp_path):
    return write_kb(tmp_path / "kb")


def mc(i: int, difficulty: str | None = None, gold: str = "B") -> BaseQuestion:
    return BaseQuestion(
        id=f"q{i}",
        question=f"Which port does the Voss Canal reach, case {i}?",
        options=["Orden", "Harl", "Brenmark", "Spartina"],
        answer=gold,
        difficulty=difficulty,
    )


def test_difficulty_changes_every_round_with_the_running_score_across_both_thresholds(tmp_path, kb):
    """Hand-computed (gains 1/1.5/2, thresholds 0.5/1): base hard right -> 2/1 -> hard; then
    F:2/2=1 medium, F:2/3 medium, F:2/4=.5 easy, T:3/5 medium, T:4.5/6, T:6/7, T:7.5/8, T:9/9=1 medium,
    T:10.5/10 -> hard."""
    script = [False, False, False, True, True, True, True, True, True, False]
    ev = FakeEvaluator()

    def target(messages, tool):
        text = last_text(messages)
        m = re.search(r"Generated question number (\d+)", text)
        if m:
            i = int(m.group(1))
            return f"ans{i}" if script[i - 1] else "no idea"
        return "B"

    svc = fake_services(tmp_path, ev, target)
    out = run_batch(svc, [mc(1, "hard")], kb, rounds=10)
    prompted = [LEVEL.search(p).group(1) for p in ev.prompts["ExtendedQuestion"]]
    expected = ["hard", "medium", "medium", "easy", "medium", "medium", "medium", "medium", "medium", "hard"]
    assert prompted == expected
    assert [r["difficulty"] for r in out["rounds"]] == expected
    assert [round(t["avg"], 4) for t in out["trajectory"]] == [
        2.0,
        1.0,
        0.6667,
        0.5,
        0.6,
        0.75,
        0.8571,
        0.9375,
        1.0,
        1.05,
        0.9545,
    ]
    assert out["score"] == pytest.approx(10.5) and out["answered"] == 11


def test_feedback_prompt_never_shows_base_gold_answers_or_references(tmp_path, kb):
    ev = FakeEvaluator(verdict=False)
    batch = [
        BaseQuestion(
            id=f"f{i}",
            question=f"Who designed lighthouse number {i}?",
            answer=f"Zorvanek{i}",
            references=[f"Secret reference text {i}: the designer was Zorvanek{i}."],
            difficulty="medium",
        )
        for i in range(3)
    ]
    target = SimulatedTarget(0.0, {})  # always wrong
    svc = fake_services(tmp_path, ev, target)
    out = run_batch(svc, batch, kb, rounds=2)
    [prompt] = ev.prompts["Feedback"]
    for q in batch:
        assert q.answer.lower() not in prompt.lower()
        assert "Secret reference" not in prompt
        assert q.question in prompt  # the question itself is part of the history
    assert prompt.count("correct answer withheld") == 3
    for r in out["rounds"]:  # generated questions show their own (interviewer-written) answers
        assert f"Correct answer: {r['answer']}" in prompt
    assert out["feedback"]["leak_suspects"] == []


def test_feedback_quoting_a_free_form_gold_answer_is_flagged(tmp_path, kb):
    ev = FakeEvaluator()
    base = ev.__call__

    def leaky(messages, tool):
        if tool and tool["function"]["name"] == "Feedback":
            return {
                "flaws_knowledge": "x",
                "flaws_capability": "y",
                "comprehensive_performance": "z",
                "suggestions": "Remember that the designer was Zorvanek1.",
            }
        return base(messages, tool)

    batch = [BaseQuestion(id="f1", question="Who designed the lighthouse?", answer="Zorvanek1")]
    svc = fake_services(tmp_path, leaky, SimulatedTarget(0.0, {}))
    out = run_batch(svc, batch, kb, rounds=0)
    assert out["feedback"]["leak_suspects"] == ["f1"]


def test_validation_reanswers_with_the_batch_suggestions(tmp_path, kb):
    ev = FakeEvaluator()

    def target(messages, tool):
        text = last_text(messages)
        if "[suggestions]: Read the question twice." in text:
            return '{"answer": "B"}' if "case 1" in text else '{"answer": "C"}'
        return "A" if "case 1" in text else "B"  # before: q1 wrong, q2 right

    svc = fake_services(tmp_path, ev, target)
    out = run_batch(svc, [mc(1, "easy"), mc(2, "hard")], kb, rounds=1)
    assert [b["correct"] for b in out["base"]] == [False, True]
    assert [(v["correct1"], v["correct2"]) for v in out["validation"]] == [(False, True), (True, False)]


def test_multiple_choice_is_graded_in_code_and_free_form_by_the_evaluator(tmp_path, kb):
    ev = FakeEvaluator(verdict=True)
    batch = [mc(1), BaseQuestion(id="f", question="Name the canal engineer.", answer="Mira Stolt")]
    svc = fake_services(tmp_path, ev, lambda m, t: "B" if "case 1" in last_text(m) else "The engineer Stolt")
    out = run_batch(svc, batch, kb, rounds=0)
    assert [(b["how"], b["correct"]) for b in out["base"]] == [("code", True), ("evaluator", True)]
    # only the free-form answer reached the judge (once in grading, once in validation)
    assert len(ev.prompts["Verdict"]) == 2 and all("Name the canal engineer" in p for p in ev.prompts["Verdict"])
    assert out["score"] == pytest.approx(3.0)  # unlabeled questions gain c2 = 1.5 each


def test_no_extension_ablation_skips_the_interview(tmp_path, kb):
    ev = FakeEvaluator()
    svc = fake_services(tmp_path, ev, lambda m, t: "B")
    out = run_batch(svc, [mc(1), mc(2)], kb, rounds=3, no_extension=True)
    assert out.get("rounds", []) == [] and "ExtendedQuestion" not in ev.prompts
    assert out["feedback"]["status"] == "ok" and len(out["validation"]) == 2


def test_no_context_graph_ablation_uses_random_chunks_without_question_entities(tmp_path, kb):
    ev = FakeEvaluator()
    svc = fake_services(tmp_path, ev, lambda m, t: "B")
    out = run_batch(svc, [mc(1)], kb, rounds=2, no_context_graph=True)
    assert all(r["path"]["mode"] == "random" for r in out["rounds"])
    assert not any("case 1" in p for p in ev.prompts.get("EntityLabels", []))  # questions never labelled


def test_graph_paths_start_from_the_question_entities(tmp_path, kb):
    ev = FakeEvaluator()
    svc = fake_services(tmp_path, ev, lambda m, t: "B")
    out = run_batch(svc, [mc(1)], kb, rounds=2, hops=2)
    assert {s["entity"] for s in out["question_entities"]} >= {"Voss Canal"}
    for r in out["rounds"]:
        assert r["path"]["mode"] == "graph" and len(r["path"]["chunks"]) == 2
        assert r["path"]["entities"][0] in {"voss canal", "harl", "orden", "brenmark", "spartina", "lake orden"}


def test_no_difficulty_adaptation_keeps_the_fixed_difficulty(tmp_path, kb):
    ev = FakeEvaluator()
    svc = fake_services(tmp_path, ev, SimulatedTarget(1.0, {"case": "B"}))
    run_batch(svc, [mc(1, "hard")], kb, rounds=3, no_difficulty_adaptation=True, fixed_difficulty="easy")
    assert [LEVEL.search(p).group(1) for p in ev.prompts["ExtendedQuestion"]] == ["easy"] * 3


def test_failed_generation_is_recorded_and_does_not_move_the_score(tmp_path, kb):
    ev = FakeEvaluator()
    base = ev.__call__

    def broken(messages, tool):
        if tool and tool["function"]["name"] == "ExtendedQuestion":
            return {"question": ""}  # invalid twice (the repair attempt too)
        return base(messages, tool)

    target = SimulatedTarget(1.0, {"case": "B"})
    svc = fake_services(tmp_path, broken, target)
    out = run_batch(svc, [mc(1, "medium")], kb, rounds=2)
    assert [r["status"] for r in out["rounds"]] == ["generation_failed"] * 2
    assert out["answered"] == 1 and out["score"] == pytest.approx(1.5)
    assert len(target.prompts) == 2  # base answer + validation, never an extension question


def test_failed_feedback_skips_validation(tmp_path, kb):
    ev = FakeEvaluator()
    base = ev.__call__

    def broken(messages, tool):
        if tool and tool["function"]["name"] == "Feedback":
            return {"suggestions": 3}
        return base(messages, tool)

    svc = fake_services(tmp_path, broken, lambda m, t: "B")
    out = run_batch(svc, [mc(1)], kb, rounds=1)
    assert out["feedback"]["status"] == "failed" and not out.get("validation")


def test_a_question_copied_from_the_prompt_examples_is_rejected(tmp_path, kb):
    ev = FakeEvaluator()
    base = ev.__call__

    def echo(messages, tool):
        if tool and tool["function"]["name"] == "ExtendedQuestion":
            return {"question": "The Voss Canal links Lake Orden with which port?", "answer": "Harl"}
        return base(messages, tool)

    svc = fake_services(tmp_path, echo, lambda m, t: "B")
    out = run_batch(svc, [mc(1)], kb, rounds=1)
    assert out["rounds"][0]["status"] == "generation_failed"
    assert out["rounds"][0]["reason"] == "question copied from the prompt"
