"""JudgeAgent's adaptive base questions (issue 17): choice by information, ability -> first difficulty, the fit
from earlier run directories, resume, and the graph without a pool unchanged (nodes/judgeagent/adaptive.py,
protocols/judgeagent/irt.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dyneval.nodes import irt
from dyneval.nodes.judgeagent.adaptive import expected_average
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.state.judgeagent import DIFFICULTIES, BaseQuestion, DifficultyControl
from tests.fakes import last_text
from tests.test_judgeagent_support import FakeEvaluator, fake_services

#: Item parameters (a, b) of the hand-computed case; qU has none (uncalibrated).
ITEMS = {"qA": (1.0, 0.0), "qB": (2.0, 1.0), "qC": (1.0, -1.0), "qD": (0.5, 0.0), "qE": (1.5, -1.5)}
RIGHT = {"qB", "qC", "qE"}  # the simulated target answers these correctly, qA and qD wrong


def question(qid: str, difficulty: str | None = None) -> BaseQuestion:
    return BaseQuestion(
        id=qid,
        question=f"Which lock of the Voss Canal is called {qid}?",
        options=["Orden", "Harl", "Brenmark", "Spartina"],
        answer="B",
        difficulty=difficulty,
    )


POOL = [question(q) for q in ("qA", "qB", "qC", "qD", "qE", "qU")]


def target(messages: list, tool: Any) -> str:
    qid = next(q for q in (*ITEMS, "qU") if f"called {q}?" in last_text(messages))
    return "B" if qid in RIGHT else "A"


def run_pool(
    tmp_path: Path, checkpointer: Any = None, responder: Any = target, resume: bool = False, **params: Any
) -> tuple[dict[str, Any], Any]:
    """One thread over :data:`POOL` (``resume``: continue the checkpointed thread instead of starting it); the
    thread's whole state, as the runner reads it (``invoke`` returns the graph's output only)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from dyneval.graphs.judgeagent import builder
    from dyneval.state.judgeagent import JudgeAgentContext

    svc = fake_services(tmp_path, FakeEvaluator(), responder)
    ctx = JudgeAgentContext(services=svc, no_extension=True, no_validation=True, **params)
    graph = builder.compile(checkpointer=checkpointer or InMemorySaver())
    start = {"batch": [q.model_dump() for q in POOL], "irt": {k: list(v) for k, v in ITEMS.items()}}
    config = {"configurable": {"thread_id": "u1"}}
    graph.invoke(None if resume else start, config, context=ctx)
    return dict(graph.get_state(config).values), svc


def test_each_base_question_is_the_most_informative_at_the_ability_so_far(tmp_path):
    """Hand-computed first choice: at theta = 0 (the prior) I = a^2 P (1 - P) is qA 1/4, qB 4 s(-2) s(2) = 0.420,
    qC s(1) s(-1) = 0.197, qD 1/16, qE 2.25 s(2.25) s(-2.25) = 0.194: qB, not qA whose b equals theta.
    qB right moves theta to 1.00, where qA (0.197) beats qC (0.105); qA wrong brings theta to 0.625, where qC
    (0.138) beats qE (0.086) and qD (0.061)."""
    out, _ = run_pool(tmp_path, irt_items=3)
    assert out["ability"]["asked"] == ["qB", "qA", "qC"]
    trace = out["irt_trace"]
    assert [t["theta"] for t in trace[:3]] == pytest.approx([0.0, 1.0, 0.625], abs=0.005)
    a, b = (np.array([ITEMS[q][i] for q in ITEMS]) for i in (0, 1))
    for t in trace[:3]:  # the chosen one has the most information among those not asked before it
        info = dict(zip(ITEMS, irt.information(t["theta"], a, b)))
        before = out["ability"]["asked"][: t["step"]]
        assert t["chose"] == max((q for q in ITEMS if q not in before), key=info.get)
        assert t["information"] == pytest.approx(info[t["chose"]])
    assert "chose" not in trace[-1] and len(trace) == 4  # the fourth visit stops: irt_items reached
    assert [q["id"] for q in out["batch"]] == ["qB", "qA", "qC"]  # what extension / feedback / validation see
    assert out["score"] == 3.0 and out["answered"] == 3  # sc_B: two unlabeled right (c2 = 1.5)


def test_an_uncalibrated_question_is_never_asked_and_a_spent_pool_ends_grading(tmp_path):
    calls = []

    def counted(messages, tool):
        calls.append(last_text(messages))
        return target(messages, tool)

    out, _ = run_pool(tmp_path, responder=counted, irt_items=10)
    assert sorted(out["ability"]["asked"]) == sorted(ITEMS)  # all five calibrated ones, never qU
    assert out["ability"]["not_asked"] == 1 and out["ability"]["pool"] == 6
    assert len(calls) == 5 and not any("called qU?" in c for c in calls)


def test_first_difficulty_is_the_appendix_b_level_of_the_average_the_ability_predicts_on_the_pool():
    """Two items a = 1, b = 0, one easy (c1 = 1) and one hard (c3 = 2): sum = 3 P(theta), n = 2.
    P = 1/2 at 0: avg 0.75 -> medium; P = 3/4 at ln 3: 1.125 > t23 = 1 -> hard; P = 1/4 at -ln 3: 0.375 -> easy.
    Unlabeled: c2 = 1.5 times P."""
    control = DifficultyControl()
    items = {"e": [1.0, 0.0], "h": [1.0, 0.0]}
    qs = [question("e", "easy"), question("h", "hard")]
    for theta, avg, level in [(0.0, 0.75, "medium"), (math.log(3), 1.125, "hard"), (-math.log(3), 0.375, "easy")]:
        total, n = expected_average(control, theta, qs, items)
        assert (total / n, control.next_difficulty(total, n)) == (pytest.approx(avg), level)
    total, n = expected_average(control, math.log(3), [question("e"), question("h")], items)
    assert total / n == pytest.approx(1.5 * 0.75)


def test_the_ability_not_the_observed_average_decides_the_first_extension_level(tmp_path):
    """Asked qB, qA, qC with 2 of 3 right: the observed sc_B average 1.0 is medium; at the final theta the
    pool's predicted average (c2 times the mean P over the five calibrated questions) decides."""
    out, _ = run_pool(tmp_path, irt_items=3)
    ab = out["ability"]
    a, b = (np.array([ITEMS[q][i] for q in ITEMS]) for i in (0, 1))
    predicted = 1.5 * float(irt.probability(ab["theta"], a, b).mean())
    assert ab["observed_avg"] == pytest.approx(1.0)
    assert ab["expected_avg"] == pytest.approx(predicted)
    assert ab["first_difficulty"] == DifficultyControl().next_difficulty(predicted, 1) == out["difficulty"]
    assert ab["first_difficulty"] != DifficultyControl().next_difficulty(3.0, 3)  # the observed would differ
    low, high = (DIFFICULTIES.index(d) for d in ab["difficulty_interval"])  # the levels at theta -/+ 1.96 SE
    assert low <= DIFFICULTIES.index(ab["first_difficulty"]) <= high and low < high  # SE 0.70: not one level


def test_resume_after_a_failed_target_call_neither_repeats_nor_loses_an_answer(tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    saver, calls = InMemorySaver(), []

    def flaky(messages, tool):
        qid = next(q for q in ITEMS if f"called {q}?" in last_text(messages))
        calls.append(qid)
        if len(calls) == 2:
            raise KeyboardInterrupt  # a kill during the second question
        return target(messages, tool)

    with pytest.raises(KeyboardInterrupt):
        run_pool(tmp_path, saver, flaky, irt_items=3)
    out, _ = run_pool(tmp_path, saver, flaky, resume=True, irt_items=3)
    assert out["ability"]["asked"] == ["qB", "qA", "qC"]  # the same choices as an uninterrupted run
    assert calls == ["qB", "qA", "qA", "qC"]  # qB answered once; only the interrupted qA asked again


def test_without_item_parameters_grading_takes_the_whole_batch_and_records_nothing_adaptive(tmp_path):
    from dyneval.protocols.judgeagent import JudgeAgentProtocol
    from dyneval.runtime.protocol import Unit
    from tests.test_judgeagent_support import run_batch, write_kb

    svc = fake_services(tmp_path, FakeEvaluator(), target)
    out = run_batch(svc, POOL[:3], write_kb(tmp_path / "kb"), no_extension=True, no_validation=True, irt_items=1)
    assert [b["id"] for b in out["base"]] == ["qA", "qB", "qC"]
    assert not {"pick", "irt_trace", "ability", "irt"} & set(out)
    assert "adaptive" not in JudgeAgentProtocol().result(Unit("u", {}), out)


# -- the fit from earlier run directories -------------------------------------------------------------------


def write_run(folder: Path, target_spec: str, questions: list[BaseQuestion], verdicts: dict[str, str]) -> Path:
    """A finished judgeagent run directory in the real format: config.json, units.jsonl (one batch) and
    results.jsonl whose base answers carry ``verdicts`` (question id -> correct | wrong | ungraded)."""
    folder.mkdir(parents=True)
    config = RunConfig(protocol="judgeagent", roles={"target": target_spec, "evaluator": "ev@http://127.0.0.1:9/v1"})
    (folder / "config.json").write_text(json.dumps(config.masked()), encoding="utf-8")
    unit = {
        "id": "batch-0001",
        "input": {"batch": [q.model_dump() for q in questions]},
        "meta": {"questions": [q.id for q in questions], "source": "test"},
    }
    (folder / "units.jsonl").write_text(json.dumps(unit) + "\n", encoding="utf-8")
    base = [
        {
            "id": q,
            "difficulty": None,
            "reply": "x",
            "gain": 1.5 if v == "correct" else 0.0,
            "verdict": v,
            "correct": v == "correct" if v != "ungraded" else None,
            "how": "evaluator",
        }
        for q, v in verdicts.items()
    ]
    record = {"unit_id": "batch-0001", "status": "ok", "base": base}
    (folder / "results.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    return folder


def fake_run(tmp_path: Path, target_spec: str, **params: Any) -> Any:
    config = RunConfig(protocol="judgeagent", roles={"target": target_spec}, params=params)
    run_dir = tmp_path / "current"
    run_dir.mkdir(exist_ok=True)
    return SimpleNamespace(config=config, params=config.params, run_dir=run_dir)


def test_responses_keep_each_models_latest_graded_answer_and_leave_out_ungraded_and_the_current_target(tmp_path):
    from dyneval.protocols.judgeagent.irt import responses, run_dirs

    qs = POOL[:3]
    m1, m2, me = "m1@http://127.0.0.1:9/v1", "m2@http://127.0.0.1:9/v1", "me@http://127.0.0.1:9/v1"
    write_run(
        tmp_path / "runs" / "20260101-000000-judgeagent-aaaa", m1, qs, {"qA": "correct", "qB": "wrong", "qC": "correct"}
    )
    write_run(
        tmp_path / "runs" / "20260102-000000-judgeagent-bbbb", m1, qs, {"qA": "wrong", "qB": "ungraded"}
    )  # later: qA now wrong; qB ungraded keeps the earlier answer
    write_run(tmp_path / "runs" / "20260103-000000-judgeagent-cccc", m2, qs, {"qA": "ungraded", "qC": "wrong"})
    write_run(tmp_path / "runs" / "20260104-000000-judgeagent-dddd", me, qs, {"qA": "correct"})
    dirs = run_dirs(str(tmp_path / "runs" / "*"), tmp_path / "current")
    exclude = json.dumps(
        RunConfig(protocol="judgeagent", roles={"target": me}).spec_for("target").answer_identity(), sort_keys=True
    )
    latest, used, labels = responses(dirs, {q.id: q for q in qs}, exclude)
    named = {(labels[k], q): y for (k, q), y in latest.items()}
    assert named == {(m1, "qA"): 0, (m1, "qB"): 0, (m1, "qC"): 1, (m2, "qC"): 0}
    assert [u["responses"] for u in used] == [3, 1, 1, 0] and used[3]["left_out"] == "the current target"


@pytest.mark.parametrize("model", ["2pl", "1pl"])
def test_calibration_fits_only_questions_with_enough_responses(tmp_path, model):
    from dyneval.protocols.judgeagent.irt import calibrate_runs

    qs = POOL[:3]
    for i in range(6):  # six targets: qA and qB answered by all (ability ordered), qC by two
        verdicts = {"qA": "correct" if i >= 2 else "wrong", "qB": "correct" if i >= 4 else "wrong"}
        if i < 2:
            verdicts["qC"] = "correct"
        write_run(tmp_path / "runs" / f"2026010{i}-000000-judgeagent-x{i}", f"m{i}@http://127.0.0.1:9/v1", qs, verdicts)
    run = fake_run(tmp_path, "me@http://127.0.0.1:9/v1", irt_runs=str(tmp_path / "runs" / "*"))
    fit = calibrate_runs(run, qs, model, 5)
    assert (fit["calibrated"], fit["uncalibrated"], fit["responses"]) == (2, 1, 12)
    assert set(fit["items"]) == {"qA", "qB"} and fit["items"]["qA"]["n"] == 6
    assert fit["items"]["qB"]["b"] > fit["items"]["qA"]["b"]  # fewer targets right: the harder question
    if model == "1pl":
        assert fit["items"]["qA"]["a"] == fit["items"]["qB"]["a"] == 1.0


def test_runs_on_another_benchmark_missing_directories_and_other_protocols_are_refused(tmp_path):
    from dyneval.protocols.judgeagent.irt import calibrate_runs

    qs = POOL[:3]
    other = [BaseQuestion(id="qA", question="Something else entirely?", answer="yes")]
    write_run(tmp_path / "a", "m1@http://127.0.0.1:9/v1", other, {"qA": "correct"})
    write_run(tmp_path / "b", "m1@http://127.0.0.1:9/v1", [question("zz")], {"zz": "correct"})
    for spec, needle in [
        (tmp_path / "a", "its question 'qA' differs in question, answer, options"),
        (tmp_path / "b", "none of its questions is in this one"),
        (tmp_path / "nope", "no such run directory"),
        (tmp_path / "x*", "matches no run directory"),
    ]:
        with pytest.raises(InputError) as err:
            calibrate_runs(fake_run(tmp_path, "me@http://127.0.0.1:9/v1", irt_runs=str(spec)), qs, "2pl", 5)
        assert needle in str(err.value) and err.value.field == "--irt-runs"
