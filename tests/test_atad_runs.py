"""ATAD through the batch runner with fake models: calibration, kill-and-resume, benchmark file,
summary cost per finalized problem, and the evaluation phase (Tables 1, 2, 3, 5; Figure 4)."""

from __future__ import annotations

import io
import itertools
import json
import threading

import httpx
import openai
import pytest
from rich.console import Console

from dyneval.protocols.atad import AtadProtocol
from dyneval.protocols.atad.benchmark import load_benchmark
from dyneval.runtime.llm import current_unit
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import ModelSpec, RunConfig
from dyneval.state.errors import InputError
from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text
from tests.test_atad_support import World, orchestrator_chat, run_graph, student_chat, teacher_chat, unit_input


def _open(tmp_path, chats, params, run_id=None, models=None):
    config = RunConfig(protocol="atad", out=str(tmp_path), params=params, concurrency=4, models=models or {})
    return open_run(
        AtadProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )


def _generate(tmp_path, world, params, student_p=0.5, orchestrator=None):
    chats = {
        "teacher": teacher_chat(world),
        "orchestrator": orchestrator or orchestrator_chat(),
        "student": student_chat(world, student_p),
    }
    run = _open(tmp_path, chats, params)
    summary = execute(AtadProtocol(), run, skip_preflight=True)
    return run, summary


@pytest.mark.parametrize("n_units", [40])
def test_calibration_stronger_students_reach_higher_difficulty_with_more_loops(tmp_path, n_units):
    """A student solving with probability p: mean level and loops grow with p (0.2 < 0.5 < 0.9)."""
    stats = {}
    for p in (0.2, 0.5, 0.9):
        world = World(seed=1)
        svc = make_services(
            tmp_path / f"p{p}",
            protocol="atad",
            chats={
                "teacher": teacher_chat(world),
                "orchestrator": orchestrator_chat(),
                "student": student_chat(world, p, seed=7),
            },
        )
        levels, loops = [], []
        for i in range(n_units):
            out = run_graph(svc, unit_input("T1"), thread=f"u{i}")
            assert out["status"] == "finalized"
            levels.append(out["current_level"])
            loops.append(out["student_loops"])
        stats[p] = (sum(levels) / n_units, sum(loops) / n_units)
    assert stats[0.2][0] < stats[0.5][0] < stats[0.9][0], stats
    assert stats[0.2][1] < stats[0.5][1] < stats[0.9][1], stats


def test_generation_writes_benchmark_with_metadata_and_cost_per_finalized_problem(tmp_path):
    world = World()
    run, summary = _generate(tmp_path, world, {"per_task": 2, "tasks": "T1,T2,T3,T4,T5,T6,T7"})
    items = load_benchmark(run.run_dir / "benchmark.jsonl")
    assert len(items) == 14 and len({i["id"] for i in items}) == 14
    assert sorted({i["task"] for i in items}) == ["T1", "T2", "T3", "T4", "T5", "T6", "T7"]
    for item in items:
        assert item["item_status"] == "finalized"
        assert item["acceptance"] in {"student_failed", "student_loop_cap", "escalation_rejected"}
        assert item["problem"] and item["base_problem"] and item["difficulty"] and item["validations"]
        assert item["generator"]["teacher"] == "fake:teacher" and item["orchestrator"] is True
    t2 = [i for i in items if i["task"] == "T2"]
    assert all(isinstance(i["answer"], bool) for i in t2)
    per = summary["metrics"]["per_finalized"]
    assert per["llm_calls"] > 0 and per["wall_s"] > 0
    saved = json.loads((run.run_dir / "summary.json").read_text())
    assert saved["metrics"]["per_finalized"]["llm_calls"] == per["llm_calls"]
    assert "Acceptance status" in (run.run_dir / "report.md").read_text()


def test_unit_failing_mid_run_resumes_from_its_checkpoint_without_duplicates(tmp_path):
    """An endpoint fault at the student step of one unit: recorded as infra_error, then --resume finishes it
    from its checkpoint (no new base problem is generated) and the benchmark has every unit exactly once."""
    world = World()
    broken = {"on": True}
    student_calls: dict[str, int] = {}
    lock = threading.Lock()
    inner = student_chat(world, 0.0)

    def student(messages, tool):
        unit = current_unit()
        with lock:
            student_calls[unit] = student_calls.get(unit, 0) + 1
        if broken["on"] and unit == "T3-0001":
            return openai.APIConnectionError(request=httpx.Request("POST", "http://fake"))
        return inner.responder(messages, tool)

    teacher = teacher_chat(world)
    chats = {"teacher": teacher, "orchestrator": orchestrator_chat(), "student": ScriptedChat(student)}
    params = {"per_task": 2, "tasks": "T1,T3"}
    run = _open(tmp_path, chats, params)
    execute(AtadProtocol(), run, skip_preflight=True)
    first = [json.loads(x) for x in (run.run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["unit_id"]: r["status"] for r in first}["T3-0001"] == "infra_error"
    assert sum(1 for r in first if r["status"] == "ok") == 3
    teacher_before = len(teacher.calls)

    broken["on"] = False
    resumed = _open(tmp_path, chats, params, run_id=run.run_dir.name)
    summary = execute(AtadProtocol(), resumed, skip_preflight=True)
    assert len(teacher.calls) == teacher_before  # continued from the checkpoint after validation
    assert summary["status_counts"] == {"ok": 4}
    items = [json.loads(x) for x in (run.run_dir / "benchmark.jsonl").read_text().splitlines()]
    assert sorted(i["id"] for i in items) == ["T1-0000", "T1-0001", "T3-0000", "T3-0001"]
    # finished units were not redone
    assert all(n == 1 for u, n in student_calls.items() if u != "T3-0001")


def test_plan_seeds_topics_and_challenge_factors_and_refuses_bad_flags(tmp_path):
    proto = AtadProtocol()
    run = _open(tmp_path, {}, {"per_task": 40, "tasks": "t1"})
    units = proto.plan(run)
    assert len(units) == 40 and all(u.input["topic"] in {"philosophy", "society", "psychology"} for u in units)
    with_factor = sum(1 for u in units if u.input["challenge"])
    assert 10 < with_factor < 30  # probability 0.5
    assert [u.input for u in proto.plan(run)] == [u.input for u in units]  # reproducible
    for bad in ({"tasks": "T9"}, {"per_task": 0}, {"difficulty_ladder": "hard:1"}, {"challenge_prob": 2}):
        with pytest.raises(InputError):
            proto.plan(_open(tmp_path, {}, bad))


def test_evaluation_phase_tables_for_two_generators_and_two_models(tmp_path):
    world = World()
    gen_a, _ = _generate(tmp_path / "a", world, {"per_task": 3, "tasks": "T1,T2"}, student_p=0.9)
    gen_b, _ = _generate(
        tmp_path / "b", world, {"per_task": 3, "tasks": "T1,T2", "no_orchestrator": True}, student_p=0.9
    )
    files = [str(gen_a.run_dir / "benchmark.jsonl"), str(gen_b.run_dir / "benchmark.jsonl")]

    def solver(right):
        def respond(messages, tool):
            if tool["function"]["name"] == "Review":
                return {"validity": 5, "coherence": 4, "fairness": 9, "approved": right}
            gold = world.gold_in(messages)
            if isinstance(gold, bool):
                return {"coherent": gold if right else not gold, "explanation": "x"}
            return {"answer": gold if right else gold % 5 + 1, "explanation": "x"}

        return ScriptedChat(respond)

    models = {
        "good": ModelSpec(model="g", base_url="http://127.0.0.1:9/v1"),
        "bad": ModelSpec(model="b", base_url="http://127.0.0.1:9/v1"),
    }
    chats = {"good": solver(True), "bad": solver(False)}
    params = {"evaluate": ["good", "bad"], "benchmark": files, "review": ["good"]}
    run = _open(tmp_path / "eval", chats, params, models=models)
    execute(AtadProtocol(), run)
    m = json.loads((run.run_dir / "summary.json").read_text())["metrics"]
    assert m["table1"]["good"]["avg"] == 100.0 and m["table1"]["bad"]["avg"] == 0.0
    assert m["table1"]["good"]["T1"] == 100.0 and "T3" not in m["table1"]["good"]
    assert len(m["benchmarks"]) == 2 and any("no orch." in b for b in m["benchmarks"])
    for label in m["benchmarks"]:
        assert m["table5"][label]["good"]["avg"] == 100.0
        assert m["table2"]["bad"][label] == {"base": 0.0, "final": 0.0, "n": 6}
    rev = m["table3"]["reviews"]["good"]
    assert rev["with"]["fairness"] == 5.0 and rev["with"]["approval"] == 100.0 and "without" in rev
    assert m["table3"]["performance"]["bad"] == {"with": 0.0, "without": 0.0}
    curve = m["consistency"]["good"][m["benchmarks"][0]]
    assert curve[-1]["n"] == 3 and curve[-1]["std"] == 0.0
    # base problems that differ from the final ones were asked separately, identical ones were not
    units = [json.loads(x) for x in (run.run_dir / "units.jsonl").read_text().splitlines()]
    items = load_benchmark(files[0]) + load_benchmark(files[1])
    differing = sum(1 for i in items if i["base_problem"] != i["problem"])
    assert len(units) == 2 * (12 + differing) + 12
    calls_before = len(chats["good"].calls)
    resumed = _open(tmp_path / "eval", chats, params, run_id=run.run_dir.name, models=models)
    execute(AtadProtocol(), resumed)
    assert len(chats["good"].calls) == calls_before  # a resumed evaluation redoes nothing
    assert "Table 5" in (run.run_dir / "report.md").read_text()


def test_bad_benchmark_file_is_one_clear_input_error(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text(
        '{"id": "a", "task": "T1", "item_status": "finalized", '
        '"problem": {"sentences": ["x"], "answer": 1}, "base_problem": {"sentences": ["x"], "answer": 1}}\n'
    )
    run = _open(tmp_path, {}, {"evaluate": ["local"], "benchmark": [str(path)]})
    with pytest.raises(InputError, match=r"record 1, field 'problem': malformed problem: sentence_count"):
        execute(AtadProtocol(), run)


def test_evaluation_without_a_benchmark_answers_the_shipped_hand_written_sample():
    from dyneval.protocols.atad.evaluation import SAMPLE_BENCHMARK, plan_units

    units = plan_units({"evaluate": ["local"]})
    assert {u.meta["bench_file"] for u in units} == {"samples/atad/benchmark.jsonl"}  # never a site-packages path
    assert SAMPLE_BENCHMARK.is_file()
    assert len({u.meta["item"] for u in units}) == 7 and {u.meta["task"] for u in units} == {
        f"T{i}" for i in range(1, 8)
    }


def test_benchmark_without_finalized_items_is_an_input_error_not_an_empty_table(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text('{"id": "a", "task": "T1", "item_status": "discarded", "discard_reason": "x"}\n')
    run = _open(tmp_path, {}, {"evaluate": ["local"], "benchmark": [str(path)]})
    with pytest.raises(InputError, match="bench.jsonl.*no finalized item"):
        execute(AtadProtocol(), run)


def _repeating_teacher(world: World) -> ScriptedChat:
    """A stand-in teacher that repeats itself: every call writes its task's first problem again, every other call
    with extra spaces and upper case in all but the first option (which the fake student recognizes it by)."""
    first: dict[str, dict] = {}
    calls = itertools.count()

    def respond(messages, tool):
        name = tool["function"]["name"]
        problem = dict(first.setdefault(name, world.problem(name, messages)))
        if next(calls) % 2:
            key = "sentences" if "sentences" in problem else "choices"
            problem[key] = problem[key][:1] + [f"  {s.upper().replace(' ', '   ')} " for s in problem[key][1:]]
        return problem

    return ScriptedChat(respond)


def test_generation_keeps_no_two_identical_problems_from_a_teacher_that_repeats_itself(tmp_path):
    world = World()
    chats = {
        "teacher": _repeating_teacher(world),
        "orchestrator": orchestrator_chat(),
        "student": student_chat(world, 0.0),
    }
    run = _open(tmp_path, chats, {"per_task": 4, "tasks": "T1,T3"})
    summary = execute(AtadProtocol(), run, skip_preflight=True)
    items = load_benchmark(run.run_dir / "benchmark.jsonl")
    kept = [i for i in items if i["item_status"] == "finalized"]
    assert [i["id"] for i in kept] == ["T1-0000", "T3-0000"]
    refused = {i["id"]: i["duplicate_of"] for i in items if i.get("duplicate_of")}
    assert refused == {f"{t}-{k:04d}": f"{t}-0000" for t in ("T1", "T3") for k in (1, 2, 3)}
    assert all(i["item_status"] == "discarded" and i["problem"] is None for i in items if i["id"] in refused)
    m = summary["metrics"]
    assert m["duplicates_refused"] == 6 and m["finalized"] == 2 and m["discarded"] == 6
    assert "6 of them refused as copies" in (run.run_dir / "report.md").read_text()


def test_a_benchmark_with_one_problem_under_two_ids_warns_once_and_evaluates_it_once(tmp_path):
    problem = {"sentences": [f"Sentence {i} about the topic." for i in range(5)], "answer": 2}
    copy = {**problem, "sentences": [s.upper().replace(" ", "  ") for s in problem["sentences"]]}
    other = {"sentences": [f"Another {i} line here." for i in range(5)], "answer": 4}
    path = tmp_path / "bench.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": i, "task": "T1", "item_status": "finalized", "problem": p, "base_problem": p}) + "\n"
            for i, p in (("a", problem), ("b", copy), ("c", other))
        )
    )
    out = io.StringIO()
    config = RunConfig(
        protocol="atad",
        out=str(tmp_path / "runs"),
        params={"evaluate": ["good"], "benchmark": [str(path)]},
        models={"good": ModelSpec(model="g", base_url="http://127.0.0.1:9/v1")},
    )
    gold = {"SENTENCE": 2, "Sentence": 2, "Another": 4}
    solver = ScriptedChat(
        lambda messages, tool: {
            "answer": next(v for k, v in gold.items() if k in all_text(messages)),
            "explanation": "x",
        }
    )
    run = open_run(
        AtadProtocol(),
        config,
        run_id=None,
        console=Console(file=out, width=400),
        chat_overrides={"good": solver},
        retry_sleep=lambda s: None,
    )
    execute(AtadProtocol(), run)
    assert out.getvalue().count("repeat an earlier problem") == 1
    assert "1 problem(s) of --benchmark" in out.getvalue() and "b = a" in out.getvalue()
    units = [json.loads(x) for x in (run.run_dir / "units.jsonl").read_text().splitlines()]
    assert sorted(u["meta"]["item"] for u in units) == ["a", "c"]
    assert next(u for u in units if u["meta"]["item"] == "a")["meta"]["copies"] == ["b"]
    assert len(solver.calls) == 2
