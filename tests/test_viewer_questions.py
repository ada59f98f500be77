"""Where the viewer shows a question, it shows what the examinee was shown and what it is scored against: an
LLMEval-3 multiple-choice question with its lettered options (the exam server's delivered text, seed 002
section 2.2), an ATAD ``--evaluate`` prediction beside the benchmark item's answer key (seed 003 Table 6)."""

from __future__ import annotations

import contextlib
import io
import json

from dyneval import cli
from dyneval.results.view.data import run_payload
from tests.golden_runs import REPO, ROLES, respond
from tests.standin_endpoint import StandIn
from tests.test_viewer import atad_answer, make_run


def _section(payload: dict, unit: str, title: str) -> dict:
    (found,) = [s for u in payload["units"] if u["id"] == unit for s in u["sections"] if s["title"].startswith(title)]
    return found


def test_llmeval_drill_down_shows_each_multiple_choice_question_with_its_options(tmp_path):
    bank = REPO / "samples/llmeval/bank.jsonl"
    mcq = [q for q in map(json.loads, bank.read_text(encoding="utf-8").splitlines()) if q.get("options")]
    only = tmp_path / "mcq.jsonl"
    only.write_text("".join(json.dumps(q) + "\n" for q in mcq), encoding="utf-8")
    out = tmp_path / "runs"
    with StandIn(respond=respond) as standin, contextlib.chdir(REPO):
        argv = ["--protocol", "llmeval", "--bank", str(only), "--bank-db", str(tmp_path / "bank.sqlite")]
        argv += ["--questions", "3", "--paradigm", "zero-shot", "--out", str(out)]
        argv += [x for role in ROLES for x in (f"--{role}", standin.spec(role))]
        with contextlib.redirect_stdout(io.StringIO()) as console:
            assert cli.main(argv) == 0, console.getvalue()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    payload = run_payload(run_dir)
    (unit,) = payload["units"]
    section = _section(payload, unit["id"], "questions, answers and stars")
    shown = [row[section["headers"].index("question")] for row in section["rows"]]
    assert len(shown) == 3
    options = {q["question"]: q["options"] for q in mcq}
    for text in shown:
        stem = text.split("\n")[0]
        assert text == stem + "".join(f"\n{chr(65 + i)}. {o}" for i, o in enumerate(options[stem])), text


def test_atad_evaluated_answer_stands_beside_the_answer_key(tmp_path):
    problems = {"T1-a": {"sentences": ["s"] * 5, "answer": 4}, "T2-a": {"sentences": ["s"] * 5, "coherent": False}}
    units = [{"id": u, "input": {"kind": "answer", "task": u[:2], "problem": p}} for u, p in problems.items()]
    records = [atad_answer("T1-a", False) | {"predicted": 2}, atad_answer("T2-a", True) | {"predicted": False}]
    payload = run_payload(make_run(tmp_path, "r", "atad", records, units=units))
    for unit, predicted, key in (("T1-a", 2, 4), ("T2-a", False, False)):
        section = _section(payload, unit, "Evaluated answer")
        (row,) = section["rows"]
        shown = dict(zip(section["headers"], row, strict=True))
        assert shown["predicted"] == predicted and shown["answer key"] == key
        assert section["headers"].index("answer key") == section["headers"].index("predicted") + 1
