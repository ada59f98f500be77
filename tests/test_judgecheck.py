"""The judge check in the batch runner with fake judges: the protocols' real judging steps and prompts, position
bias, ungraded verdicts (counted, re-judged on resume), a jury with split votes, cost, the report, bad input."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from dyneval.cli import main
from dyneval.protocols.judgecheck import JudgeCheckProtocol
from dyneval.protocols.judgecheck.data import load_items
from dyneval.runtime.runner import execute, open_run
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat, all_text

JURY = [f"judge-{x}@http://127.0.0.1:9/v1" for x in "abc"]


def _execute(tmp_path, params, chats, run_id=None):
    config = RunConfig(
        protocol="judgecheck", out=str(tmp_path / "runs"), params={"bootstrap_resamples": 100, **params}, concurrency=2
    )
    run = open_run(
        JudgeCheckProtocol(),
        config,
        run_id=run_id,
        console=Console(quiet=True),
        chat_overrides=chats,
        retry_sleep=lambda s: None,
    )
    return run, execute(JudgeCheckProtocol(), run, skip_preflight=True)


def _records(run):
    return [json.loads(line) for line in (run.run_dir / "results.jsonl").read_text().splitlines()]


def always_first(messages, tool):
    return {"winner": "A", "reason": "the first one"} if tool else "pong"


def test_a_judge_that_always_picks_the_first_output_is_caught_by_the_swap(tmp_path):
    run, summary = _execute(tmp_path, {"judge": "pairwise"}, {"evaluator": ScriptedChat(always_first)})
    m = summary["metrics"]["raters"]["m0"]["measures"]
    labels = [i.label for i in load_items(None, "pairwise")]
    assert m["accuracy_original"]["value"] == labels.count("1") / len(labels)
    assert m["accuracy_swapped"]["value"] == labels.count("2") / len(labels)
    assert m["swap_consistency"]["value"] == 0 and m["both_orders_correct"]["value"] == 0
    assert summary["metrics"]["raters"]["m0"]["cost"] == {
        "calls_per_item": 2.0,
        "tokens_per_item": 30.0,
        "seconds_per_item": pytest.approx(0, abs=0.5),
    }
    assert summary["metrics"]["raters"]["m0"]["decided_by"] == {"judge:A": 2 * len(labels)}  # always the first
    report = (run.run_dir / "report.md").read_text()
    assert "Verdict table, ordered by agreement" in report and "swap flips" in report
    assert f"swap flips (a different winner once the outputs swap places): {len(labels)} item(s)" in report
    assert "WARNING" not in report
    assert (run.run_dir / "figures" / "confusion_m0.png").exists()


def test_each_judge_name_runs_its_protocols_own_prompt(tmp_path):
    seen = {}

    def judge(messages, tool):
        seen.setdefault(tool and tool["function"]["name"], all_text(messages))
        if tool is None:
            return "pong"
        name = tool["function"]["name"]
        return {
            "JudgeRating": {"rating": 3, "reason": "fine"},
            "Grade": {"correct": True, "error_type": "N/A", "reason": "fine"},
            "FactGrade": {"facts": [], "complete": True},
            "Verdict": {"correct": True, "reason": "it matches the reference"},
        }[name]

    for name, tool, words in (
        ("llmeval.judge", "JudgeRating", "0, 1, 2 or 3 stars"),
        ("interview.grader", "Grade", "error type"),
        ("judgeagent.judge", "Verdict", "Reference answer"),
    ):
        seen.clear()
        run, summary = _execute(tmp_path / name, {"judge": name}, {"evaluator": ScriptedChat(judge)})
        assert tool in seen and words.lower() in seen[tool].lower(), name
        assert summary["metrics"]["raters"]["m0"]["measures"]["accuracy"]["n"] > 0
        # every verdict says why (the review page shows it): the judge's reason, or how code decided it
        verdicts = [v for r in _records(run) for v in r["verdicts"]]
        assert verdicts and all(v["reason"] for v in verdicts), name
        if name == "judgeagent.judge":
            assert {v["reason"] for v in verdicts if v["how"] == "evaluator"} == {"it matches the reference"}


def test_an_ungraded_verdict_is_counted_not_a_disagreement_and_resume_rejudges_it(tmp_path):
    broken = {"on": True}

    def judge(messages, tool):
        if tool is None:
            return "pong"
        if broken["on"] and "lighthouse" in all_text(messages):
            return {"unexpected": 1}  # never a valid PairwiseVerdict, not even after the repair
        return {"winner": "A", "reason": "first"}

    chats = {"evaluator": ScriptedChat(judge)}
    run, summary = _execute(tmp_path, {"judge": "pairwise", "swap": False}, chats)
    assert summary["status_counts"] == {"ok": 7, "ungraded": 1}
    m = summary["metrics"]["raters"]["m0"]["measures"]["accuracy_original"]
    assert (m["n"], m["ungraded"]) == (7, 1)
    graded = [r for r in _records(run) if r["item_id"] != "pw-haiku"]
    assert m["value"] == sum(r["label"] == "1" for r in graded) / 7
    broken["on"] = False
    _, again = _execute(tmp_path, {"judge": "pairwise", "swap": False}, chats, run_id=run.run_dir.name)
    assert again["status_counts"] == {"ok": 8}
    m = again["metrics"]["raters"]["m0"]["measures"]["accuracy_original"]
    assert (m["n"], m["ungraded"]) == (8, 0)


def test_a_three_member_jury_votes_and_reports_each_member_and_its_cost(tmp_path):
    labels = tmp_path / "stars.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"s{i}",
                    "question": f"Explain idea {i}.",
                    "reference": "ref",
                    "response": f"answer {i}",
                    "label": label,
                    "category": cat,
                }
            )
            + "\n"
            for i, (label, cat) in enumerate([(1, "x"), (2, "x"), (3, "y")])
        )
    )

    def rater(stars):
        return ScriptedChat(lambda m, t: {"rating": stars, "reason": f"{stars} stars"} if t else "pong")

    chats = {ref: rater(k) for ref, k in zip(JURY, (1, 2, 2))}
    run, summary = _execute(
        tmp_path, {"judge": "llmeval.judge", "labels": str(labels), "jury": JURY, "repeats": 2}, chats
    )
    raters = summary["metrics"]["raters"]
    assert set(raters) == {"m0", "m1", "m2", "m0-vote", "m1-vote", "m2-vote", "jury"}  # with each one's repeats
    assert raters["m0-vote"]["measures"]["accuracy"]["n"] == 3  # voted: one per item
    assert raters["m0"]["measures"]["accuracy"]["value"] == 1 / 3  # always 1 star
    assert raters["m1"]["measures"]["accuracy"]["value"] == 1 / 3  # always 2 stars
    assert raters["jury"]["measures"]["accuracy"]["value"] == 1 / 3  # majority 2 of (1, 2, 2)
    assert raters["jury"]["measures"]["accuracy"]["n"] == 6  # 3 items x 2 repeats
    assert raters["m0"]["measures"]["repeat_consistency"]["value"] == 1.0
    assert raters["m0"]["cost"]["tokens_per_item"] == 2 * 15 and raters["jury"]["cost"]["tokens_per_item"] == 90
    record = _records(run)[0]
    assert record["jury"][0]["votes"] == ["1", "2", "2"] and record["jury"][0]["score"] == pytest.approx(5 / 3)
    report = (run.run_dir / "report.md").read_text()
    assert "### jury (majority of 3)" in report and f"### fake:{JURY[0]}\n" in report  # named, not m0
    assert raters["m0"]["name"] == f"fake:{JURY[0]}" and raters["jury"]["name"] == "jury (majority of 3)"

    chats = {ref: rater(k) for ref, k in zip(JURY, (1, 2, 3))}  # a split vote on every item
    _, summary = _execute(tmp_path / "split", {"judge": "llmeval.judge", "labels": str(labels), "jury": JURY}, chats)
    jury = summary["metrics"]["raters"]["jury"]
    assert jury["measures"]["accuracy"] | {"low": None, "high": None} == {
        "value": 0.0,
        "n": 3,
        "ungraded": 0,
        "low": None,
        "high": None,
        "method": "clopper-pearson",
    }
    assert jury["confusion"]["columns"][-1] == "split" and jury["measures"]["spearman"]["value"] is not None


@pytest.mark.parametrize(
    "record, field",
    [
        ({"input": "Q", "output_1": "a", "output_2": "b", "label": "3"}, "label"),
        ({"input": "Q", "output_1": "a", "label": "1"}, "output_2"),
        ({"output_1": "a", "output_2": "b", "label": "1"}, "question"),
    ],
)
def test_bad_labelled_records_name_file_record_and_field(tmp_path, record, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"input": "fine", "output_1": "a", "output_2": "b", "label": 2}) + "\n" + json.dumps(record) + "\n"
    )
    with pytest.raises(InputError) as exc:
        load_items(path, "pairwise")
    assert "bad.jsonl" in str(exc.value) and "record 2" in str(exc.value) and repr(field) in str(exc.value)


def test_mapped_columns_and_a_bad_jury_reference_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "h.csv"
    path.write_text("Prompt,Answer,Human\nWhat is 2+2?,4,yes\n")
    items = load_items(path, "judgeagent.judge", "question=Prompt,response=Answer,label=Human")
    assert (items[0].question, items[0].label) == ("What is 2+2?", "correct")
    out = str(tmp_path / "runs")
    assert main(["--protocol", "judgecheck", "--jury", "nonsense", "--out", out, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--jury" in err and "\n" not in err
    assert main(["--protocol", "judgecheck", "--labels", str(tmp_path / "none.jsonl"), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert "none.jsonl" in err and "file not found" in err and "--labels" in err and "\n" not in err
    assert (
        main(
            [
                "--protocol",
                "judgecheck",
                "--judge",
                "llmeval.judge",
                "--labels",
                str(path),
                "--out",
                out,
                "--fields",
                "question=Prompt,response=Answer,label=Human",
            ]
        )
        == 2
    )  # yes is no star rating
    assert "record 1" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_judge_that_changes_its_mind_between_repeats_shows_repeat_flips_and_a_split_self_vote(tmp_path):
    calls: dict[str, int] = {}

    def fickle(messages, tool):
        if tool is None:
            return "pong"
        text = all_text(messages)
        calls[text] = calls.get(text, 0) + 1
        return {"winner": "A" if calls[text] % 2 else "B", "reason": f"call {calls[text]}"}

    run, summary = _execute(
        tmp_path, {"judge": "pairwise", "swap": False, "repeats": 2}, {"evaluator": ScriptedChat(fickle)}
    )
    raters = summary["metrics"]["raters"]
    assert raters["m0"]["measures"]["repeat_consistency_original"]["value"] == 0
    assert raters["m0"]["measures"]["accuracy_original"]["value"] == 7 / 16  # r0 says 1, r1 says 2: 3 + 4 labels
    vote = raters["m0-vote"]
    assert vote["measures"]["accuracy_original"] == {
        "value": 0.0,
        "n": 8,
        "ungraded": 0,
        "low": 0.0,
        "high": pytest.approx(1 - 0.025 ** (1 / 8)),  # the exact binomial bound of 0 of 8
        "method": "clopper-pearson",
    }  # every self-vote is split: a miss
    assert "repeat flips (verdicts differ between repeats): 8 item(s)" in (run.run_dir / "report.md").read_text()


def test_a_jury_replaces_the_evaluator_and_an_embedded_member_gets_the_smoke_test_warning(tmp_path):
    chats = {ref: ScriptedChat(always_first) for ref in ("local", JURY[0])}
    run, summary = _execute(tmp_path, {"judge": "pairwise", "jury": ["local", JURY[0]]}, chats)
    # the configured evaluator is not used, nor pinged, nor warned about: the models called are the jury's
    assert summary["models"] == {"evaluator": ", ".join(sorted(["fake:local", f"fake:{JURY[0]}"]))}
    assert summary["metrics"]["jury"] == {"m0": "fake:local", "m1": f"fake:{JURY[0]}"}
    report = (run.run_dir / "report.md").read_text()
    assert "WARNING: The embedded SmolLM2-135M model is acting as jury member m0." in report
    assert report.count("WARNING") == 1


def test_the_report_plots_agreement_against_cost_for_each_judge_and_the_jury(tmp_path):
    def member(first: bool):
        return ScriptedChat(lambda m, t: {"winner": "A" if first else "B", "reason": "."} if t else "pong")

    chats = {JURY[0]: member(True), JURY[1]: member(True), JURY[2]: member(False)}
    run, summary = _execute(tmp_path, {"judge": "pairwise", "jury": JURY}, chats)
    raters = summary["metrics"]["raters"]
    assert raters["jury"]["cost"]["tokens_per_item"] == 3 * raters["m0"]["cost"]["tokens_per_item"]
    report = (run.run_dir / "report.md").read_text()
    assert (run.run_dir / "figures" / "agreement_vs_cost.png").stat().st_size > 0
    assert "Agreement (accuracy mean, 95 % bootstrap interval) against tokens per judged item" in report
    single, _ = _execute(tmp_path / "one", {"judge": "pairwise"}, {"evaluator": ScriptedChat(always_first)})
    assert not (single.run_dir / "figures" / "agreement_vs_cost.png").exists()  # one point compares nothing


def test_scatter_draws_a_point_whose_interval_does_not_contain_it(tmp_path):
    from dyneval.results.report import scatter

    path = scatter(
        tmp_path / "s.png",
        {"a": (10.0, 0.5), "b": (30.0, 0.9)},
        errors={"a": (0.55, 0.7)},
        title="t",
        xlabel="x",
        ylabel="y",
    )
    assert path.stat().st_size > 0
