"""LangGraph Studio: `langgraph dev` serves every protocol graph on loopback, offline, with the input, output and
context schemas Studio draws its forms from (choices as dropdowns), runs one unit of a graph to completion through
its HTTP API, and steps a human interview through its interrupts to the end."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from dyneval.protocols import protocol_class
from dyneval.runtime.embedded import free_port
from dyneval.runtime.runner import open_run
from dyneval.state.config import RunConfig
from tests.standin_endpoint import StandIn

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]
STUDIO_GRAPH = "interview"  # the protocol people step through in Studio


@contextmanager
def serving(tmp_path: Path, embedded_url: str) -> Iterator[str]:
    """``langgraph dev`` from the repository on a free loopback port; its base URL."""
    exe = Path(sys.executable).with_name("langgraph")
    if not exe.exists():
        pytest.fail("langgraph-cli is not installed (it is part of the test extras)")
    port = free_port()
    log = (tmp_path / "langgraph-dev.log").open("w")  # outside the project tree: no reload loops
    env = {
        **os.environ,
        "DYNEVAL_EMBEDDED_URL": embedded_url,
        "DYNEVAL_RUN_DIR": str(tmp_path / "studio"),
        "LANGSMITH_TRACING": "false",
    }
    proc = subprocess.Popen(
        [str(exe), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("langgraph dev exited: " + (tmp_path / "langgraph-dev.log").read_text()[-2000:])
        try:
            if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("langgraph dev did not start within 120 s")
    try:
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(REPO / ".langgraph_api", ignore_errors=True)


@pytest.fixture
def langgraph_dev(tmp_path, embedded_url):
    with serving(tmp_path, embedded_url) as base:
        yield base


@pytest.fixture
def standin_studio(tmp_path):
    """``langgraph dev`` whose graphs are given stand-in models (no embedded model: its URL refuses)."""
    with StandIn() as standin, serving(tmp_path, "http://127.0.0.1:9/v1") as base:
        yield base, standin


def _choice_fields(graph: str) -> dict[str, tuple[str, ...]]:
    """Field -> choices of every Literal-typed field of a graph's context schema."""
    context = importlib.import_module(f"dyneval.graphs.{graph}").builder.context_schema
    hints = typing.get_type_hints(context)
    out = {}
    for f in dataclasses.fields(context):
        kind = hints[f.name]
        args = (
            [a for a in typing.get_args(kind) if a is not type(None)]
            if typing.get_origin(kind) is not typing.Literal
            else [kind]
        )
        literal = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
        if literal is not None:
            out[f.name] = typing.get_args(literal)
    return out


def _enums(schema: object) -> list[list[object]]:
    """Every ``enum`` list inside a JSON schema fragment."""
    if isinstance(schema, dict):
        return ([schema["enum"]] if "enum" in schema else []) + [e for v in schema.values() for e in _enums(v)]
    if isinstance(schema, list):
        return [e for v in schema for e in _enums(v)]
    return []


def test_every_graph_gives_studio_input_output_and_context_forms_with_choices_as_dropdowns(standin_studio):
    base, _ = standin_studio
    with httpx.Client(base_url=base, timeout=60) as client:
        assistants = client.post("/assistants/search", json={"limit": 50}).json()
        assert {a["graph_id"] for a in assistants} == set(json.loads((REPO / "langgraph.json").read_text())["graphs"])
        for a in assistants:
            schemas = client.get(f"/assistants/{a['assistant_id']}/schemas").json()
            graph = a["graph_id"]
            assert schemas["input_schema"] and schemas["input_schema"].get("properties"), graph
            assert schemas["output_schema"] and schemas["output_schema"].get("properties"), graph
            context = schemas.get("context_schema") or schemas.get("config_schema")
            assert context and "target" in context["properties"], graph
            for name, choices in _choice_fields(graph).items():
                enums = _enums(context["properties"][name])
                assert list(choices) in enums, f"{graph}.{name}: no enum {choices} in {context['properties'][name]}"
        assert _choice_fields("interview").keys() >= {"interviewee", "modification"}


#: What a user gives each graph (its input form), and what the end-of-run panel shows (the unit's result).
INPUTS = {
    "interview": {"seed", "unit_id"},
    "atad": {"task", "topic", "challenge", "style", "target_coherent"},
    "atad_eval": {"kind", "model", "task", "problem"},
    "judgeagent": {"batch", "irt"},
    "judgecheck": {"item"},
    "llmeval": {"session_id", "paradigm", "model"},
}
OUTPUTS = {
    "interview": {
        "seed",
        "modification",
        "interactions",
        "single_turn",
        "seed_solved",
        "seed_error_type",
        "feedbacks",
        "followups",
        "session_summary",
        "summary_source",
        "stopped",
        "transcript",
    },
    "atad": {
        "task",
        "topic",
        "challenge",
        "style",
        "status",
        "acceptance",
        "discard_reason",
        "ungraded",
        "current",
        "current_level",
        "base",
        "student_loops",
        "successes",
        "history",
    },
    "atad_eval": {"kind", "model", "correct", "predicted", "explanation", "parse_error", "review"},
    "judgeagent": {
        "batch",
        "answer_format",
        "base",
        "score",
        "answered",
        "trajectory",
        "rounds",
        "question_entities",
        "feedback",
        "validation",
        "irt",
        "ability",
        "irt_trace",
    },
    "judgecheck": {"item", "verdicts", "jury"},
    "llmeval": {
        "session_id",
        "model",
        "paradigm",
        "reference_session_id",
        "allocated",
        "answered",
        "reference_answered",
        "judged",
        "ungraded",
        "reference_ungraded",
        "scores",
        "reference_scores",
        "relative",
        "adaptive",
        "stopped",
        "theta",
        "se",
    },
}


def _resolved(schema: dict, part: dict) -> dict:
    """``part`` with a ``$ref`` (also inside ``allOf`` / ``anyOf``) replaced by the definition it names."""
    for option in [part, *part.get("allOf", []), *part.get("anyOf", [])]:
        if "$ref" in option:
            return schema["$defs"][option["$ref"].rsplit("/", 1)[-1]]
    return part


def test_every_graphs_input_form_asks_only_what_a_user_gives_and_its_output_is_the_units_result(standin_studio):
    """Studio draws its input form from the input schema and its end-of-run panel from the output schema: the input
    holds only what a user (or the batch runner's plan) provides, the output the fields a unit's record is made of,
    every field described; the interview's seed question is a typed object, not a bare ``object``."""
    base, _ = standin_studio
    with httpx.Client(base_url=base, timeout=60) as client:
        for a in client.post("/assistants/search", json={"limit": 50}).json():
            graph, schemas = a["graph_id"], client.get(f"/assistants/{a['assistant_id']}/schemas").json()
            for kind, expected in (("input_schema", INPUTS), ("output_schema", OUTPUTS)):
                props = schemas[kind]["properties"]
                assert set(props) == expected[graph], f"{graph} {kind}: {sorted(props)}"
                undescribed = [n for n, p in props.items() if not p.get("description")]
                assert not undescribed, f"{graph} {kind}: no description for {undescribed}"
            if graph == "interview":
                form = schemas["input_schema"]
                seed = _resolved(form, form["properties"]["seed"])
                assert seed.get("additionalProperties") is False and set(seed["required"]) == {"id", "question"}
                assert seed["properties"]["question"]["type"] == "string"
                assert set(seed["properties"]["task"]["enum"]) == {"math", "factual", "instruction", "generic"}
                assert all(p.get("description") for p in seed["properties"].values()), seed["properties"]


#: Wrong inputs, each with the field a refusal must name. The first two ran and spent calls (a seed question
#: given as a list; a model label given as a number); the others failed inside a node with no field named.
WRONG_INPUTS = [
    (
        "interview",
        {"seed": {"id": "s1", "question": ["What is 6 x 7?"], "answer": "42", "task": "math"}},
        "seed.question",
    ),
    ("llmeval", {"model": 5, "questions": "many"}, "model"),
    ("interview", {"seed": 5}, "seed"),
    ("interview", {"seed": {"id": "s1", "answer": "42", "task": "math"}}, "seed.question"),
    ("atad", {"task": "T9", "topic": "gardening"}, "task"),
    (
        "atad_eval",
        {
            "kind": "answer",
            "model": "examinee@{URL}",
            "task": "T1",
            "problem": {"sentences": "One. Two. Three. Four. Five.", "answer": 4},
        },
        "problem",
    ),
    (
        "judgeagent",
        {"batch": [{"id": "q1", "question": "Which port does the canal reach?", "options": "Harl"}]},
        "batch.0.answer",
    ),
    (
        "judgecheck",
        {"item": {"id": "i1", "question": "Capital of France?", "response": "Paris", "label": ["correct"]}},
        "item.label",
    ),
]
T1_PROBLEM = {
    "sentences": [
        "Tomatoes need at least six hours of sun a day.",
        "Water them deeply at the base.",
        "Stakes keep the heavy stems off the ground.",
        "The stock market closed higher on Friday.",
        "Pick the fruit when it is evenly red.",
    ],
    "answer": 4,
}


def test_a_wrong_input_is_refused_at_the_graphs_entry_naming_its_field_before_any_model_call(standin_studio):
    base, standin = standin_studio
    context = {"target": standin.spec("target"), "evaluator": standin.spec("judge"), "questions": 4}
    with httpx.Client(base_url=base, timeout=300) as client:
        for graph, payload, field in WRONG_INPUTS:
            payload = json.loads(json.dumps(payload).replace("{URL}", standin.url))
            thread = client.post("/threads", json={}).json()["thread_id"]
            final = client.post(
                f"/threads/{thread}/runs/wait", json={"assistant_id": graph, "input": payload, "context": context}
            ).json()
            error = final.get("__error__") or {}
            assert error.get("error") == "GraphInputError", f"{graph} {payload}: {final}"
            assert f"'{field}'" in error["message"], f"{graph}: {error['message']}"
            assert standin.requests == [], f"{graph} {payload}: {len(standin.requests)} model calls"
            values = client.get(f"/threads/{thread}/state").json()["values"]
            written = {key for key, value in values.items() if value != []}  # list channels start empty
            assert written <= set(payload), f"{graph}: a node wrote {sorted(written - set(payload))}"
            assert client.get(f"/threads/{thread}").json()["status"] == "error"
        # the same endpoint answers a valid input: the refusals above spent nothing because they were refused
        thread = client.post("/threads", json={}).json()["thread_id"]
        final = client.post(
            f"/threads/{thread}/runs/wait",
            json={
                "assistant_id": "atad_eval",
                "context": context,
                "input": {"kind": "answer", "model": standin.spec("examinee"), "task": "T1", "problem": T1_PROBLEM},
            },
        ).json()
    assert "__error__" not in final and set(final) <= OUTPUTS["atad_eval"] and "correct" in final, final
    assert [r.model for r in standin.requests] == ["examinee"]


def test_a_human_interview_is_interrupted_and_resumed_to_its_end_through_the_api(standin_studio, tmp_path):
    """Studio's flow: the run stops at each question the person must answer (``interrupt``), and each answer
    sent as ``Command(resume=...)`` continues it from there, until the session's summary."""
    base, standin = standin_studio
    protocol = protocol_class(STUDIO_GRAPH)()
    run = open_run(
        protocol, RunConfig(protocol=STUDIO_GRAPH, out=str(tmp_path / "plan")), run_id=None, console=Console(quiet=True)
    )
    unit = protocol.plan(run)[0]
    context = {
        "target": standin.spec("target"),
        "evaluator": standin.spec("judge"),
        "interviewee": "human",
        "single_turn_judge": False,
        "max_retries": 1,
        "max_questions": 2,
    }
    answers = []
    with httpx.Client(base_url=base, timeout=120) as client:
        thread = client.post("/threads", json={}).json()["thread_id"]
        payload: dict = {"assistant_id": STUDIO_GRAPH, "input": unit.input, "context": context}
        for _ in range(10):
            client.post(f"/threads/{thread}/runs/wait", json=payload).raise_for_status()
            state = client.get(f"/threads/{thread}/state").json()
            asked = [i["value"] for task in state.get("tasks", []) for i in task.get("interrupts", [])]
            if not state["next"]:
                break
            assert asked and "question" in asked[0], state["tasks"]
            answers.append(f"my answer {len(answers)}")
            payload = {"assistant_id": STUDIO_GRAPH, "command": {"resume": answers[-1]}, "context": context}
        assert state["next"] == [], "the interview did not reach its end"
        assert client.get(f"/threads/{thread}").json()["status"] == "idle"
    given = [i["answer"] for i in state["values"]["interactions"]]
    assert given == answers and len(answers) >= 2  # every typed answer was graded, in order; a follow-up was asked
    assert "target" not in {r.model for r in standin.requests}, "a human interview asked the target model"


def test_langgraph_dev_lists_every_protocol_graph_and_runs_one_unit(langgraph_dev, tmp_path):
    with httpx.Client(base_url=langgraph_dev, timeout=60) as client:
        assistants = client.post("/assistants/search", json={"limit": 50}).json()
        graphs = {a["graph_id"] for a in assistants}
        assert graphs >= {"atad", "judgeagent", "interview", "llmeval"}
        assert set(json.loads((REPO / "langgraph.json").read_text())["graphs"]) == graphs

        assistant = next(a["assistant_id"] for a in assistants if a["graph_id"] == STUDIO_GRAPH)
        schemas = client.get(f"/assistants/{assistant}/schemas").json()
        assert "target" in json.dumps(schemas.get("context_schema") or schemas.get("config_schema"))

        protocol = protocol_class(STUDIO_GRAPH)()
        run = open_run(
            protocol,
            RunConfig(protocol=STUDIO_GRAPH, out=str(tmp_path / "plan")),
            run_id=None,
            console=Console(quiet=True),
        )
        unit = protocol.plan(run)[0]

        thread = client.post("/threads", json={}).json()["thread_id"]
        final = client.post(
            f"/threads/{thread}/runs/wait",
            timeout=600,
            json={
                "assistant_id": STUDIO_GRAPH,
                "input": unit.input,
                "context": {"target": "local", "evaluator": "local", "seed": 3},
            },
        ).json()
        assert "__error__" not in final, final
        state = client.get(f"/threads/{thread}/state").json()
        assert state["next"] == []
        assert state["values"], "the unit produced no state"
        assert client.get(f"/threads/{thread}").json()["status"] == "idle"
