"""Adaptive LLMEval sessions: calibration stored in the bank, and the IRT exam graph with fake models."""

from __future__ import annotations

import numpy as np
import pytest

from dyneval.nodes import irt
from dyneval.nodes.llmeval.calibration import calibrate_bank, load_params
from dyneval.stores.question_bank import Question, QuestionBank
from tests.fakes import ScriptedChat, all_text
from tests.test_llmeval_graph import ctx_for, run_session

N_ITEMS = 60


def synthetic_bank(path) -> tuple[QuestionBank, np.ndarray]:
    """60 questions 'Item k: is k even?' with known difficulties (b rises with k)."""
    bank = QuestionBank(path)
    b = np.linspace(-2, 2, N_ITEMS)
    bank.add_questions(
        [
            Question(
                uuid=f"q{k:03d}",
                discipline="Maths",
                sub_discipline="",
                qtype="short_answer",
                question=f"Item {k}: is {k} even?",
                answer="yes" if k % 2 == 0 else "no",
                explanation=f"secret-explanation-{k}",
            )
            for k in range(N_ITEMS)
        ]
    )
    return bank, b


def answer_as(bank: QuestionBank, model: str, theta: float, b: np.ndarray, rng, uuids=None, tag="") -> None:
    """A simulated model's judged session over ``uuids`` (default all): stars 3 if correct by the Rasch model."""
    sid = f"{model}{tag}"
    bank.create_session(sid, model=model, n=N_ITEMS, seed=sid)
    for it in bank.judged_items(sid):
        k = int(it["question_uuid"][1:])
        item = bank.next_item(sid)
        bank.submit(sid, item["position"], "answer")
        if uuids is not None and it["question_uuid"] not in uuids:
            bank.set_judgement(sid, it["position"], None, "judge failed", "ungraded")
            continue
        correct = rng.random() < irt.probability(theta, np.array([1.0]), b[k : k + 1])[0]
        bank.set_judgement(sid, it["position"], 3 if correct else int(rng.integers(0, 2)), "sim", "judged")


@pytest.fixture
def calibrated(tmp_path):
    bank, b = synthetic_bank(tmp_path / "bank.sqlite")
    rng = np.random.default_rng(0)
    for m, theta in enumerate(np.linspace(-2, 2, 25)):
        answer_as(bank, f"model-{m}", theta, b, rng)
    return bank, b


def test_calibration_is_stored_with_date_and_response_counts_and_tracks_the_true_difficulties(calibrated):
    bank, b = calibrated
    fit = calibrate_bank(bank, "1pl", min_responses=10)
    assert fit["refit"] and fit["items"] == N_ITEMS and fit["examinees"] == 25
    stored = bank.item_parameters("1pl")
    assert {p["n_responses"] for p in stored.values()} == {25}
    assert {p["fitted_at"] for p in stored.values()} == {fit["fitted_at"]}
    fitted = np.array([stored[f"q{k:03d}"]["b"] for k in range(N_ITEMS)])
    assert np.corrcoef(fitted, b)[0, 1] > 0.85
    # star means for the expected score: correct answers got 3 stars, wrong ones 0 or 1
    details = bank.last_calibration("1pl")["details"]
    assert details["stars_correct"] == 3.0 and 0 < details["stars_wrong"] < 1


def test_refit_is_skipped_without_new_responses_and_warm_started_after_new_ones(calibrated):
    bank, b = calibrated
    first = calibrate_bank(bank, "2pl", min_responses=10)
    again = calibrate_bank(bank, "2pl", min_responses=10)
    assert not again["refit"] and again["fitted_at"] == first["fitted_at"]
    answer_as(bank, "model-new", 0.5, b, np.random.default_rng(1))
    third = calibrate_bank(bank, "2pl", min_responses=10)
    assert third["refit"] and third["details"]["warm_start"] and third["examinees"] == 26
    assert {p["n_responses"] for p in bank.item_parameters("2pl").values()} == {26}


def test_items_with_too_few_responses_stay_uncalibrated_and_ungraded_answers_are_no_response(tmp_path):
    bank, b = synthetic_bank(tmp_path / "bank.sqlite")
    rng = np.random.default_rng(2)
    few = {f"q{k:03d}" for k in range(10)}  # the others are ungraded for half the models
    for m, theta in enumerate(np.linspace(-1, 1, 12)):
        answer_as(bank, f"m{m}", theta, b, rng, uuids=None if m < 6 else few)
    fit = calibrate_bank(bank, "1pl", min_responses=8)
    stored = bank.item_parameters("1pl")
    assert set(stored) == few and fit["items"] == 10
    assert {p["n_responses"] for p in stored.values()} == {12}


def judge_by_number(messages, tool):
    """A fake judge that reads the item number from the question: the target 'knows' items below 30."""
    text = all_text(messages)
    k = int(text.split("Item ")[1].split(":")[0])
    return {"rating": 3 if k < 30 else 0, "reason": "fake"}


def test_adaptive_session_asks_one_calibrated_unseen_question_at_a_time_and_reports_theta(calibrated, tmp_path):
    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    target = ScriptedChat(lambda m, t: "my answer")
    ctx = ctx_for(
        tmp_path,
        tmp_path / "bank.sqlite",
        {"target": target, "evaluator": ScriptedChat(judge_by_number)},
        adaptive=True,
        irt_model="1pl",
        target_se=0.05,
        max_items=12,
        exposure_k=1,
    )
    final = run_session(ctx, "adaptive-1", model="fresh-model")
    ids = bank.question_ids("adaptive-1")
    assert len(ids) == 12 == len(set(ids)) == len(target.calls)  # stopped at max_items, no repeat
    assert final["stopped"] == "max_items" and final["answered"] == 12
    for (messages, _), uid in zip(target.calls, ids):  # one question per call, in order
        text = all_text(messages)
        assert bank.get(uid).question in text and "secret-explanation" not in text
    scores = bank.session("adaptive-1")["scores"]
    assert "S" not in scores and scores["items"] == 12 and scores["stopped"] == "max_items"
    assert scores["expected_S_low"] < scores["expected_S"] < scores["expected_S_high"]
    assert 0 < scores["se"] < 1
    # the fake knows exactly the easier half (items 0-29, b < 0): its ability lands at that boundary, b = 0
    assert abs(scores["theta"]) < 0.5
    # maximum information with k = 1: the first item (at the prior's theta = 0) is a most informative one
    params = load_params(bank, "1pl")
    info = irt.information(0.0, params.a, params.b)
    assert info[params.index[ids[0]]] == pytest.approx(info.max())


def test_adaptive_session_stops_at_the_target_standard_error_and_never_repeats_a_met_question(calibrated, tmp_path):
    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    bank.create_session("partial-fixed", model="partial", n=30, seed="s")  # met 30 questions already
    met = set(bank.question_ids("partial-fixed"))

    def adaptive_run(session_id: str) -> tuple[dict, list[str]]:
        ctx = ctx_for(
            tmp_path,
            tmp_path / "bank.sqlite",
            {"target": ScriptedChat(lambda m, t: "x"), "evaluator": ScriptedChat(judge_by_number)},
            adaptive=True,
            irt_model="1pl",
            target_se=0.6,
            max_items=40,
        )
        final = run_session(ctx, session_id, model="partial")
        return final, bank.question_ids(session_id)

    final, first = adaptive_run("adaptive-2")
    assert final["stopped"] == "target_se" and final["se"] <= 0.6 and 0 < len(first) < 30
    assert len(first) == len(set(first)) and not met & set(first)
    _, second = adaptive_run("adaptive-3")
    assert second and not (met | set(first)) & set(second)  # none met in earlier sessions
    final, rest = None, []
    for k in range(4, 20):  # until the calibrated bank is used up
        final, rest = adaptive_run(f"adaptive-{k}")
        if final["stopped"] == "bank":
            break
    assert final["stopped"] == "bank"


def test_irt_ranking_has_intervals_that_cover_the_ranks_and_follows_the_true_abilities(calibrated):
    from scipy.stats import kendalltau

    from dyneval.protocols.llmeval.analyses import irt_ranking

    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    rows = irt_ranking(bank, "1pl")
    assert len(rows) == 25
    true = {f"model-{m}": t for m, t in enumerate(np.linspace(-2, 2, 25))}
    tau = kendalltau([true[r["model"]] for r in rows], [r["theta"] for r in rows]).statistic
    assert tau > 0.8
    for r in rows:
        assert r["theta_low"] < r["theta"] < r["theta_high"] and r["rank_best"] <= r["rank"] <= r["rank_worst"]
        assert r["expected_S_low"] < r["expected_S"] < r["expected_S_high"] and r["responses"] == 60
    # 60 questions do not separate 25 models: neighbours share ranks
    assert any(r["rank_worst"] - r["rank_best"] >= 2 for r in rows)


def test_paired_comparison_separates_distant_models_and_says_when_it_cannot_distinguish_close_ones(calibrated):
    from dyneval.protocols.llmeval.analyses import irt_ranking, paired_comparison

    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    far = paired_comparison(bank, "1pl", "model-24", "model-0")  # true difference 4 logits
    assert far["distinguishable"] and far["theta_diff_low"] > 0 and far["S_diff_low"] > 0
    se = {r["model"]: r["se"] for r in irt_ranking(bank, "1pl")}
    assert far["theta_diff_se"] ** 2 == pytest.approx(se["model-24"] ** 2 + se["model-0"] ** 2)
    near = paired_comparison(bank, "1pl", "model-13", "model-12")  # true difference 1/6 logit
    assert not near["distinguishable"] and near["theta_diff_low"] < 0 < near["theta_diff_high"]
    assert near["verdict"].startswith("cannot distinguish")


def test_calibrate_and_compare_from_the_command_line(calibrated, tmp_path):
    import subprocess

    from tests.test_llmeval_bank import CLI, REPO

    base = [
        *CLI,
        "--protocol",
        "llmeval",
        "--out",
        str(tmp_path / "out"),
        "--bank-db",
        str(tmp_path / "bank.sqlite"),
        "--irt-model",
        "1pl",
        "--min-responses",
        "10",
    ]
    run = subprocess.run(
        [*base, "--calibrate", "--compare", "model-13,model-12"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "60 calibrated questions from 1500 responses of 25 models" in run.stdout
    assert "cannot distinguish model-13 and model-12" in run.stdout
    bad = subprocess.run([*base, "--compare", "model-13"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--compare" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_concurrent_adaptive_sessions_of_one_model_never_share_a_question(calibrated, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from dyneval.nodes.llmeval.adaptive import adaptive_step

    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    sids = [f"conc-{i}" for i in range(4)]
    for sid in sids:  # the same seed: left alone, all four would choose the same questions
        bank.create_adaptive_session(
            sid,
            model="twin",
            paradigm="zero-shot",
            seed="same",
            irt_model="1pl",
            target_se=0.01,
            max_items=5,
            exposure_k=1,
        )

    def run(sid: str) -> None:
        for _ in range(5):
            adaptive_step(bank, sid)
            item = bank.next_item(sid)
            bank.submit(sid, item["position"], "x")
            bank.set_judgement(sid, item["position"], 3, "sim", "judged")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run, sids))
    asked = [u for sid in sids for u in bank.question_ids(sid)]
    assert len(asked) == 20 == len(set(asked))


def test_batch_adaptive_run_calibrates_on_earlier_sessions_and_reports_theta(tmp_path):
    import json
    import subprocess

    from tests.standin_endpoint import StandIn
    from tests.test_llmeval_bank import CLI, REPO

    standin = StandIn()
    out = tmp_path / "out"
    try:
        base = [*CLI, "--protocol", "llmeval", "--out", str(out), "--evaluator", standin.spec("judge")]
        refused = subprocess.run(
            [*base, "--target", standin.spec("m0"), "--adaptive"], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert refused.returncode == 2 and "--adaptive" in refused.stderr  # nothing calibrated yet
        for m in ("m1", "m2", "m3"):
            done = subprocess.run(
                [*base, "--target", standin.spec(m), "--questions", "36"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
        before = len(standin.ok_requests())
        run = subprocess.run(
            [
                *base,
                "--target",
                standin.spec("m4"),
                "--adaptive",
                "--max-items",
                "4",
                "--min-responses",
                "3",
                "--sessions",
                "2",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        assert "36 calibrated questions from 108 responses of 3 models" in " ".join(run.stdout.split())
        run_dir = max((out).glob("*-llmeval-*"), key=lambda p: p.stat().st_mtime)
        metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
        sessions = metrics["adaptive_sessions"]
        assert len(sessions) == 2 and metrics["adaptive_questions"] == 8 and metrics["sessions_without_score"] == 0
        assert all(s["stopped"] == "max_items" and s["se"] > 0 for s in sessions)
        # 2 sessions x 4 questions: one answer and one judgement each, plus the start-up pings
        assert len(standin.ok_requests()) - before <= 16 + 2
        assert "Adaptive (IRT) sessions" in (run_dir / "report.md").read_text()
    finally:
        standin.close()


def test_an_ungraded_answer_is_no_response_and_the_adaptive_session_goes_on(calibrated, tmp_path):
    bank, _ = calibrated
    calibrate_bank(bank, "1pl", min_responses=10)
    first_question: list[str] = []

    def flaky_judge(messages, tool):
        text = all_text(messages)
        k = text.split("Item ")[1].split(":")[0]
        first_question[:] = first_question or [k]
        if k == first_question[0]:
            return {"rating": 9, "reason": "out of range"}  # invalid, also after the repair
        return judge_by_number(messages, tool)

    ctx = ctx_for(
        tmp_path,
        tmp_path / "bank.sqlite",
        {"target": ScriptedChat(lambda m, t: "x"), "evaluator": ScriptedChat(flaky_judge)},
        adaptive=True,
        irt_model="1pl",
        target_se=0.01,
        max_items=6,
    )
    final = run_session(ctx, "flaky", model="flaky-model")
    rows = bank.judged_items("flaky")
    assert final["ungraded"] == 1 and final["stopped"] == "max_items" and len(rows) == 6
    assert rows[0]["judge_status"] == "ungraded" and rows[0]["stars"] is None
    scores = bank.session("flaky")["scores"]
    assert scores["irt_responses"] == 5 and scores["ungraded"] == 1  # counted, but not as a response
