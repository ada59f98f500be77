"""Fault tests of the verdicts (issue 11) for all four protocols, through the real graphs, the real ``RoleLLM``
and the OpenAI client, against the stand-in endpoint (answers depend only on the request content):

* a judge that never returns a usable structured verdict (every call and every repair malformed) leaves every
  verdict ungraded: nothing is counted as wrong, and the metrics are computed over graded verdicts only
  (none here: no value, denominator 0, the ungraded count);
* with 30 % transient faults (429/500/503) and 30 % malformed replies, every unit's verdicts equal the clean
  run's (the call layer's retries and its one repair heal every fault).

Roles are named models on the stand-in (``MODEL@URL`` resolved through ``[models]``) so that ``max_retries``
can be raised: with 30 % transient faults the default 4 retries would fail about one call in 400.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from rich.console import Console

from dyneval.runtime.events import EventLog
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.protocol import Run, Unit
from dyneval.runtime.services import Services
from dyneval.state.config import ModelSpec, RunConfig
from tests.standin_endpoint import Faults, StandIn
from tests.test_judgeagent_support import write_kb

GARBAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_bad", "type": "function", "function": {"name": "x", "arguments": '{"oops": '}}],
}


def garbage_for(model: str, tool: str | None = None):
    """A ``respond`` hook: malformed replies to every structured request of ``model`` (repairs included)."""

    def respond(body: dict[str, Any]):
        tools = body.get("tools") or []
        if body.get("model") == model and tools and (tool is None or tools[0]["function"]["name"] == tool):
            return GARBAGE
        return None

    return respond


def services(tmp_path: Path, standin: StandIn, protocol: str, roles: dict[str, str]) -> Services:
    models = {
        name: ModelSpec(model=name, base_url=standin.url, max_retries=12, timeout_s=10) for name in set(roles.values())
    }
    config = RunConfig(protocol=protocol, out=str(tmp_path), models=models, roles=roles)
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    return Services(
        config=config, run_dir=run_dir, events=EventLog(run_dir / "events.jsonl"), retry_sleep=lambda s: None
    )


def run_units(protocol: Any, svc: Services, units: list[Unit], **params: Any) -> list[dict[str, Any]]:
    """Each unit through the protocol's real graph; records as the runner writes them (with status)."""
    graph = protocol.builder().compile(checkpointer=InMemorySaver())
    ctx = protocol.context_cls(services=svc, **params)
    records = []
    for unit in units:
        state = graph.invoke(unit.input, {"configurable": {"thread_id": unit.id}}, context=ctx)
        ungraded = protocol.ungraded(state)
        records.append(
            {
                "unit_id": unit.id,
                "status": "ungraded" if ungraded else "ok",
                "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                "wall_s": 0.0,
                **protocol.result(unit, state),
                "_state": state,
            }
        )
    return records


def a_run(svc: Services, params: dict[str, Any]) -> Run:
    return Run(
        config=svc.config.model_copy(update={"params": params}),
        run_dir=svc.run_dir,
        services=svc,
        console=Console(file=io.StringIO()),
        executor=ExecutorChoice(),
    )


# -- interview ------------------------------------------------------------------------------------

SEEDS = [
    {
        "id": "m1",
        "task": "math",
        "question": "A tram carries 42 people and 18 get off. How many remain?",
        "solution": "42 - 18 = 24",
        "answer": "24",
    },
    {
        "id": "f1",
        "task": "factual",
        "question": "Why do tides rise and fall?",
        "solution": "The Moon's gravity pulls the oceans into bulges; the Earth turns under them.",
        "answer": "",
    },
    {
        "id": "g1",
        "task": "generic",
        "question": "Name a prime number between 20 and 25.",
        "solution": "23",
        "answer": "23",
    },
    {
        "id": "i1",
        "task": "instruction",
        "question": "Write one sentence about rivers without the letter e.",
        "solution": "",
        "answer": "",
    },
]
INTERVIEW_ROLES = {"target": "target", "evaluator": "interviewer", "grader": "grader"}
INTERVIEW_PARAMS = {"max_retries": 1, "max_questions": 2}


def interview_units() -> list[Unit]:
    return [Unit(id=s["id"], input={"unit_id": s["id"], "seed": s}) for s in SEEDS]


def interview_verdicts(records: list[dict[str, Any]]) -> dict[str, list[tuple]]:
    out = {}
    for r in records:
        st = r["_state"]
        out[r["unit_id"]] = [(i["q"], i["attempt"], i["verdict"], i["score"]) for i in st["interactions"]] + [
            ("single", st["single_turn"].get("verdict"), st["single_turn"].get("score"))
        ]
    return out


def test_interview_grader_that_never_answers_usably_leaves_every_verdict_ungraded(tmp_path):
    from dyneval.protocols.interview import InterviewProtocol

    protocol = InterviewProtocol()
    with StandIn(respond=garbage_for("grader")) as standin:
        svc = services(tmp_path, standin, "interview", INTERVIEW_ROLES)
        records = run_units(protocol, svc, interview_units(), **INTERVIEW_PARAMS)
        summary = protocol.summarize(a_run(svc, INTERVIEW_PARAMS), records)
    for r in records:
        st = r["_state"]
        assert r["status"] == "ungraded" and r["seed_solved"] is None and st["stopped"]
        assert [i["verdict"] for i in st["interactions"]] == ["ungraded"]  # the session stops at once
        assert st["single_turn"]["verdict"] == "ungraded"
        assert not st.get("feedbacks") and not st.get("followups")
        assert protocol.ungraded(st) == 2
    assert summary["score@1"] is None and summary["score@2"] is None and summary["judge"] is None
    assert summary["denominators"]["score@1"] == {"n": 0, "ungraded": 4}
    assert summary["denominators"]["judge"] == {"n": 0, "ungraded": 4}
    assert summary["followup_accuracy"]["n"] == 0 and summary["followup_accuracy"]["overall"] is None
    assert summary["error_types"]["total"] == 0  # nothing counted as wrong
    assert summary["sessions_ungraded"] == 4 and summary["graded_by"] == {"ungraded": 4}


def test_interview_verdicts_under_transient_and_malformed_faults_equal_the_clean_run(tmp_path):
    from dyneval.protocols.interview import InterviewProtocol

    protocol = InterviewProtocol()
    runs = {}
    for name, faults in (("clean", Faults()), ("faulty", Faults(transient=0.3, malformed=0.3, seed=1))):
        with StandIn(faults=faults) as standin:
            svc = services(tmp_path / name, standin, "interview", INTERVIEW_ROLES)
            runs[name] = interview_verdicts(run_units(protocol, svc, interview_units(), **INTERVIEW_PARAMS))
            faults_seen = (sum(r.status != 200 for r in standin.requests), sum(r.repair for r in standin.requests))
        if name == "faulty":
            assert all(faults_seen), f"transient faults and repairs: {faults_seen}"
    assert runs["faulty"] == runs["clean"]
    clean = [x[-2] for unit in runs["clean"].values() for x in unit]
    assert set(clean) == {"correct", "wrong"}  # the clean run grades everything, both ways


# -- judgeagent -----------------------------------------------------------------------------------

JUDGE_ROLES = {"target": "target", "evaluator": "evaluator"}


def judgeagent_units(kb: Path) -> list[Unit]:
    from dyneval.state.judgeagent import BaseQuestion

    qs = [
        BaseQuestion(id=f"q{i}", question=f"Which port does the Voss Canal reach, case {i}?", answer="Harl")
        for i in range(4)
    ]
    return [Unit(id=f"batch-{k}", input={"batch": [q.model_dump() for q in qs[2 * k : 2 * k + 2]]}) for k in range(2)]


def judgeagent_params(kb: Path) -> dict[str, Any]:
    return {"kb": str(kb), "rounds": 1, "hops": 2}


def test_judgeagent_judge_that_never_answers_usably_leaves_every_verdict_ungraded(tmp_path):
    from dyneval.protocols.judgeagent import JudgeAgentProtocol

    kb = write_kb(tmp_path / "kb")
    protocol = JudgeAgentProtocol()
    with StandIn(respond=garbage_for("evaluator", tool="Verdict")) as standin:
        svc = services(tmp_path, standin, "judgeagent", JUDGE_ROLES)
        params = judgeagent_params(kb)
        records = run_units(protocol, svc, judgeagent_units(kb), **params)
        summary = protocol.summarize(a_run(svc, {**params, "data": "test"}), records)
    for r in records:
        st = r["_state"]
        verdicts = [b["verdict"] for b in st["base"]] + [x["verdict"] for x in st["rounds"] if x["status"] == "ok"]
        assert verdicts and set(verdicts) == {"ungraded"}
        assert [v["verdict2"] for v in st["validation"]] == ["ungraded", "ungraded"]
        assert st["answered"] == 0 and st["score"] == 0.0 and r["status"] == "ungraded"
    assert summary["base_accuracy"] == {"value": None, "n": 0, "ungraded": 4}
    assert summary["score"] is None and summary["score_denominator"]["n"] == 0
    assert summary["dynamic_scores"]["base"] is None and summary["dynamic_denominators"]["base"]["ungraded"] == 4
    assert summary["validation"]["overall"]["n"] == 0 and summary["validation"]["overall"]["ungraded"] == 4
    assert summary["validation"]["overall"]["acc1"] is None
    assert summary["judged_by"].get("evaluator", 0) == 0 and summary["batches_ungraded"] == 2


def _judgeagent_verdicts(records: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for r in records:
        st = r["_state"]
        out[r["unit_id"]] = {
            "base": [(b["id"], b["verdict"]) for b in st["base"]],
            "rounds": [(x["round"], x["status"], x.get("verdict"), x["difficulty"]) for x in st["rounds"]],
            "validation": [(v["id"], v["verdict1"], v["verdict2"]) for v in st["validation"]],
            "feedback": st["feedback"]["status"],
            "score": st["score"],
        }
    return out


def test_judgeagent_verdicts_under_transient_and_malformed_faults_equal_the_clean_run(tmp_path):
    from dyneval.protocols.judgeagent import JudgeAgentProtocol

    kb = write_kb(tmp_path / "kb")
    protocol = JudgeAgentProtocol()
    runs = {}
    for name, faults in (("clean", Faults()), ("faulty", Faults(transient=0.3, malformed=0.3, seed=2))):
        with StandIn(faults=faults) as standin:
            svc = services(tmp_path / name, standin, "judgeagent", JUDGE_ROLES)
            runs[name] = _judgeagent_verdicts(run_units(protocol, svc, judgeagent_units(kb), **judgeagent_params(kb)))
            faults_seen = (sum(r.status != 200 for r in standin.requests), sum(r.repair for r in standin.requests))
        if name == "faulty":
            assert all(faults_seen), f"transient faults and repairs: {faults_seen}"
    assert runs["faulty"] == runs["clean"]
    said = [
        v
        for u in runs["clean"].values()
        for v in ([v for _, v in u["base"]] + [r[2] for r in u["rounds"]] + [v[2] for v in u["validation"]])
    ]
    assert set(said) == {"correct", "wrong"}  # both verdicts occur, so equal runs are not equal by accident


# -- llmeval --------------------------------------------------------------------------------------


def _llmeval_session(tmp_path: Path, standin: StandIn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from dyneval.graphs.llmeval import builder
    from dyneval.nodes.llmeval.bankio import import_file
    from dyneval.state.llmeval import LLMEvalContext
    from dyneval.stores.question_bank import QuestionBank

    bank_path = tmp_path / "bank.sqlite"
    import_file(QuestionBank(bank_path), Path(__file__).resolve().parents[1] / "samples" / "llmeval" / "bank.jsonl")
    svc = services(tmp_path, standin, "llmeval", JUDGE_ROLES)
    ctx = LLMEvalContext(services=svc, bank_db=str(bank_path), questions=12, seed=3)
    final = builder.compile(checkpointer=InMemorySaver()).invoke(
        {"session_id": "s1"}, {"configurable": {"thread_id": "s1"}}, context=ctx
    )
    return final, QuestionBank(bank_path).judged_items("s1")


def test_llmeval_judge_that_never_answers_usably_leaves_every_answer_ungraded(tmp_path):
    from dyneval.protocols.llmeval.protocol import LLMEvalProtocol

    with StandIn(respond=garbage_for("evaluator")) as standin:
        final, items = _llmeval_session(tmp_path, standin)
    answered = [i for i in items if (i["response"] or "").strip()]
    assert answered and all(i["stars"] is None and i["judge_status"] == "ungraded" for i in answered)
    assert final["scores"]["S"] is None and final["scores"]["N"] == 0
    assert final["scores"]["stars"] == {"0": 0, "1": 0, "2": 0, "3": 0}  # nothing counted as 0 stars
    assert LLMEvalProtocol().ungraded(final) == len(answered)


def test_llmeval_stars_under_transient_and_malformed_faults_equal_the_clean_run(tmp_path):
    runs = {}
    for name, faults in (("clean", Faults()), ("faulty", Faults(transient=0.3, malformed=0.3, seed=3))):
        with StandIn(faults=faults) as standin:
            final, items = _llmeval_session(tmp_path / name, standin)
            faults_seen = (sum(r.status != 200 for r in standin.requests), sum(r.repair for r in standin.requests))
        if name == "faulty":
            assert all(faults_seen), f"transient faults and repairs: {faults_seen}"
        runs[name] = ([(i["position"], i["stars"], i["judge_status"]) for i in items], final["scores"]["S"])
    assert runs["faulty"] == runs["clean"]
    assert runs["clean"][1] is not None and all(s is not None for _, s, _ in runs["clean"][0])


# -- atad (evaluation phase: the reviewer is the judge; answers are compared in code) --------------


def _atad_units() -> list[Unit]:
    import json

    path = Path(__file__).resolve().parents[1] / "samples" / "atad" / "benchmark.jsonl"
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    units = []
    for item in items[:4]:
        units.append(
            Unit(
                id=f"answer-{item['id']}",
                input={"kind": "answer", "model": "student", "task": item["task"], "problem": item["problem"]},
            )
        )
        units.append(
            Unit(
                id=f"review-{item['id']}",
                input={"kind": "review", "model": "reviewer", "task": item["task"], "problem": item["problem"]},
            )
        )
    return units


def _atad_outcomes(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["unit_id"]: (r["status"], r["correct"], r["predicted"], r["review"]) for r in records}


ATAD_ROLES = {"target": "student", "evaluator": "reviewer"}


def test_atad_reviewer_that_never_answers_usably_leaves_every_review_ungraded(tmp_path):
    from dyneval.protocols.atad.evaluation import AtadEvalProtocol, evaluation_metrics

    protocol = AtadEvalProtocol()
    with StandIn(respond=garbage_for("reviewer")) as standin:
        svc = services(tmp_path, standin, "atad", ATAD_ROLES)
        records = run_units(protocol, svc, _atad_units())
    reviews = [r for r in records if r["unit_id"].startswith("review-")]
    answers = [r for r in records if r["unit_id"].startswith("answer-")]
    assert all(r["status"] == "ungraded" and r["review"] is None for r in reviews)
    assert all(r["status"] == "ok" and r["correct"] is not None for r in answers)  # the model under test: graded
    meta = {"orchestrator": True, "bench": 0, "bench_label": "sample"}
    m = evaluation_metrics(
        [{**r, "meta": {**meta, "kind": "review", "model": "reviewer", "task": "T1"}} for r in reviews]
    )
    assert m["reviews_ungraded"] == 4
    assert m["table3"]["reviews"]["reviewer"]["with"]["n"] == 0
    assert m["table3"]["reviews"]["reviewer"]["with"]["validity"] is None


def test_atad_outcomes_under_transient_and_malformed_faults_equal_the_clean_run(tmp_path):
    from dyneval.protocols.atad.evaluation import AtadEvalProtocol

    runs = {}
    for name, faults in (("clean", Faults()), ("faulty", Faults(transient=0.3, malformed=0.3, seed=4))):
        with StandIn(faults=faults) as standin:
            svc = services(tmp_path / name, standin, "atad", ATAD_ROLES)
            runs[name] = _atad_outcomes(run_units(AtadEvalProtocol(), svc, _atad_units()))
            faults_seen = (sum(r.status != 200 for r in standin.requests), sum(r.repair for r in standin.requests))
        if name == "faulty":
            assert all(faults_seen), f"transient faults and repairs: {faults_seen}"
    assert runs["faulty"] == runs["clean"]
    assert all(status == "ok" for status, *_ in runs["clean"].values())
