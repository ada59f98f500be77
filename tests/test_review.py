"""The review page's parts without a browser: the sample and its order, the suggested size, the label files, the
agreement between reviewers (against hand computations), the judged items of each protocol's run, the server's
guards and the command line (bad input refused before anything is written; the page served until Ctrl-C)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dyneval import cli
from dyneval.results.review.items import Item, judged_items
from dyneval.results.review.labels import Labels, agreement, kappa, label_file, read_labels
from dyneval.results.review.sample import review_order, suggested_size
from dyneval.results.review.server import create_app
from dyneval.runtime.executors.ray_address import is_loopback
from dyneval.state.errors import InputError
from dyneval.state.judgecheck import SCALES
from dyneval.stores.rundir import JUDGED, RunDir
from tests import standin_runs
from tests.golden_runs import REPO
from tests.review_served import review_of


def _items(verdicts: dict[str, int]) -> list[Item]:
    return [
        Item(key=f"{v}{k}", unit=f"u{k}", judge="judgeagent.judge", question=f"q{v}{k}", verdict=v)
        for v, n in verdicts.items()
        for k in range(n)
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("runs")
    return {name: standin_runs.run(name, folder) for name in ("interview", "judgeagent", "judgecheck_pairwise")}


def test_suggested_size_is_cochrans_sample_for_agreement_within_ten_points_with_the_finite_population_correction():
    # n0 = 1.96^2 * 0.25 / 0.1^2 = 96.04; n = n0 / (1 + (n0 - 1) / N), rounded up (by hand)
    assert suggested_size(300) == 73  # 96.04 / 1.3168 = 72.93
    assert suggested_size(18) == 16  # 96.04 / 6.28 = 15.29
    assert suggested_size(100_000) == 96  # 96.04 / 1.00095 = 95.95
    assert suggested_size(1) == 1


def test_every_prefix_of_the_review_order_holds_each_verdict_in_its_share_of_the_run():
    items = _items({"correct": 200, "wrong": 100})
    order = review_order(items, "run-a")
    assert sorted(i.key for i in order) == sorted(i.key for i in items)
    for n in range(1, len(order) + 1):
        wrong = sum(i.verdict == "wrong" for i in order[:n])
        assert abs(wrong - n / 3) <= 1, (n, wrong)
    assert [i.key for i in review_order(list(reversed(items)), "run-a")] == [i.key for i in order]  # stable
    assert [i.key for i in review_order(items, "run-b")] != [i.key for i in order]  # random per run
    assert Counter(i.verdict for i in order[:60]) == {"correct": 40, "wrong": 20}


def test_cohens_kappa_between_two_reviewers_matches_a_hand_computation(tmp_path):
    first = ["correct"] * 6 + ["wrong"] * 4
    second = ["correct"] * 4 + ["wrong"] * 5 + ["correct"]
    items = _items({"correct": 10})
    for name, labels in (("ann", first), ("bob", second)):
        book = Labels(tmp_path, name)
        for item, label in zip(items, labels, strict=True):
            book.add(item, label)
    result = agreement(tmp_path, "judgeagent.judge", [i.key for i in items])
    # observed 7/10; by chance 0.6 * 0.5 + 0.4 * 0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    assert result.reviewers == ("ann", "bob") and result.items == 10 and result.statistic == "Cohen's kappa"
    assert result.observed == pytest.approx(0.7) and result.kappa == pytest.approx(0.4)
    assert "Cohen's kappa 0.400" in result.line()


def test_fleiss_kappa_between_three_reviewers_matches_a_hand_computation():
    table = [["c", "c", "c"], ["c", "c", "w"], ["w", "w", "w"], ["c", "w", "w"]]
    # P_i = (sum n_ij^2 - 3) / 6: 1, 1/3, 1, 1/3 -> mean 2/3; p_c = p_w = 1/2 -> P_e = 1/2; (2/3 - 1/2) / (1/2) = 1/3
    assert kappa(table, None) == pytest.approx(1 / 3)
    assert kappa([["c", "c"], ["c", "c"]], None) is None  # one label throughout: 0/0, said, not a number


def test_a_torn_last_line_is_no_label_and_a_damaged_line_before_it_is_refused(tmp_path):
    path = tmp_path / "ann.jsonl"
    path.write_text('{"id": "a", "label": "correct"}\n{"id": "b", "lab', encoding="utf-8")
    assert read_labels(path) == {"a": "correct"}
    path.write_text('not json\n{"id": "a", "label": "correct"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="not a label line") as caught:
        read_labels(path)
    assert caught.value.record == 1


def test_each_protocols_judged_items_are_the_answers_its_judge_decided_on_its_scale(runs):
    for name, judge in (
        ("interview", "interview.grader"),
        ("judgeagent", "judgeagent.judge"),
        ("judgecheck_pairwise", "pairwise"),
    ):
        judged = judged_items(RunDir(runs[name]))
        assert judged.judge == judge and judged.items, name
        assert len({i.key for i in judged.items}) == len(judged.items), name
        assert {i.verdict for i in judged.items} <= set(SCALES[judge]), name
        assert all(i.question for i in judged.items), name
    records = standin_runs.records(runs["judgeagent"])
    judged_answers = {a["reply"] for r in records for a in [*r["base"], *r["rounds"]] if a.get("how") == "evaluator"}
    assert {i.response for i in judged_items(RunDir(runs["judgeagent"])).items} == judged_answers
    pair = judged_items(RunDir(runs["judgecheck_pairwise"])).items[0]
    assert pair.output_1 and pair.output_2 and not pair.response


def _cli(*argv: str) -> tuple[int, str]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(list(argv))
    return code, err.getvalue()


def test_bad_review_options_are_refused_with_exit_2_before_anything_is_written(runs, tmp_path):
    run = str(runs["interview"])
    for argv, said in (
        (["--sample", "0"], "--sample"),
        (["--sample", "100000"], "--sample"),
        (["--sample", "many"], "--sample"),
        (["--reviewer", "../ann"], "--reviewer"),
        (["--colour", "red"], "unrecognized"),
        (["--index", "runs"], "not --index"),
    ):
        code, err = _cli("--review", run, *argv)
        assert code == 2 and said in err, (argv, err)
    code, err = _cli("--review", str(tmp_path / "nothing"))
    assert code == 2 and "no finished run" in err
    assert not (runs["interview"] / "review").exists()


def test_an_llmeval_run_is_reviewed_from_its_folder_alone_and_an_older_one_is_refused(tmp_path):
    """LLMEval-3 keeps answers and stars in its question bank (a database); the run copies every session's judged
    answers (and its reference replay's) into judged_answers.jsonl, so the review needs the run folder only."""
    run = standin_runs.run("llmeval", tmp_path)
    assert (run / JUDGED).stat().st_mode & 0o777 == 0o600  # the bank's questions and answers: the owner's only
    shutil.rmtree(run.parent / "_cache")  # the question bank is gone
    judged = judged_items(RunDir(run))
    metrics = standin_runs.summary(run)["metrics"]
    references = sum(1 for i in judged.items if "#ref." in i.key)
    assert judged.judge == "llmeval.judge" and references
    assert len(judged.items) - references == metrics["answers_scored"]  # every scored answer of the sessions
    assert {i.verdict for i in judged.items} <= set(SCALES["llmeval.judge"])
    assert all(i.question and i.reference and i.response for i in judged.items)
    stars = {r["unit_id"]: r["stars"] for r in standin_runs.records(run)}
    for unit, counts in stars.items():
        shown = Counter(i.verdict for i in judged.items if i.unit == unit and "#ref." not in i.key)
        assert {k: v for k, v in counts.items() if v} == dict(shown)  # the record's star counts
    (run / JUDGED).unlink()  # a run made before runs kept them
    code, err = _cli("--review", str(run))
    assert code == 2 and "question bank" in err and JUDGED in err


def test_a_decision_must_be_on_the_judges_scale_for_the_next_item_and_a_token_guards_a_non_loopback_page(runs):
    review = review_of(runs["judgecheck_pairwise"], "--reviewer", "guard")
    client = TestClient(create_app(review))
    shown = client.get("/api/state").json()
    assert [c["value"] for c in shown["choices"]] == ["1", "2", "tie"]
    key = shown["item"]["key"]
    assert client.post("/api/label", json={"key": key, "label": "correct"}).status_code == 422
    assert client.post("/api/label", json={"key": "other", "label": "1"}).status_code == 409
    answer = client.post("/api/label", json={"key": key, "label": "tie"}).json()
    assert answer["verdict"] in SCALES["pairwise"]
    assert client.post("/api/label", json={"key": key, "label": "tie"}).status_code == 409  # once per reviewer
    assert read_labels(label_file(runs["judgecheck_pairwise"], "guard")) == {key: "tie"}
    review.token = "s3cret"
    assert client.get("/api/state").status_code == 403 and client.get("/").status_code == 403
    assert client.get("/api/state?token=wrong").status_code == 403
    assert client.get("/api/state?token=s3cret").status_code == 200
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")


def test_the_command_serves_the_page_until_ctrl_c_and_prints_the_suggestion_and_the_agreement(runs):
    run = runs["interview"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")} | {"COLUMNS": "400"}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), "--review", str(run), "--reviewer", "cli", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True)
    reader.start()
    seen = []
    while not seen or "review page for cli: " not in seen[-1]:
        seen.append(lines.get(timeout=120))
    url = seen[-1].split("review page for cli: ")[1].split()[0]
    population = len(judged_items(RunDir(run)).items)
    assert any(f"suggested sample: {suggested_size(population)} " in line for line in seen), seen
    state = json.loads(_get(url + "api/state"))
    assert state["total"] == suggested_size(population) and "verdict" not in state["item"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0
    reader.join(timeout=60)
    rest = "".join(lines.queue)
    assert "agreement between reviewers" in rest, rest


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()
