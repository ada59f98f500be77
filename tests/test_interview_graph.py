"""Whole interview sessions on the graph with fake models: Algorithm 1 control flow and calibration."""

from __future__ import annotations

import pytest
from langgraph.runtime import Runtime

from dyneval.graphs.interview import after_followup, after_grade
from dyneval.protocols.interview import InterviewProtocol, metrics
from dyneval.runtime.protocol import Unit
from dyneval.state.interview import InterviewContext
from tests.fakes import ScriptedChat
from tests.test_interview_world import math_seed, run_session, services, simulated_interviewee


def always_wrong():
    return ScriptedChat(lambda m, t: "I guess.\nFinal answer: 99999")


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_retries_stop_at_the_cap(tmp_path, max_retries):
    st = run_session(math_seed(2), services(tmp_path, always_wrong()), max_retries=max_retries, max_questions=1)
    seed_answers = [i for i in st["interactions"] if i["q"] == 0]
    assert [i["attempt"] for i in seed_answers] == list(range(1, max_retries + 2))
    assert len(st["feedbacks"]) == max_retries
    assert [f["level"] for f in st["feedbacks"]] == list(range(1, max_retries + 1))
    assert st["seed_solved"] is False and st["session_summary"]


def test_a_correct_answer_ends_the_retries_and_leads_to_a_followup(tmp_path):
    st = run_session(math_seed(3), services(tmp_path, simulated_interviewee(1.0)), max_retries=3, max_questions=2)
    seed_answers = [i for i in st["interactions"] if i["q"] == 0]
    assert len(seed_answers) == 1 and seed_answers[0]["correct"] and st["feedbacks"] == []
    assert [f["type"] for f in st["followups"]] == ["rationale"]
    fup = [i for i in st["interactions"] if i["kind"] == "followup"]
    assert len(fup) == 1 and fup[0]["correct"]


def test_followups_up_to_max_questions_and_by_outcome(tmp_path):
    st = run_session(math_seed(4), services(tmp_path, always_wrong()), max_retries=1, max_questions=3)
    assert [f["type"] for f in st["followups"]] == ["clarification", "clarification"]
    assert [i["q"] for i in st["interactions"] if i["kind"] == "followup"] == [1, 2]
    st = run_session(math_seed(4), services(tmp_path, always_wrong()), max_retries=1, max_questions=3, followups=False)
    assert st.get("followups", []) == []


def test_followup_retries_only_when_switched_on(tmp_path):
    st = run_session(
        math_seed(5), services(tmp_path, always_wrong()), max_retries=1, max_questions=2, retry_followups=True
    )
    fups = [i for i in st["interactions"] if i["kind"] == "followup"]
    assert [i["attempt"] for i in fups] == [1, 2]
    assert [f["q"] for f in st["feedbacks"]] == [0, 1]


def test_transcript_is_readable_in_order(tmp_path):
    st = run_session(math_seed(6), services(tmp_path, always_wrong()), max_retries=1, max_questions=2)
    kinds = [(t["speaker"], t["kind"]) for t in st["transcript"]]
    assert kinds == [
        ("system", "note"),
        ("system", "note"),
        ("interviewer", "question"),
        ("interviewee", "answer"),
        ("grader", "grade"),
        ("interviewer", "feedback"),
        ("interviewee", "answer"),
        ("grader", "grade"),
        ("interviewer", "follow-up"),
        ("interviewee", "answer"),
        ("grader", "grade"),
    ]


def test_routers_follow_algorithm_1():
    ctx = InterviewContext(max_retries=2, max_questions=2)
    rt = Runtime(context=ctx)
    wrong = {"correct": False}
    st = {"current": {"q": 0, "kind": "seed", "attempt": 2}, "last_grade": wrong}
    assert after_grade(st, rt) == "give_feedback"
    st["current"]["attempt"] = 3
    assert after_grade(st, rt) == "ask_followup"
    st["current"] = {"q": 1, "kind": "followup", "attempt": 1}
    assert after_grade(st, rt) == "summarize_session"
    assert after_followup({"followups": [{"status": "failed"}]}, rt) == "summarize_session"
    assert after_followup({"followups": [{"status": "asked"}]}, rt) == "answer"


# -- calibration ---------------------------------------------------------------------------------


def _scores(tmp_path, p: float, n: int, feedback: bool = True, max_retries: int = 2) -> list[float]:
    proto = InterviewProtocol()
    svc = services(tmp_path / f"p{p}{feedback}", simulated_interviewee(p, helped=0.5, salt="cal"))
    records = []
    for i in range(n):
        seed = math_seed(i)
        st = run_session(
            seed,
            svc,
            max_retries=max_retries,
            max_questions=1,
            single_turn_judge=False,
            summarize=False,
            feedback=feedback,
        )
        rec = proto.result(Unit(id=seed["id"], input={}, meta={}), st)
        records.append({"status": "ok", "unit_id": seed["id"], **rec})
    return metrics.score_at_n(records, max_retries + 1)


def test_calibration_score_at_1_orders_simulated_interviewees_and_feedback_helps(tmp_path):
    n = 40
    by_p = {p: _scores(tmp_path, p, n) for p in (0.2, 0.5, 0.9)}
    s1 = [by_p[p][0] for p in (0.2, 0.5, 0.9)]
    assert s1[0] < s1[1] < s1[2]
    for p, s in by_p.items():
        assert abs(s[0] - p) < 0.2, (p, s)
        assert s[0] <= s[1] <= s[2] and s[2] > s[0], (p, s)  # Score@n rises when feedback helps
    # without the feedback duty this interviewee cannot improve: Score@n stays flat
    flat = _scores(tmp_path, 0.5, n, feedback=False)
    assert flat[0] == flat[1] == flat[2] == pytest.approx(by_p[0.5][0])
