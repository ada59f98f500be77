"""One model resolver: every role and model reference naming one spec shares one chat model, one in-flight
semaphore and one rate limiter, and ATAD's evaluated models and LLMEval's reference model go through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

import dyneval.runtime.models as models
from dyneval.graphs.llmeval import builder as llmeval_builder
from dyneval.nodes.atad.evaluation import answer_item, review_item
from dyneval.nodes.llmeval.bankio import import_file
from dyneval.protocols.atad.benchmark import load_benchmark
from dyneval.runtime.events import EventLog
from dyneval.runtime.services import Services
from dyneval.state.atad import EvalContext
from dyneval.state.config import ModelSpec, RunConfig
from dyneval.state.llmeval import LLMEvalContext
from dyneval.stores.question_bank import QuestionBank
from tests.fakes import ScriptedChat

REPO = Path(__file__).resolve().parents[1]
URL = "http://127.0.0.1:9/v1"  # nothing listens: no test here sends a request to it
REF = f"m@{URL}"
#: The endpoint of REF under config names: with a rate limit, warmer, and exactly REF's spec.
NAMED = ModelSpec(model="m", base_url=URL, api_key_env="OPENAI_API_KEY", requests_per_second=5, concurrency=4)
MODELS = {
    "qwen": NAMED,
    "warm": NAMED.model_copy(update={"temperature": 0.7}),
    "same": ModelSpec(model="m", base_url=URL, api_key_env="OPENAI_API_KEY"),
}


def services(tmp_path: Path, roles: dict[str, str], chats: dict | None = None) -> Services:
    config = RunConfig(protocol="test", out=str(tmp_path), roles=roles, models=MODELS)
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    return Services(
        config=config,
        run_dir=run_dir,
        events=EventLog(run_dir / "events.jsonl"),
        chat_overrides=chats or {},
        retry_sleep=lambda s: None,
    )


@pytest.fixture
def built(monkeypatch) -> list[ModelSpec]:
    """Every chat model construction, in order (the real factory still builds them)."""
    specs: list[ModelSpec] = []
    real = models.build_chat_model

    def counting(spec: ModelSpec):
        specs.append(spec)
        return real(spec)

    monkeypatch.setattr(models, "build_chat_model", counting)
    return specs


def test_roles_and_references_naming_one_spec_share_its_chat_model_semaphore_and_rate_limiter(tmp_path, built):
    svc = services(tmp_path, {"target": "qwen", "evaluator": "qwen"})
    llms = [
        svc.llm("target"),
        svc.llm("evaluator"),
        svc.llm("grader"),
        svc.model("qwen", role="student"),
        svc.model("qwen", role="reference"),
    ]
    assert len(built) == 1
    assert all(x.chat is llms[0].chat and x.slots is llms[0].slots for x in llms)
    assert all(x.limiter is llms[0].limiter for x in llms) and llms[0].limiter is not None
    assert [x.role for x in llms] == ["target", "evaluator", "grader", "student", "reference"]  # logged apart
    assert svc.llm("target") is llms[0]  # the call layer itself is cached per role and reference
    warm = svc.model("warm", role="student")  # another spec: its own endpoint and limits
    assert len(built) == 2 and warm.chat is not llms[0].chat and warm.slots is not llms[0].slots


def test_the_semaphore_bounds_all_roles_of_an_endpoint_together(tmp_path, built):
    svc = services(tmp_path, {"target": "qwen", "evaluator": "qwen"})
    target, evaluator = svc.llm("target"), svc.llm("evaluator")
    for _ in range(NAMED.concurrency):
        assert target.slots.acquire(blocking=False)
    assert not evaluator.slots.acquire(blocking=False)  # the target's requests fill the evaluator's slots too


def test_an_inline_reference_and_a_named_spec_are_one_endpoint_only_when_the_specs_agree(tmp_path, built):
    svc = services(tmp_path, {"target": REF, "evaluator": "qwen"})
    assert svc.llm("target").slots is not svc.llm("evaluator").slots  # the named spec sets a rate limit
    assert svc.model("same", role="student").slots is svc.llm("target").slots
    assert svc.model(REF, role="reference").chat is svc.llm("target").chat
    assert len(built) == 2


def answering(messages, tool):
    """Any model here: answers an index task with 4, approves a problem, answers an exam question in words."""
    if tool is None:
        return "True, because it follows from the definition."
    return {
        "IndexAnswer": {"answer": 4, "explanation": "x"},
        "Review": {"validity": 5, "coherence": 5, "fairness": 5, "approved": True},
    }.get(tool["function"]["name"], {"rating": 3, "reason": "matches"})


def test_atad_evaluated_models_and_the_llmeval_reference_model_are_built_by_the_one_resolver(tmp_path, monkeypatch):
    specs: list[ModelSpec] = []
    monkeypatch.setattr(models, "build_chat_model", lambda spec: specs.append(spec) or ScriptedChat(answering))
    svc = services(tmp_path, {"target": REF, "evaluator": "qwen"})

    item = next(i for i in load_benchmark(REPO / "samples" / "atad" / "benchmark.jsonl") if i["task"] == "T1")
    atad = Runtime(context=EvalContext(services=svc))
    unit = {"model": REF, "task": item["task"], "problem": item["problem"]}
    assert answer_item(unit, atad)["parse_error"] is None
    assert review_item({**unit, "model": "qwen"}, atad)["review"]["approved"] is True

    bank_path = tmp_path / "bank.sqlite"
    import_file(QuestionBank(bank_path), REPO / "samples" / "llmeval" / "bank.jsonl")
    ctx = LLMEvalContext(services=svc, bank_db=str(bank_path), questions=3, reference_model="qwen")
    final = llmeval_builder.compile(checkpointer=InMemorySaver()).invoke(
        {"session_id": "s"}, {"configurable": {"thread_id": "s"}}, context=ctx
    )
    assert final["reference_answered"] == 3

    assert specs == [MODELS["same"], NAMED]  # one construction per spec, whoever asked
    events = [json.loads(line) for line in (svc.run_dir / "events.jsonl").read_text().splitlines()]
    roles = {(e["role"], e["model"]) for e in events}
    assert {("student", REF), ("grader", REF), ("target", REF), ("reference", REF), ("evaluator", REF)} <= roles
