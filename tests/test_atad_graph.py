"""The ATAD graph with fake teacher / orchestrator / student (section 2.2): every path of Figure 2."""

from __future__ import annotations

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from dyneval.graphs.atad import after_check
from dyneval.nodes.atad.outcome import check_structure
from dyneval.nodes.atad.student import solve
from dyneval.state.atad import AtadContext
from dyneval.state.errors import InfraError
from tests.fakes import ScriptedChat
from tests.test_atad_support import (
    World,
    orchestrator_chat,
    run_graph,
    services,
    steps,
    student_chat,
    teacher_chat,
    unit_input,
)


def test_rejected_base_problem_is_regenerated_with_feedback_then_approved(tmp_path):
    world = World()
    teacher = teacher_chat(world)
    svc = services(
        tmp_path,
        world,
        teacher=teacher,
        orchestrator=orchestrator_chat([False, True]),
        student=student_chat(world, [False]),
    )
    out = run_graph(svc, unit_input())
    assert steps(out)[:5] == ["generate", "validate", "generate", "validate", "accept"]
    assert out["status"] == "finalized" and out["acceptance"] == "student_failed"
    # the second teacher prompt carries the orchestrator's feedback
    second_prompt = "\n".join(str(m.content) for m in teacher.calls[1][0])
    assert "the anomaly is ambiguous" in second_prompt
    assert [v["approved"] for v in out["history"] if v["step"] == "validate"] == [False, True]
    assert out["base"] == out["current"]


def test_success_escalates_to_a_harder_validated_problem_until_the_student_fails(tmp_path):
    world = World()
    orch = orchestrator_chat()
    svc = services(tmp_path, world, orchestrator=orch, student=student_chat(world, [True, True, False]))
    out = run_graph(svc, unit_input("T6"))
    assert out["status"] == "finalized" and out["acceptance"] == "student_failed"
    assert out["student_loops"] == 3 and out["successes"] == 2
    assert out["current_level"] == 2  # easy -> hard -> extreme
    assert out["base"] != out["current"]
    escalations = [e for e in out["history"] if e["step"] == "escalate"]
    assert [(e["from_level"], e["to_level"]) for e in escalations] == [("easy", "hard"), ("hard", "extreme")]
    # harder variants are validated with the lenient difficulty-scaled prompt (D.2.3)
    scaled = [m for m, name in orch.calls if name == "Verdict"][1:]
    texts = [str(m[-1].content) for m in scaled]
    assert len(texts) == 2 and all("be lenient" in t for t in texts)
    assert 'difficulty "hard"' in texts[0] and 'difficulty "extreme"' in texts[1]
    assert sum(1 for _, name in orch.calls if name == "EscalationFeedback") == 2


def test_rejected_harder_variants_fall_back_to_the_last_validated_problem(tmp_path):
    world = World()
    # base approved, then every harder variant rejected
    svc = services(
        tmp_path,
        world,
        orchestrator=orchestrator_chat([True, False, False, False]),
        student=student_chat(world, [True]),
    )
    out = run_graph(svc, unit_input("T3"), max_level_attempts=2)
    assert out["acceptance"] == "escalation_rejected"
    assert out["current"] == out["base"]  # the solved base problem is kept
    assert out["current_level"] == 0
    gens = [e for e in out["history"] if e["step"] == "generate" and e["phase"] == "escalate"]
    assert len(gens) == 2 and all(e["level"] == "hard" for e in gens)


def test_retry_after_rejected_harder_variant_asks_for_slightly_less_difficulty(tmp_path):
    world = World()
    teacher = teacher_chat(world)
    svc = services(
        tmp_path,
        world,
        teacher=teacher,
        orchestrator=orchestrator_chat([True, False, True]),
        student=student_chat(world, [True, False]),
    )
    out = run_graph(svc, unit_input("T1"))
    prompts = ["\n".join(str(m.content) for m in msgs) for msgs, _ in teacher.calls]
    assert "A student solved this" in prompts[1]  # escalation prompt
    assert "was rejected" in prompts[2] and "slightly less extreme" in prompts[2]
    assert out["acceptance"] == "student_failed" and out["current_level"] == 1


def test_student_loop_cap_finalizes_an_always_solved_problem(tmp_path):
    world = World()
    svc = services(tmp_path, world, student=student_chat(world, 1.0))
    out = run_graph(svc, unit_input("T7"), max_student_loops=3)
    assert out["acceptance"] == "student_loop_cap"
    assert out["student_loops"] == 3
    assert sum(1 for s in steps(out) if s == "escalate") == 2


def test_item_is_discarded_with_history_when_no_base_problem_passes(tmp_path):
    world = World()
    bad = {"sentences": ["Only one sentence."], "answer": 1}
    svc = services(
        tmp_path,
        world,
        teacher=teacher_chat(world, [bad, "garbage", "garbage"]),
        orchestrator=orchestrator_chat([False]),
    )
    out = run_graph(svc, unit_input("T5"), max_init_loops=2)
    assert out["status"] == "discarded" and out["acceptance"] is None
    assert "no valid base problem after 2 attempt(s)" in out["discard_reason"]
    gens = [e for e in out["history"] if e["step"] == "generate"]
    assert gens[0]["structure_errors"][0].startswith("sentence_count")
    assert gens[1]["structure_errors"][0].startswith("teacher_output")
    assert "solve" not in steps(out)
    # malformed candidates never reach the orchestrator
    assert "validate" not in steps(out)


def test_orchestrator_rejections_alone_also_discard_after_max_init_loops(tmp_path):
    world = World()
    svc = services(tmp_path, world, orchestrator=orchestrator_chat(lambda m: False))
    out = run_graph(svc, unit_input("T4"), max_init_loops=3)
    assert out["status"] == "discarded"
    assert steps(out).count("validate") == 3


def test_no_orchestrator_ablation_skips_validation_and_feeds_student_explanation(tmp_path):
    world = World()
    orch = orchestrator_chat()
    teacher = teacher_chat(world)
    svc = services(tmp_path, world, teacher=teacher, orchestrator=orch, student=student_chat(world, [True, False]))
    out = run_graph(svc, unit_input("T1"), no_orchestrator=True)
    assert orch.calls == []
    assert out["acceptance"] == "student_failed" and out["current_level"] == 1
    assert "sentence" in "\n".join(str(m.content) for m in teacher.calls[1][0]).split("Analysis of how")[1][:80]


def test_t2_uses_the_seeded_label_and_boolean_answers(tmp_path):
    world = World()
    svc = services(tmp_path, world, student=student_chat(world, [False]))
    out = run_graph(svc, unit_input("T2", target_coherent=True))
    assert out["current"]["coherent"] is True
    assert out["acceptance"] == "student_failed"


def test_unparseable_student_answer_counts_as_a_failure(tmp_path):
    world = World()
    svc = services(tmp_path, world, student=ScriptedChat(lambda m, t: "no idea"))
    out = run_graph(svc, unit_input("T1"))
    solve_event = [e for e in out["history"] if e["step"] == "solve"][0]
    assert solve_event["correct"] is False and solve_event["parse_error"]
    assert out["acceptance"] == "student_failed"


def test_endpoint_failure_of_the_student_is_an_infra_error_not_a_wrong_answer(tmp_path):
    world = World()
    fault = openai.APIConnectionError(request=httpx.Request("POST", "http://x"))
    svc = services(tmp_path, world, student=ScriptedChat(lambda m, t: fault))
    state = {**unit_input("T1"), "current": world.problem("T1Problem", [HumanMessage("x")]), "current_level": 0}
    with pytest.raises(InfraError):
        solve(state, Runtime(context=AtadContext(services=svc)))


def test_check_structure_routes_malformed_candidates_back_to_the_teacher(tmp_path):
    world = World()
    svc = services(tmp_path, world)
    ctx = AtadContext(services=svc, max_init_loops=3)
    state = {
        **unit_input("T3"),
        "attempts": 1,
        "candidate": {"sentence": "x ___ y", "choices": ["a", "a", "b", "c", "d"], "answer": 9},
    }
    update = check_structure(state, Runtime(context=ctx))
    assert after_check({**state, **update}, Runtime(context=ctx)) == "generate"
    assert "choices 1 and 2 are the same" in update["feedback"] and "not between 1 and 5" in update["feedback"]
