"""ATAD verdicts (issue 11): an orchestrator that gives no usable verdict leaves the candidate unjudged (the unit
stops as ungraded, no fake feedback to the teacher, nothing finalized or discarded); a reviewer that gives no
usable review is ungraded and in no Table 3 mean; an evaluated model's unusable answer stays its wrong answer."""

from __future__ import annotations

from langgraph.runtime import Runtime

from dyneval.nodes.atad.evaluation import review_item
from dyneval.protocols.atad import AtadProtocol
from dyneval.protocols.atad.evaluation import AtadEvalProtocol, evaluation_metrics
from dyneval.state.atad import EvalContext
from tests.conftest import make_services
from tests.fakes import ScriptedChat
from tests.test_atad_support import World, run_graph, services, steps, student_chat, teacher_chat, unit_input


def test_an_orchestrator_without_a_usable_verdict_stops_the_unit_ungraded(tmp_path):
    world = World()
    teacher = teacher_chat(world)
    broken = ScriptedChat(lambda m, t: {"approved": "perhaps"})
    svc = services(tmp_path, world, teacher=teacher, orchestrator=broken, student=student_chat(world, [False]))
    out = run_graph(svc, unit_input())
    assert steps(out) == ["generate", "validate"]
    assert len(teacher.calls) == 1 and len(broken.calls) == 2  # the verdict and its one repair, no new draft
    assert "status" not in out and out["approved"] is None and "orchestrator" in out["ungraded"]
    assert [e["approved"] for e in out["history"] if e["step"] == "validate"] == [None]
    assert AtadProtocol().ungraded(out) == 1


def test_a_reviewer_without_a_usable_review_is_ungraded_and_in_no_mean(tmp_path):
    ref = "rev@http://127.0.0.1:9/v1"
    svc = make_services(tmp_path, protocol="atad", chats={ref: ScriptedChat(lambda m, t: "looks fine")})
    world = World()
    problem = world.problem("T1Problem", [])
    state = {"kind": "review", "model": ref, "task": "T1", "problem": problem}
    out = review_item(state, Runtime(context=EvalContext(services=svc)))
    assert out["review"] is None and out["parse_error"]
    assert AtadEvalProtocol().ungraded({**state, **out}) == 1
    assert AtadEvalProtocol().ungraded({"kind": "answer", "correct": False, "parse_error": "x"}) == 0
    meta = {"kind": "review", "model": "rev", "orchestrator": True, "bench": 0, "bench_label": "b", "task": "T1"}
    good = {"validity": 4, "coherence": 4, "fairness": 4, "approved": True}
    m = evaluation_metrics(
        [{"status": "ungraded", "meta": meta, "review": None}, {"status": "ok", "meta": meta, "review": good}]
    )
    assert m["reviews_ungraded"] == 1 and m["excluded_infra_errors"] == 0
    assert m["table3"]["reviews"]["rev"]["with"] == {
        **{k: 4 for k in ("validity", "coherence", "fairness")},
        "approval": 100.0,
        "n": 1,
        "ungraded": 1,
    }
