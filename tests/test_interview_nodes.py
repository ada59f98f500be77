"""Each interview node on its own, with fake chat models (seed 004, section 3.1, Appendix D)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.runtime import Runtime

from dyneval.nodes.interview import checks
from dyneval.nodes.interview.grader import grade, single_turn_judge
from dyneval.nodes.interview.interviewee import answer
from dyneval.nodes.interview.interviewer import ask_followup, give_feedback, modify_question, summarize_session
from dyneval.state.interview import InterviewContext
from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text, last_text
from tests.test_interview_world import field, grader, interviewer, math_seed

SEED = {
    "id": "bakery",
    "task": "math",
    "question": "A bakery makes 48 rolls and 36 buns. It packs them in bags of 6. How many bags does it fill?",
    "solution": "48 + 36 = 84; 84 / 6 = 14",
    "answer": "14",
}
FACT_SEED = {
    "id": "seasons",
    "task": "factual",
    "question": "Why does the Earth have seasons?",
    "solution": "The axis of the Earth is tilted. The tilted hemisphere gets steeper sunlight in summer.",
    "answer": "",
}


def rt(tmp_path, chats: dict[str, Any], **fields) -> Runtime:
    svc = make_services(tmp_path, protocol="interview", chats=chats)
    return Runtime(context=InterviewContext(services=svc, **fields))


def wrong_state(seed=SEED, attempt=1, feedbacks=(), grade_reason="wrong sum", kind="seed", **extra):
    cur = {
        "q": 0 if kind == "seed" else 1,
        "kind": kind,
        "type": "seed" if kind == "seed" else "rationale",
        "text": seed["question"],
        "expected": "because the sum" if kind != "seed" else "",
        "attempt": attempt,
    }
    return {
        "unit_id": "u1",
        "seed": seed,
        "current": cur,
        "last_answer": "Final answer: 13",
        "last_grade": {"correct": False, "error_type": "Calculation", "reason": grade_reason, "score": 0.0},
        "modification": {"explanation": "x stands for 48"},
        "feedbacks": list(feedbacks),
        "transcript": [],
        "interactions": [],
        **extra,
    }


# -- question modification -----------------------------------------------------------------------


def test_math_modification_hides_a_value_and_keeps_the_original(tmp_path):
    runtime = rt(tmp_path, {"evaluator": ScriptedChat(interviewer)})
    out = modify_question({"unit_id": "u", "seed": SEED}, runtime)
    assert out["modification"]["status"] == "modified"
    assert out["modification"]["original"] == SEED["question"]
    assert "x" in out["current"]["text"] and "48" not in out["current"]["text"]
    assert out["modification"]["explanation"] == "x stands for 48"
    assert out["transcript"][-1] == {
        "speaker": "interviewer",
        "kind": "question",
        "q": 0,
        "attempt": 1,
        "text": out["current"]["text"],
    }


def test_unchanged_or_failed_modification_falls_back_to_the_original_question(tmp_path):
    same = ScriptedChat(lambda m, t: {"question": SEED["question"], "explanation": "nothing"})
    out = modify_question({"seed": SEED}, rt(tmp_path, {"evaluator": same}))
    assert out["modification"]["status"] == "rejected" and out["current"]["text"] == SEED["question"]
    broken = ScriptedChat(lambda m, t: {"nope": 1})
    out = modify_question({"seed": SEED}, rt(tmp_path, {"evaluator": broken}))
    assert out["modification"]["status"] == "failed" and out["current"]["text"] == SEED["question"]


def test_modification_strategy_by_task_and_switch(tmp_path):
    seen = []
    chat = ScriptedChat(
        lambda m, t: (
            seen.append(all_text(m)) or {"question": "A new question on tilt?", "explanation": "about the tilt"}
        )
    )
    out = modify_question({"seed": FACT_SEED}, rt(tmp_path, {"evaluator": chat}))
    assert out["modification"]["strategy"] == "factual" and "Reference solution" in seen[-1]
    out = modify_question({"seed": {**SEED, "task": "generic"}}, rt(tmp_path, {"evaluator": chat}))
    assert out["modification"]["strategy"] == "paraphrase"
    calls = len(seen)
    out = modify_question({"seed": SEED}, rt(tmp_path, {"evaluator": chat}, modify=False))
    assert out["modification"]["strategy"] == "none" and out["current"]["text"] == SEED["question"]
    assert len(seen) == calls  # duty off: no interviewer call


# -- feedback -----------------------------------------------------------------------------------


def test_feedback_that_states_the_answer_is_regenerated(tmp_path):
    drafts = iter(["Almost: the right number of bags is 14.", "Check how many rolls there are in total first."])
    chat = ScriptedChat(lambda m, t: {"feedback": next(drafts), "kind": "error_identification"})
    out = give_feedback(wrong_state(), rt(tmp_path, {"evaluator": chat}))
    rec = out["feedbacks"][0]
    assert rec["leaked"] and rec["regenerated"] and not rec["redacted"]
    assert rec["text"] == "Check how many rolls there are in total first."
    assert "14" not in out["transcript"][0]["text"]
    assert "gave away the answer" in last_text(chat.calls[-1][0])


def test_feedback_that_keeps_leaking_is_redacted_and_never_contains_the_answer(tmp_path):
    chat = ScriptedChat(lambda m, t: {"feedback": "You need 14 bags, i.e. 14.", "kind": "encouragement"})
    out = give_feedback(wrong_state(), rt(tmp_path, {"evaluator": chat}))
    rec = out["feedbacks"][0]
    assert rec["redacted"] and not checks.leaks_answer(rec["text"], "14")
    assert rec["text"] == f"You need {checks.REDACTED} bags, i.e. {checks.REDACTED}."
    assert rec["first_draft"].startswith("You need 14")


def test_fallback_feedback_is_also_checked_for_the_answer(tmp_path):
    broken = ScriptedChat(lambda m, t: {"bad": True})
    out = give_feedback(
        wrong_state(grade_reason="the answer should be 14, not 13"), rt(tmp_path, {"evaluator": broken})
    )
    rec = out["feedbacks"][0]
    assert rec["source"] == "fallback" and rec["redacted"]
    assert not checks.leaks_answer(rec["text"], "14") and "13" in rec["text"]


def test_feedback_gets_more_specific_and_sees_earlier_feedback(tmp_path):
    prompts = []
    chat = ScriptedChat(
        lambda m, t: prompts.append(all_text(m)) or {"feedback": f"hint {len(prompts)}", "kind": "process_guidance"}
    )
    first = give_feedback(wrong_state(attempt=1), rt(tmp_path, {"evaluator": chat}))
    second = give_feedback(wrong_state(attempt=2, feedbacks=first["feedbacks"]), rt(tmp_path, {"evaluator": chat}))
    assert field(prompts[0], "Hint level for this feedback") == "1"
    assert field(prompts[1], "Hint level for this feedback") == "2"
    assert "- hint 1" in prompts[1].split("Earlier feedback:")[1]
    assert second["current"]["attempt"] == 3 and second["feedbacks"][0]["level"] == 2


def test_factual_feedback_never_copies_the_reference_solution(tmp_path):
    leak = "Hint: The tilted hemisphere gets steeper sunlight in summer."
    chat = ScriptedChat(lambda m, t: {"feedback": leak, "kind": "conceptual_guidance"})
    st = wrong_state(seed=FACT_SEED)
    st["last_grade"].update(facts=[{"fact": "the sun is closer", "supported": False}], status="incorrect")
    rec = give_feedback(st, rt(tmp_path, {"evaluator": chat}))["feedbacks"][0]
    assert rec["redacted"] and not checks.leaks_answer(rec["text"], FACT_SEED["solution"])
    assert "Status of the answer: incorrect" in all_text(chat.calls[0][0])


def test_feedback_duty_off_sends_a_plain_retry_without_a_model_call(tmp_path):
    chat = ScriptedChat(lambda m, t: {"feedback": "x", "kind": "x"})
    out = give_feedback(wrong_state(), rt(tmp_path, {"evaluator": chat}, feedback=False))
    assert chat.calls == [] and out["feedbacks"][0]["source"] == "plain"
    assert out["transcript"][0]["kind"] == "retry" and "not correct" in out["transcript"][0]["text"]


# -- interviewee --------------------------------------------------------------------------------


def test_interviewee_sees_the_session_as_a_chat_with_feedback_wrapped(tmp_path):
    seen = []
    target = ScriptedChat(lambda m, t: seen.append(m) or "Final answer: 14")
    st = wrong_state(attempt=2)
    st["transcript"] = [
        {"speaker": "system", "kind": "note", "text": "question modification ..."},
        {"speaker": "interviewer", "kind": "question", "q": 0, "attempt": 1, "text": "Q?"},
        {"speaker": "interviewee", "kind": "answer", "q": 0, "attempt": 1, "text": "13"},
        {"speaker": "grader", "kind": "grade", "q": 0, "attempt": 1, "text": "not correct"},
        {"speaker": "interviewer", "kind": "feedback", "q": 0, "attempt": 2, "text": "Recount the rolls."},
    ]
    out = answer(st, rt(tmp_path, {"target": target}))
    msgs = seen[0]
    assert [m.type for m in msgs] == ["system", "human", "ai", "human"]
    assert "Feedback on your answer: Recount the rolls." in msgs[-1].content
    assert "modification" not in all_text(msgs) and "not correct" not in all_text(msgs)
    assert out["transcript"][0]["speaker"] == "interviewee" and out["last_answer"] == "Final answer: 14"


# -- grading ------------------------------------------------------------------------------------


def _grade_state(seed, response, q=0, kind="seed", attempt=1, **extra):
    cur = {
        "q": q,
        "kind": kind,
        "type": "seed" if kind == "seed" else "rationale",
        "text": seed["question"],
        "expected": "because",
        "attempt": attempt,
    }
    return {
        "seed": seed,
        "current": cur,
        "last_answer": response,
        "modification": {"explanation": ""},
        "interactions": [],
        "feedbacks": [],
        **extra,
    }


def test_math_grade_needs_the_right_final_number_and_the_graders_approval(tmp_path):
    yes = ScriptedChat(lambda m, t: {"correct": True, "error_type": "N/A", "reason": "fine"})
    out = grade(_grade_state(SEED, "84/6\nFinal answer: 14"), rt(tmp_path, {"grader": yes}))
    assert out["last_grade"]["correct"] and out["last_grade"]["graded_by"] == "code+grader"
    assert out["seed_solved"] is True
    # the grader says correct, but the final number is wrong: code overrules
    out = grade(_grade_state(SEED, "Final answer: 15"), rt(tmp_path, {"grader": yes}))
    assert not out["last_grade"]["correct"] and "seed_solved" not in out  # retries are left
    # right number, flawed process (paper: process errors count)
    no = ScriptedChat(lambda m, t: {"correct": False, "error_type": "concept error", "reason": "bad steps"})
    out = grade(_grade_state(SEED, "Final answer: 14"), rt(tmp_path, {"grader": no}))
    assert not out["last_grade"]["correct"] and out["last_grade"]["error_type"] == "Concept"


def test_a_failed_grader_leaves_a_math_answer_ungraded_even_when_the_number_matches(tmp_path):
    broken = ScriptedChat(lambda m, t: {"garbage": 1})
    for response in ("Final answer: 14", "Final answer: 15", "Final answer: 2x"):
        out = grade(_grade_state(SEED, response), rt(tmp_path, {"grader": broken}))
        g = out["last_grade"]
        assert (g["verdict"], g["correct"], g["score"], g["graded_by"]) == ("ungraded", None, None, "ungraded")
        assert "seed_solved" not in out and "ungraded" in out["stopped"]
        assert out["transcript"][-1]["speaker"] == "system" and "stopped" in out["transcript"][-1]["text"]
    assert len(broken.calls) == 6  # each answer: the grader and its one repair


def test_a_failed_grader_on_the_last_try_does_not_settle_the_seed_as_failed(tmp_path):
    broken = ScriptedChat(lambda m, t: "no tool call")
    out = grade(_grade_state(SEED, "Final answer: 3", attempt=3), rt(tmp_path, {"grader": broken}, max_retries=2))
    assert out["last_grade"]["verdict"] == "ungraded" and "seed_solved" not in out


def test_an_empty_answer_is_wrong_without_asking_the_grader(tmp_path):
    chat = ScriptedChat(lambda m, t: {"correct": True, "error_type": "N/A", "reason": "?"})
    out = grade(_grade_state(SEED, "   "), rt(tmp_path, {"grader": chat}))
    assert out["last_grade"]["verdict"] == "wrong" and out["last_grade"]["graded_by"] == "code"
    assert chat.calls == []


def test_last_allowed_attempt_settles_the_seed_outcome_with_its_error_type(tmp_path):
    no = ScriptedChat(lambda m, t: {"correct": False, "error_type": "Misinterpret", "reason": "misread"})
    out = grade(_grade_state(SEED, "Final answer: 3", attempt=3), rt(tmp_path, {"grader": no}, max_retries=2))
    assert out["seed_solved"] is False and out["seed_error_type"] == "Misinterpret"


def test_factual_grade_scores_precision_and_updates_facts_on_retry(tmp_path):
    seen = []

    def facts(m, t):
        seen.append(all_text(m))
        if "Previous facts with labels" in all_text(m):
            return {
                "facts": [
                    {"fact": "axis is tilted", "supported": True},
                    {"fact": "tilted half gets steeper light", "supported": True},
                ],
                "complete": True,
            }
        return {
            "facts": [
                {"fact": "axis is tilted", "supported": True},
                {"fact": "the Sun is closer in summer", "supported": False},
            ],
            "complete": True,
        }

    chat = ScriptedChat(facts)
    first = grade(
        _grade_state(FACT_SEED, "The axis is tilted. The Sun is closer in summer."), rt(tmp_path, {"grader": chat})
    )
    g = first["last_grade"]
    assert g["score"] == 0.5 and g["status"] == "partially_correct" and not g["correct"]
    st = _grade_state(
        FACT_SEED,
        "Correction: the tilted half gets steeper light.",
        attempt=2,
        interactions=first["interactions"],
        feedbacks=[{"q": 0, "text": "Rethink the distance claim."}],
    )
    second = grade(st, rt(tmp_path, {"grader": chat}))["last_grade"]
    assert second["correct"] and second["score"] == 1.0 and second["status"] == "complete"
    assert "[unsupported] the Sun is closer in summer" in seen[-1]
    assert "Rethink the distance claim." in seen[-1]


def test_factual_answer_is_ungraded_when_the_grader_fails_no_lexical_fallback(tmp_path):
    broken = ScriptedChat(lambda m, t: "no tool call")
    g = grade(
        _grade_state(FACT_SEED, "The axis of the Earth is tilted. Cheese is made of milk."),
        rt(tmp_path, {"grader": broken}),
    )["last_grade"]
    assert (g["verdict"], g["score"], g["graded_by"]) == ("ungraded", None, "ungraded") and "facts" not in g


def test_followup_answer_is_ungraded_not_wrong_when_the_grader_fails(tmp_path):
    broken = ScriptedChat(lambda m, t: {"nope": True})
    out = grade(_grade_state(SEED, "Because we add first.", q=1, kind="followup"), rt(tmp_path, {"grader": broken}))
    assert out["last_grade"]["verdict"] == "ungraded" and out["last_grade"]["correct"] is None


def test_followup_answers_are_graded_against_the_expected_answer(tmp_path):
    chat = ScriptedChat(grader)
    ok = grade(_grade_state(SEED, "Because we add first.", q=1, kind="followup"), rt(tmp_path, {"grader": chat}))
    assert ok["last_grade"]["correct"] and ok["interactions"][0]["kind"] == "followup"
    assert "seed_solved" not in ok
    assert "Expected answer: because" in all_text(chat.calls[-1][0])


# -- follow-ups ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, solved, ftype, marker",
    [
        ("math", True, "rationale", "truly understands"),
        ("math", False, "clarification", "error type is Calculation"),
        ("factual", True, "additional_facts", "Unsupported or missing points"),
        ("instruction", False, "correction", "of type correction"),
    ],
)
def test_followup_type_and_prompt_follow_the_outcome(tmp_path, task, solved, ftype, marker):
    chat = ScriptedChat(lambda m, t: {"question": "A fresh follow-up?", "answer": "expected"})
    seed = {**(FACT_SEED if task == "factual" else SEED), "task": task}
    st = {
        "unit_id": "u",
        "seed": seed,
        "seed_solved": solved,
        "seed_error_type": "Calculation",
        "current": {"q": 0, "kind": "seed", "text": seed["question"], "attempt": 1},
        "transcript": [{"speaker": "interviewer", "kind": "question", "q": 0, "attempt": 1, "text": seed["question"]}],
        "interactions": [{"q": 0, "answer": "my answer", "facts": [{"fact": "f", "supported": False}]}],
        "followups": [],
    }
    out = ask_followup(st, rt(tmp_path, {"evaluator": chat}))
    assert out["followups"][0]["type"] == ftype and out["followups"][0]["status"] == "asked"
    assert out["current"] == {
        "q": 1,
        "kind": "followup",
        "type": ftype,
        "text": "A fresh follow-up?",
        "expected": "expected",
        "attempt": 1,
    }
    assert marker in all_text(chat.calls[0][0])


def test_a_repeated_or_failed_followup_ends_the_questions(tmp_path):
    chat = ScriptedChat(lambda m, t: {"question": SEED["question"], "answer": "x"})
    st = {
        "seed": SEED,
        "seed_solved": True,
        "current": {"q": 0, "kind": "seed", "text": SEED["question"], "attempt": 1},
        "transcript": [],
        "interactions": [],
        "followups": [],
    }
    out = ask_followup(st, rt(tmp_path, {"evaluator": chat}))
    assert out["followups"][0]["status"] == "failed" and "current" not in out


# -- summary and the single-turn judge --------------------------------------------------------------


def test_session_summary_by_interviewer_or_code(tmp_path):
    st = {
        "transcript": [{"speaker": "interviewer", "kind": "question", "q": 0, "attempt": 1, "text": "Q"}],
        "interactions": [{"q": 0, "kind": "seed", "attempt": 1, "correct": True}],
        "seed_solved": True,
        "feedbacks": [],
    }
    chat = ScriptedChat(lambda m, t: "It solved the problem quickly.")
    assert (
        summarize_session(st, rt(tmp_path, {"evaluator": chat}))["session_summary"] == "It solved the problem quickly."
    )
    out = summarize_session(st, rt(tmp_path, {"evaluator": chat}, summarize=False))
    assert out["summary_source"] == "code" and "interaction 1" in out["session_summary"]


def test_single_turn_judge_asks_the_unmodified_question_in_a_fresh_chat(tmp_path):
    seen = []
    target = ScriptedChat(lambda m, t: seen.append(m) or "Final answer: 14")
    yes = ScriptedChat(lambda m, t: {"correct": True, "error_type": "N/A", "reason": "ok"})
    out = single_turn_judge({"seed": SEED}, rt(tmp_path, {"target": target, "grader": yes}))
    assert out["single_turn"]["correct"] and out["single_turn"]["score"] == 1.0
    assert [m.type for m in seen[0]] == ["system", "human"] and seen[0][-1].content == SEED["question"]
    human = single_turn_judge({"seed": SEED}, rt(tmp_path, {"target": target}, interviewee="human"))
    assert "skipped" in human["single_turn"] and len(seen) == 1


def test_fake_world_feedback_never_contains_answers_of_many_seeds(tmp_path):
    """Constructed sweep: a leaky interviewer on 30 seeds; the node output never holds the answer."""

    def leaky(m, t):
        ans = field(all_text(m), "Correct answer")
        return {"feedback": f"It is {ans}. Really, {ans}!", "kind": "x"}

    runtime = rt(tmp_path, {"evaluator": ScriptedChat(leaky)})
    for i in range(30):
        seed = math_seed(i)
        out = give_feedback(wrong_state(seed=seed), runtime)
        assert not checks.leaks_answer(out["transcript"][0]["text"], seed["answer"])
