"""End to end through ``run.main`` against the stand-in endpoint: one real earlier JudgeAgent run and five
synthetic ones (real format) of other targets calibrate the shipped sample questions; a run with ``--irt-runs``
then asks only ``--irt-items`` questions of each pool, records theta +/- SE and reports the calls it did not make."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

from dyneval import cli
from dyneval.protocols.judgeagent.data import load_questions
from tests.golden_runs import respond
from tests.standin_endpoint import StandIn
from tests.test_judgeagent_irt import write_run


def _main(argv: list[str]) -> tuple[int, str]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    return code, out.getvalue() + err.getvalue()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def synthetic_runs(earlier: Path, questions: list) -> None:
    """Five synthetic earlier targets, abilities -1.5 .. 2.5 on a difficulty ladder over the questions (a Guttman
    pattern), as run directories in the real format."""
    for k, theta in enumerate((-1.5, -0.5, 0.5, 1.5, 2.5)):
        write_run(
            earlier / f"20260101-00000{k}-judgeagent-s{k}",
            f"synthetic{k}@http://127.0.0.1:9/v1",
            questions,
            {q.id: "correct" if theta > -2 + 4 * i / len(questions) else "wrong" for i, q in enumerate(questions)},
        )


def test_adaptive_run_asks_the_chosen_questions_only_and_reports_ability_and_savings(tmp_path, monkeypatch):
    for name in ("DYNEVAL_TARGET", "DYNEVAL_EVALUATOR", "DYNEVAL_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)
    questions, _ = load_questions({})
    earlier, out = tmp_path / "earlier", tmp_path / "runs"
    synthetic_runs(earlier, questions)
    with StandIn(respond=respond) as standin:
        code, log = _main(
            [
                "--protocol",
                "judgeagent",
                "--limit",
                "2",
                "--out",
                str(earlier),
                "--target",
                standin.spec("old"),
                "--evaluator",
                standin.spec("judge"),
            ]
        )
        assert code == 0, log
        argv = [
            "--protocol",
            "judgeagent",
            "--out",
            str(out),
            "--target",
            standin.spec("new"),
            "--evaluator",
            standin.spec("judge"),
            "--irt-runs",
            str(earlier / "*"),
            "--batch-size",
            "6",
            "--irt-items",
            "2",
            "--limit",
            "2",
        ]
        code, log = _main(argv)
    assert code == 0, log
    [run_dir] = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    records = {r["unit_id"]: r for r in _jsonl(run_dir / "results.jsonl")}
    assert sorted(records) == ["batch-0001", "batch-0002"]
    for r in records.values():
        ad = r["adaptive"]
        assert ad["pool"] == 6 and len(ad["asked"]) == len(set(ad["asked"])) == 2 and ad["not_asked"] == 4
        assert set(ad["asked"]) <= set(r["questions"])
        assert [b["id"] for b in r["base"]] == ad["asked"]
        assert [v["id"] for v in r["validation"]] == ad["asked"]  # Algorithm 2 re-asks the asked questions only
        assert [t.get("chose") for t in ad["trace"]] == [*ad["asked"], None]
        assert ad["se"] < 1.0 and ad["first_difficulty"] == r["trajectory"][0]["next"]
    asked = Counter(
        e["unit"]
        for e in _jsonl(run_dir / "events.jsonl")
        if e["role"] == "target" and e["step"] == "base_answer" and not e["error"]
    )
    assert asked == {"batch-0001": 2, "batch-0002": 2}
    metrics = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["metrics"]
    ad = metrics["adaptive_grading"]
    cal = ad["calibration"]
    assert (cal["calibrated"], cal["benchmark_questions"], len(cal["examinees"])) == (15, 15, 6)
    assert ad["saved"] == {"base_answers": 8, "validation_answers": 8} and ad["asked"] == 4
    assert ad["ability"]["responses"] <= 4 and 0 <= ad["expected_accuracy"]["value"] <= 1
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "Adaptive base questions (item response theory)" in report and "8 target answers" in report


def test_ungraded_adaptive_answers_are_rejudged_on_resume_without_asking_a_question_twice(tmp_path, monkeypatch):
    """The judge sends malformed verdicts for the whole first run: every asked answer is ungraded (no response,
    so the ability stays at the prior) and the batch is recorded ``ungraded``. ``--resume`` forks before the
    first ungraded verdict (the runner's machinery) and goes on choosing from the re-judged answers."""
    for name in ("DYNEVAL_TARGET", "DYNEVAL_EVALUATOR", "DYNEVAL_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)
    questions, _ = load_questions({})
    earlier, out = tmp_path / "earlier", tmp_path / "runs"
    synthetic_runs(earlier, questions)
    broken = {"on": True}

    def judge_fails(body: dict) -> dict | None:
        tools = body.get("tools") or []
        if broken["on"] and tools and tools[0]["function"]["name"] == "Verdict":
            return {"role": "assistant", "content": "I cannot decide."}
        return respond(body)

    with StandIn(respond=judge_fails) as standin:
        argv = [
            "--protocol",
            "judgeagent",
            "--out",
            str(out),
            "--target",
            standin.spec("new"),
            "--evaluator",
            standin.spec("judge"),
            "--irt-runs",
            str(earlier / "*"),
            "--batch-size",
            "6",
            "--irt-items",
            "3",
            "--limit",
            "1",
            "--no-extension",
            "--no-validation",
        ]
        code, log = _main(argv)
        [run_dir] = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
        first = _jsonl(run_dir / "results.jsonl")[-1]
        broken["on"] = False
        code2, log2 = _main(["--resume", run_dir.name, *argv])
    assert code == 4, log  # ended with the batch ungraded (the documented exit code)
    assert code2 == 0, log2
    assert first["status"] == "ungraded"
    assert [b["verdict"] for b in first["base"]] == ["ungraded"] * 3
    assert first["adaptive"]["responses"] == 0 and abs(first["adaptive"]["theta"]) < 1e-9  # the prior: no response
    final = _jsonl(run_dir / "results.jsonl")[-1]
    assert final["status"] == "ok" and all(b["verdict"] != "ungraded" for b in final["base"])
    ad = final["adaptive"]
    assert len(ad["asked"]) == len(set(ad["asked"])) == 3 and ad["responses"] == 3
    assert ad["asked"][0] == first["adaptive"]["asked"][0]  # the same first choice, re-judged
    assert [t.get("chose") for t in ad["trace"]] == [*ad["asked"], None]
