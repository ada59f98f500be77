"""``dyneval --calibration LABELS --run RUN``: a finished run's judge-based metrics, raw and judge-calibrated by human
labels, in summary.json, the re-rendered report, the viewer's and the run index's headline rows and the console;
labels for another judge or naming answers the run did not judge are refused with exit 2."""

from __future__ import annotations

import json
import shutil

import pytest

from dyneval.cli import main
from dyneval.results.calibration.metrics import JUDGED
from dyneval.results.calibration.run import judge_fingerprint, judged_verdicts
from dyneval.results.view.index import index_payload
from dyneval.stores.rundir import RunDir
from tests import standin_runs
from tests.standin_endpoint import StandIn
from tests.standin_runs import two_unit_interview


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert two_unit_interview(out) == 0
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run (each test writes into it) under its own --out folder."""
    return shutil.copytree(finished, tmp_path / "out" / finished.name)


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _labels(run_dir, flip: int) -> list[dict]:
    """Labels for the run's first judged answers: the judge's own verdict, the first ``flip`` of them reversed."""
    judged = [(k, v == "correct") for unit in judged_verdicts(RunDir(run_dir)).values() for k, v in unit.items()]
    rows = []
    for n, (key, correct) in enumerate(judged[:6]):
        truth = correct != (n < flip)
        rows.append({"id": key, "label": "correct" if truth else "wrong", "reviewer": "ann"})
    return rows


def test_calibration_writes_raw_and_calibrated_share_everywhere_a_run_is_read(run, capsys):
    rows = _labels(run, flip=1)
    labels = _write(run / "review" / "ann.jsonl", rows)
    assert main(["--calibration", str(labels), "--run", run.name, "--out", str(run.parent)]) == 0
    cal = json.loads((run / "summary.json").read_text())["metrics"]["judge_calibration"]
    entry = cal["metrics"][JUDGED]
    judged = [v == "correct" for unit in judged_verdicts(RunDir(run)).values() for v in unit.values()]
    # hand computation: Se, Sp from the 6 labels, Rogan-Gladen on the run's judged share
    human = [r["label"] == "correct" for r in rows]
    judge = judged[:6]
    pos = [j for j, h in zip(judge, human, strict=True) if h]
    neg = [j for j, h in zip(judge, human, strict=True) if not h]
    se, sp = sum(pos) / len(pos), sum(not j for j in neg) / len(neg)
    q = sum(judged) / len(judged)
    assert entry["raw"]["estimate"] == pytest.approx(q)
    assert cal["agreement"]["share"] == pytest.approx(5 / 6)
    assert entry["calibrated"]["labels"] == 6
    expected = min(max((q + sp - 1) / (se + sp - 1), 0.0), 1.0) if se + sp - 1 >= 0.1 else None
    assert entry["calibrated"]["estimate"] == (expected if expected is None else pytest.approx(expected))
    # every judge-based headline metric of the run has its calibrated row, or says why it has none
    assert set(cal["metrics"]) == {JUDGED, "score@1", "score@2", "score@3", "judge", "followup_accuracy.overall"}
    out = capsys.readouterr().out
    assert f"{JUDGED}: raw" in out and "judge-calibrated (6 labels)" in out
    report = (run / "report.md").read_text()
    lines = report.splitlines()
    [raw_row] = [i for i, line in enumerate(lines) if line.startswith("| Follow-up accuracy |")]
    assert lines[raw_row + 1].startswith("| Follow-up accuracy: judge-calibrated (6 labels) |")  # side by side
    assert "judge-calibrated (6 labels)" in (run / "report.html").read_text()
    [row] = index_payload(run.parent)["runs"]
    names = [h["name"] for h in row["headline"]]
    assert f"{JUDGED}: raw" in names and f"{JUDGED}: judge-calibrated (6 labels)" in names
    assert "Score@1: judge-calibrated (6 labels)" in names
    assert "judge-calibrated (6 labels)" in (run / "view.html").read_text()


def test_labels_from_outside_the_run_need_its_judge_fingerprint(run, tmp_path, capsys):
    rows = _labels(run, flip=0)
    bare = _write(tmp_path / "elsewhere.jsonl", rows)
    assert main(["--calibration", str(bare), "--run", run.name, "--out", str(run.parent)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "record 1" in line and "judge_fingerprint" in line
    fingerprint = judge_fingerprint("interview", RunDir(run).run_config())
    marked = _write(tmp_path / "marked.jsonl", [{**r, "judge_fingerprint": fingerprint} for r in rows])
    assert main(["--calibration", str(marked), "--run", run.name, "--out", str(run.parent)]) == 0


def test_labels_made_for_another_judge_are_refused_in_one_line(run, capsys):
    rows = [{**r, "judge_fingerprint": "0123456789abcdef"} for r in _labels(run, flip=0)]
    labels = _write(run / "review" / "other.jsonl", rows)
    assert main(["--calibration", str(labels), "--run", run.name, "--out", str(run.parent)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "labels made for judge 0123456789abcdef" in line and "record 1" in line
    assert "judge_calibration" not in json.loads((run / "summary.json").read_text())["metrics"]


def test_a_label_naming_an_answer_the_run_did_not_judge_names_its_record(run, capsys):
    rows = [*_labels(run, flip=0), {"id": "no-such-unit#seed1", "label": "correct"}]
    labels = _write(run / "review" / "ann.jsonl", rows)
    assert main(["--calibration", str(labels), "--run", run.name, "--out", str(run.parent)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "'no-such-unit#seed1' is not an answer" in line and f"record {len(rows)}" in line


def test_calibration_needs_a_run_and_goes_with_rescore_under_protocol(run, capsys):
    labels = _write(run / "review" / "ann.jsonl", _labels(run, flip=0))
    assert main(["--calibration", str(labels), "--out", str(run.parent)]) == 2
    assert main(["--protocol", "interview", "--calibration", str(labels), "--out", str(run.parent)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "no --run" in errors[0] and "goes with --rescore" in errors[1]


def test_rescore_refuses_labels_for_the_old_judge_before_calling_the_new_one(finished, tmp_path, capsys):
    """Labels made for the source run's judge do not calibrate a re-score by another judge (exit 2, no request,
    no run folder);
    labels carrying the new judge's fingerprint do, and the re-scored run's summary holds the calibration."""
    out = tmp_path / "out"
    source = shutil.copytree(finished, out / finished.name)
    old = judge_fingerprint("interview", RunDir(source).run_config())
    labels = _write(tmp_path / "old.jsonl", [{**r, "judge_fingerprint": old} for r in _labels(source, flip=0)])
    with StandIn() as standin:
        rescore = ["--protocol", "interview", "--rescore", source.name, "--evaluator", standin.spec("j2")]
        rescore += ["--out", str(out), "--skip-preflight"]
        assert main([*rescore, "--calibration", str(labels)]) == 2
        assert not standin.requests
        assert [p.name for p in out.iterdir() if p.is_dir()] == [source.name]  # no run folder made
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"labels made for judge {old}" in line
        new = line.rsplit("is ", 1)[1].strip()
        fresh = _write(tmp_path / "new.jsonl", [{**r, "judge_fingerprint": new} for r in _labels(source, flip=0)])
        assert main([*rescore, "--calibration", str(fresh)]) == 0
    [rescored] = [
        p
        for p in out.iterdir()
        if p.is_dir() and p.name != source.name and "rescored_from" in p.joinpath("config.json").read_text()
    ]
    entry = json.loads((rescored / "summary.json").read_text())["metrics"]["judge_calibration"]
    assert entry["judge_fingerprint"] == new != old and entry["metrics"][JUDGED]["calibrated"]["labels"] == 6
    assert "judge-calibrated (6 labels)" in (rescored / "report.md").read_text()


def test_labels_the_review_page_wrote_are_accepted_after_being_copied_out_of_the_run(run, tmp_path):
    from rich.console import Console

    from dyneval.results.review.command import prepare

    review, _ = prepare(run.name, str(run.parent), ["--reviewer", "ann", "--sample", "4"], Console(quiet=True))
    for item in review.sample:
        review.labels.add(item, item.verdict)
    copied = shutil.copy(review.labels.path, tmp_path / "ann.jsonl")
    assert main(["--calibration", str(copied), "--run", run.name, "--out", str(run.parent)]) == 0
    entry = json.loads((run / "summary.json").read_text())["metrics"]["judge_calibration"]
    assert entry["agreement"]["labels"] == 4 and entry["agreement"]["share"] == 1.0


@pytest.fixture(scope="module")
def other_runs(tmp_path_factory):
    """A JudgeAgent and an LLMEval-3 run (its question bank beside it, as the run left it)."""
    folder = tmp_path_factory.mktemp("other-runs")
    return {name: standin_runs.run(name, folder) for name in ("judgeagent", "llmeval")}


def _agreeing_labels(run_dir):
    """Labels equal to the judge's own verdict on every judged answer (a judge that never errs on them)."""
    verdicts = judged_verdicts(RunDir(run_dir))
    return [{"id": key, "label": v} for unit in verdicts.values() for key, v in unit.items()]


@pytest.mark.parametrize(
    ("protocol", "corrected", "noted"),
    [
        ("judgeagent", {JUDGED, "score", "base_accuracy.value"}, set()),
        ("llmeval", {"S"}, {"R"}),
    ],
)
def test_every_judge_based_metric_of_judgeagent_and_llmeval_is_calibrated_or_says_why(
    other_runs, tmp_path, capsys, protocol, corrected, noted
):
    """Labels agreeing with the judge (Se = Sp = 1, or an identity star matrix where every star was labelled):
    each corrected metric equals the raw one the run reported; R says why it is not corrected; the report shows the
    calibrated row right below the raw one."""
    run = shutil.copytree(other_runs[protocol], tmp_path / "out" / other_runs[protocol].name)
    if protocol == "llmeval":
        shutil.copytree(other_runs[protocol].parent / "_cache", tmp_path / "out" / "_cache")  # its question bank
    rows = _agreeing_labels(run)
    labels = _write(run / "review" / "ann.jsonl", rows)
    code = main(["--calibration", str(labels), "--run", run.name, "--out", str(run.parent)])
    cal = json.loads((run / "summary.json").read_text())["metrics"]["judge_calibration"]
    assert code == 0, cal
    found = cal["metrics"]
    assert corrected <= set(found) and noted <= set(found)
    for path in corrected:
        entry = found[path]
        assert entry["calibrated"]["estimate"] == pytest.approx(entry["raw"]["estimate"]), path
        assert entry["calibrated"]["low"] <= entry["calibrated"]["estimate"] <= entry["calibrated"]["high"], path
    for path in noted:
        assert found[path]["calibrated"]["estimate"] is None and "ratio" in found[path]["calibrated"]["note"]
    report = (run / "report.md").read_text().splitlines()
    for path in corrected - {JUDGED}:
        name = found[path]["name"]
        [at] = [i for i, line in enumerate(report) if line.startswith(f"| {name} |")]
        assert report[at + 1].startswith(f"| {name}: judge-calibrated ({len(rows)} labels) |"), path
    if protocol == "llmeval":  # without its question bank the report (which reads it) is left as it was, saying so
        shutil.rmtree(tmp_path / "out" / "_cache")
        capsys.readouterr()
        assert main(["--calibration", str(labels), "--run", run.name, "--out", str(run.parent)]) == 0
        assert "report: not rendered again" in capsys.readouterr().out
        assert not (tmp_path / "out" / "_cache").exists()  # no empty bank made in its place


def test_a_run_whose_judge_prompt_came_from_prompts_has_another_judge_fingerprint(run):
    """A run graded with a user's --prompts file in place of a judge prompt is another judge: labels made for the
    shipped prompt do not calibrate it. A replaced prompt of another role leaves the judge as it was."""
    config = RunDir(run).run_config()
    shipped = judge_fingerprint("interview", config)
    judged = config.model_copy(update={"prompt_overrides": {"interview/grader_facts": "9" * 64}})
    other = config.model_copy(update={"prompt_overrides": {"interview/interviewer_modify_factual": "9" * 64}})
    assert judge_fingerprint("interview", judged) != shipped
    assert judge_fingerprint("interview", other) == shipped
