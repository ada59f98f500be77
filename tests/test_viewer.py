"""The viewer's data and the comparison (no browser; ``test_viewer_browser.py`` drives the pages in Chromium).

Run directories are written by hand here, so each test states exactly which records and events a page is made of.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dyneval import cli
from dyneval.results.view.compare import compare_payload, mean_difference_ci
from dyneval.results.view.data import MAX_TEXT, run_payload
from dyneval.results.view.page import embed, render, write_view

ATTACK = "</script><script>alert(1)</script><!-- <img src=x onerror=alert(2)> &amp;"


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(
    root: Path,
    name: str,
    protocol: str,
    records: list[dict],
    *,
    events: list[dict] = (),
    units: list[dict] | None = None,
    metrics: dict | None = None,
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    units = (
        units if units is not None else [{"id": r["unit_id"], "input": {}, "meta": r.get("meta", {})} for r in records]
    )
    _jsonl(d / "units.jsonl", units)
    _jsonl(d / "results.jsonl", records)
    _jsonl(d / "events.jsonl", list(events))
    (d / "config.json").write_text(json.dumps({"protocol": protocol, "out": str(root), "params": {}}))
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    (d / "summary.json").write_text(
        json.dumps({"protocol": protocol, "units": len(records), "status_counts": counts, "metrics": metrics or {}})
    )
    return d


def event(unit: str, step: str, output, **kw) -> dict:
    return {
        "ts": 1.0,
        "unit": unit,
        "role": kw.pop("role", "target"),
        "model": "m@http://127.0.0.1:1/v1",
        "step": step,
        "attempt": 1,
        "messages": [{"role": "human", "content": kw.pop("prompt", "q")}],
        "output": output,
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "latency_s": 0.1,
        "queue_s": 0.0,
        "error": None,
        **kw,
    }


def atad_answer(unit: str, correct: bool) -> dict:
    return {
        "unit_id": unit,
        "meta": {"task": unit.split("-")[0]},
        "status": "ok",
        "ungraded_verdicts": 0,
        "correct": correct,
        "predicted": 1,
        "explanation": "e",
        "wall_s": 0.1,
        "usage": {"calls": 1, "prompt_tokens": 3, "completion_tokens": 2},
    }


def test_model_text_never_becomes_markup(tmp_path):
    d = make_run(
        tmp_path,
        "r",
        "atad",
        [atad_answer("T1-a", True) | {"explanation": ATTACK}],
        events=[event("T1-a", "evaluate:answer", ATTACK, prompt=ATTACK)],
    )
    page = write_view(d).read_text(encoding="utf-8")
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data  # nothing in the data can end the element
    assert json.loads(data)["units"][0]["events"][0]["output"] == ATTACK  # ... and it is the text, byte-exact
    assert page.count("</script>") == 2  # the JSON element and the page's own script, nothing injected
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page and "document.write" not in page


def test_payload_lists_units_with_meta_columns_exchanges_in_order_and_unfinished_units(tmp_path):
    records = [atad_answer("T1-a", True), atad_answer("T2-b", False)]
    units = [{"id": r["unit_id"], "input": {}, "meta": r["meta"]} for r in records]
    units.append({"id": "T3-c", "input": {}, "meta": {"task": "T3"}})
    events = [
        event("T2-b", "first", "one"),
        event("T1-a", "x", "a"),
        event("T2-b", "second", {"answer": 2}, cached=True),
        event("-", "preflight", "pong"),
    ]
    p = run_payload(make_run(tmp_path, "r", "atad", records, events=events, units=units))
    assert p["columns"][:4] == ["unit", "correct", "task", "status"] and p["hidden"] == []
    rows = {u["id"]: u for u in p["units"]}
    assert rows["T3-c"]["row"]["status"] == "not finished"  # a partial run shows what did not run
    assert [e["step"] for e in rows["T2-b"]["events"]] == ["first", "second"]
    assert rows["T2-b"]["events"][1]["cache hit"] is True and "cache hit" not in rows["T2-b"]["events"][0]
    assert rows["T2-b"]["row"]["correct"] is False and rows["T2-b"]["row"]["tokens"] == 5
    assert [e["step"] for e in p["outside"]] == ["preflight"]


def test_long_text_is_clipped_saying_how_much_is_left_out(tmp_path):
    d = make_run(
        tmp_path, "r", "atad", [atad_answer("T1-a", True)], events=[event("T1-a", "s", "x" * (MAX_TEXT + 123))]
    )
    out = run_payload(d)["units"][0]["events"][0]["output"]
    assert out.startswith("x" * MAX_TEXT) and "123 more characters" in out


def test_headline_metrics_carry_definition_and_denominator(tmp_path):
    metrics = {
        "score@1": 0.25,
        "score@2": 0.5,
        "denominators": {"score@1": {"n": 4, "ungraded": 1}, "score@2": {"n": 3, "ungraded": 2}},
    }
    p = run_payload(make_run(tmp_path, "r", "interview", [], metrics=metrics))
    head = {m["name"]: m for m in p["headline"]}
    assert head["Score@1"]["value"] == 0.25 and head["Score@1"]["denominator"] == "n=4, 1 ungraded"
    assert head["Score@2"]["denominator"] == "n=3, 2 ungraded" and "section 3.2" in head["Score@2"]["definition"]
    assert "Score@3" not in head  # absent from the summary: not shown, never invented


def test_atad_rejected_candidates_are_listed_with_why(tmp_path):
    history = [
        {
            "step": "generate",
            "phase": "init",
            "level": "easy",
            "attempt": 1,
            "problem": {"p": 1},
            "structure_errors": ["needs 5 sentences"],
        },
        {
            "step": "generate",
            "phase": "init",
            "level": "easy",
            "attempt": 2,
            "problem": {"p": 2},
            "structure_errors": [],
        },
        {
            "step": "validate",
            "phase": "init",
            "level": "easy",
            "attempt": 2,
            "approved": False,
            "feedback": "copies the example",
        },
        {
            "step": "generate",
            "phase": "init",
            "level": "easy",
            "attempt": 3,
            "problem": {"p": 3},
            "structure_errors": [],
        },
        {"step": "validate", "phase": "init", "level": "easy", "attempt": 3, "approved": None, "error": "no tool call"},
        {"step": "validate", "phase": "init", "level": "easy", "attempt": 3, "approved": True, "feedback": "fine"},
    ]
    rec = {
        "unit_id": "T1-0",
        "meta": {"task": "T1"},
        "status": "ok",
        "item": {"task": "T1", "history": history, "status": "discarded"},
    }
    sections = run_payload(make_run(tmp_path, "r", "atad", [rec]))["units"][0]["sections"]
    rejected = next(s for s in sections if s["title"].startswith("Rejected candidates"))
    assert [(r[3], r[4], r[5]) for r in rejected["rows"]] == [
        ("code checks", "needs 5 sentences", {"p": 1}),
        ("orchestrator", "copies the example", {"p": 2}),
        ("not judged (ungraded)", "no tool call", {"p": 3}),
    ]


def test_paired_difference_and_interval_over_shared_units_only(tmp_path):
    a = make_run(tmp_path, "a", "atad", [atad_answer(f"T{i}-x", i % 2 == 0) for i in range(1, 9)])
    b = make_run(
        tmp_path, "b", "atad", [atad_answer(f"T{i}-x", True) for i in range(1, 8)] + [atad_answer("T9-x", False)]
    )  # T8 only in a, T9 only in b: not paired
    p = compare_payload([a, b])
    row = next(r for r in p["paired"] if r["outcome"] == "correct")
    assert (row["run"], row["baseline"]) == ("B", "A")  # short labels, the legend names the runs
    assert [(r["label"], r["run_id"]) for r in p["runs"]] == [("A", "a"), ("B", "b")]
    assert row["n"] == 7 and row["mean_baseline"] == pytest.approx(3 / 7) and row["diff"] == pytest.approx(4 / 7)
    assert row["low"] <= row["diff"] <= row["high"] and row["high"] <= 1.0
    assert p["paired"] == compare_payload([a, b])["paired"]  # seeded: the same runs give the same interval
    links = {d["unit"]: d["links"] for d in p["unit_diffs"]}
    assert set(links) == {"T1-x", "T3-x", "T5-x", "T7-x", "T8-x", "T9-x"}
    # each changed unit links to its drill-down in each run holding it, relative to the page's folder
    assert links["T1-x"] == ["a/view.html#unit=T1-x", "b/view.html#unit=T1-x"]
    assert links["T8-x"] == ["a/view.html#unit=T8-x", None] and links["T9-x"] == [None, "b/view.html#unit=T9-x"]


def test_interval_edge_cases():
    assert mean_difference_ci([1.0]) == (None, None)
    assert mean_difference_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    low, high = mean_difference_ci([0.0, 1.0, 1.0, 0.0, 1.0])
    assert 0.0 <= low < 0.6 < high <= 1.0


@pytest.mark.parametrize(
    "make, blame",
    [
        (lambda t: ["--compare", "nope", "other", "--out", str(t)], "--compare: no finished run 'nope'"),
        (lambda t: ["--compare", str(t / "a")], "--compare: give at least two runs"),
        (lambda t: ["--compare", str(t / "a"), str(t / "j")], "runs of different protocols cannot be compared"),
        (lambda t: ["--compare", str(t / "a"), str(t / "a")], "a run is named twice"),
        (lambda t: ["--compare", str(t / "a"), str(t / "a2"), "--seed", "3"], "--compare takes run ids and --out only"),
    ],
)
def test_bad_compare_exits_2_with_one_line(make, blame, tmp_path, capsys):
    make_run(tmp_path, "a", "atad", [atad_answer("T1-a", True)])
    make_run(tmp_path, "a2", "atad", [atad_answer("T1-a", False)])
    make_run(tmp_path, "j", "judgeagent", [])
    before = set(tmp_path.iterdir())
    assert cli.main(make(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and blame in err and "\n" not in err
    assert set(tmp_path.iterdir()) == before  # nothing written


def test_compare_by_run_id_under_out_writes_one_page(tmp_path, capsys):
    make_run(tmp_path, "a", "atad", [atad_answer("T1-a", True)])
    make_run(tmp_path, "b", "atad", [atad_answer("T1-a", False)])
    assert cli.main(["--compare", "a", "b", "--out", str(tmp_path)]) == 0
    pages = list(tmp_path.glob("compare-*.html"))
    assert len(pages) == 1 and str(pages[0]) in capsys.readouterr().out
    assert "a vs b" in pages[0].read_text(encoding="utf-8")


def test_render_refuses_nothing_and_keeps_nan_out_of_the_data():
    page = render({"kind": "run", "title": "t <b>", "value": float("nan")})
    assert "<title>t &lt;b&gt;</title>" in page and "NaN" not in page


def test_embed_round_trips_any_text():
    payload = {"s": ATTACK + "\u2028\u2029 é 漢字"}
    assert json.loads(embed(payload)) == payload


def test_an_interrupted_run_leaves_a_view_of_what_finished_and_what_did_not(tmp_path):
    import os
    import signal
    import time

    from rich.console import Console

    from dyneval.runtime import stop
    from dyneval.runtime.runner import RunInterrupted, execute, open_run
    from dyneval.state.config import RunConfig
    from tests.fakes import ScriptedChat, last_text
    from tests.toy_protocol import ToyProtocol

    def target(messages, tool):
        if last_text(messages) == "question 1":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this request is in flight
            deadline = time.monotonic() + 30
            while not stop.stopped() and time.monotonic() < deadline:
                time.sleep(0.01)
        return "answer to " + last_text(messages)

    chats = {"target": ScriptedChat(target), "evaluator": ScriptedChat(lambda m, t: {"correct": True})}
    config = RunConfig(protocol="toy", out=str(tmp_path), params={"units": 4}, concurrency=1)
    run = open_run(ToyProtocol(), config, run_id=None, console=Console(quiet=True), chat_overrides=chats)
    try:
        with pytest.raises(RunInterrupted):
            execute(ToyProtocol(), run, skip_preflight=True)
    finally:
        stop.clear()
    page = (run.run_dir / "view.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.S).group(1))
    assert [u["row"]["status"] for u in data["units"]] == ["ok", "not finished", "not finished", "not finished"]
    assert any(n.startswith("INTERRUPTED") and "--resume" in n for n in data["notes"])
    assert [e["output"] for e in data["units"][0]["events"]][0] == "answer to question 0"


def test_a_long_prompt_repeated_in_every_exchange_is_stored_once(tmp_path):
    system = "You grade answers. " * 40
    events = [
        event("T1-a", f"s{i}", f"out {i}")
        | {"messages": [{"role": "system", "content": system}, {"role": "human", "content": f"q{i}"}]}
        for i in range(5)
    ]
    d = make_run(tmp_path, "r", "atad", [atad_answer("T1-a", True)], events=events)
    p = run_payload(d)
    assert p["texts"] == [system]
    assert [e["messages"][0]["content"] for e in p["units"][0]["events"]] == [{"ref": 0}] * 5
    assert [e["messages"][1]["content"] for e in p["units"][0]["events"]] == [f"q{i}" for i in range(5)]
    assert write_view(d).read_text(encoding="utf-8").count("You grade answers.") == 40  # one copy in the page


def test_judgecheck_headline_names_each_judge_and_its_agreement_is_the_paired_outcome(tmp_path):
    metrics = {
        "raters": {
            "m0": {
                "measures": {
                    "accuracy": {"value": 0.5, "n": 2, "ungraded": 1},
                    "kappa": {"value": 0.1, "n": 2, "ungraded": 1},
                }
            }
        }
    }
    verdict = {"member": 0, "repeat": 0, "order": "original", "how": "judged"}
    records = [
        {"unit_id": "a", "status": "ok", "label": "3", "verdicts": [verdict | {"value": "3"}]},
        {"unit_id": "b", "status": "ok", "label": "1", "verdicts": [verdict | {"value": "2"}]},
        {"unit_id": "c", "status": "ok", "label": "1", "verdicts": [verdict | {"value": None, "how": "ungraded"}]},
    ]
    d = make_run(tmp_path, "j1", "judgecheck", records, metrics=metrics)
    head = run_payload(d)["headline"]
    assert [(m["name"], m["value"], m["denominator"]) for m in head] == [
        ("Accuracy of judge m0", 0.5, "n=2, 1 ungraded"),
        ("Cohen's kappa of judge m0", 0.1, "n=2, 1 ungraded"),
    ]
    d2 = make_run(
        tmp_path,
        "j2",
        "judgecheck",
        [r | {"verdicts": [verdict | {"value": r["label"]}]} for r in records],
        metrics=metrics,
    )
    (row,) = compare_payload([d, d2])["paired"]
    assert (row["n"], row["mean_baseline"], row["mean"]) == (2, 0.5, 1.0)  # the ungraded item is not paired


def test_outcome_columns_lead_and_meta_columns_come_last_hidden_until_chosen(tmp_path):
    record = {
        "unit_id": "u1",
        "status": "ok",
        "meta": {"source": "data.jsonl", "lang": "en"},
        "answer": "Paris",
        "n_words": 1,
        "verdict": "correct",
        "score": 0.5,
        "correct": True,
        "usage": {"calls": 2},
    }
    p = run_payload(make_run(tmp_path, "r", "toy", [record]))  # no adapter: the generic outcome fields lead
    assert p["columns"] == [
        "unit",
        "verdict",
        "correct",
        "score",
        "status",
        "answer",
        "n_words",
        "calls",
        "tokens",
        "wall s",
        "source",
        "lang",
    ]
    assert p["hidden"] == ["source", "lang"]
    assert p["units"][0]["row"]["source"] == "data.jsonl"  # hidden, not dropped: the chooser shows it


def _judgeagent_record(reason: bool) -> dict:
    why = {"reason": "names the queen"} if reason else {}
    return {
        "unit_id": "batch-1",
        "status": "ok",
        "meta": {"questions": ["q1"]},
        "score": 2.5,
        "answered": 4,
        "base": [
            {
                "id": "q1",
                "difficulty": "easy",
                "verdict": "correct",
                "correct": True,
                "gain": 1.0,
                "how": "evaluator",
                "reply": "B",
                **why,
            }
        ],
        "rounds": [
            {
                "question": "Why does the queen lay eggs?",
                "difficulty": "medium",
                "verdict": "wrong",
                "gain": 0.0,
                "how": "evaluator",
                "reply": "no idea",
                **why,
            }
        ],
        "validation": [
            {
                "id": "q1",
                "difficulty": "easy",
                "verdict1": "correct",
                "verdict2": "wrong",
                "how2": "evaluator",
                "reply2": "C",
            }
        ],
    }


@pytest.mark.parametrize("reason", [True, False])
def test_judgeagent_verdicts_show_question_text_and_reason_and_the_unit_score_is_on_the_headline_scale(
    reason, tmp_path
):
    units = [
        {
            "id": "batch-1",
            "meta": {"questions": ["q1"]},
            "input": {
                "batch": [
                    {"id": "q1", "question": "Who lays the eggs?", "options": ["A worker", "The queen"], "answer": "B"}
                ]
            },
        }
    ]
    p = run_payload(make_run(tmp_path, "r", "judgeagent", [_judgeagent_record(reason)], units=units))
    unit = p["units"][0]
    verdicts = next(s for s in unit["sections"] if s["title"].startswith("Verdicts"))
    rows = [dict(zip(verdicts["headers"], r)) for r in verdicts["rows"]]
    assert [r["question"] for r in rows] == [
        "Who lays the eggs?\nA. A worker\nB. The queen",
        "Why does the queen lay eggs?",
        "Who lays the eggs?\nA. A worker\nB. The queen",
    ]  # by text as the target read it, never by id
    if reason:
        assert [r["judge's reason"] for r in rows] == ["names the queen", "names the queen", None]
    else:
        assert "judge's reason" not in verdicts["headers"]
    # the per-unit sum of gains is named as such; the unit's score is the mean gain, as the headline's
    assert unit["row"]["JudgeAgent score"] == pytest.approx(2.5 / 4) and unit["row"]["sum of gains"] == 2.5
    assert "score" not in p["columns"] and p["columns"][:4] == [
        "unit",
        "JudgeAgent score",
        "sum of gains",
        "base accuracy",
    ]
    fields = next(s for s in unit["sections"] if s["title"] == "Record fields")
    assert "score" not in [f for f, _ in fields["rows"]]


def test_judgecheck_rows_show_the_verdict_and_whether_it_agrees_with_the_label(tmp_path):
    def verdict(value, order="original", member=0, repeat=0):
        return {
            "member": member,
            "model": "j@http://127.0.0.1:1/v1",
            "repeat": repeat,
            "order": order,
            "value": value,
            "how": "judged" if value else "ungraded",
            "reason": f"because {value}",
        }

    records = [
        {"unit_id": "a", "status": "ok", "label": "1", "verdicts": [verdict("1"), verdict("2", "swapped")]},
        {"unit_id": "b", "status": "ok", "label": "tie", "verdicts": [verdict("2", repeat=1), verdict("1")]},
        {"unit_id": "c", "status": "ok", "label": "2", "verdicts": [verdict(None)]},
        {
            "unit_id": "d",
            "status": "ok",
            "label": "2",
            "verdicts": [verdict("1")],
            "jury": [{"repeat": 0, "order": "original", "value": "2"}],
        },
    ]
    p = run_payload(make_run(tmp_path, "j", "judgecheck", records))
    rows = {u["id"]: u["row"] for u in p["units"]}
    assert [(rows[i]["verdict"], rows[i]["agree"]) for i in "abcd"] == [
        ("1", "agree"),
        ("1", "disagree"),
        ("ungraded", "ungraded"),
        ("2", "agree"),
    ]  # d: the jury decides
    assert rows["a"]["verdict (swapped)"] == "2" and p["columns"][:5] == [
        "unit",
        "verdict",
        "verdict (swapped)",
        "label",
        "agree",
    ]
    section = next(s for s in p["units"][0]["sections"] if s["title"].startswith("Verdicts and the judges' reasons"))
    assert [(r[2], r[3], r[4], r[6]) for r in section["rows"]] == [
        ("original", "1", "agree", "because 1"),
        ("swapped", "2", "disagree", "because 2"),
    ]


def test_headline_metric_carries_the_interval_the_run_wrote(tmp_path):
    interval = {"estimate": 0.5, "low": 0.2, "high": 0.8, "n": 10, "level": 0.95, "method": "clopper-pearson"}
    metrics = {"S": 50.0, "R": 90.0, "sessions_scored": 10, "intervals": {"S": interval}}
    head = {m["name"]: m for m in run_payload(make_run(tmp_path, "r", "llmeval", [], metrics=metrics))["headline"]}
    assert head["Absolute score S"]["interval"] == interval
    assert head["Relative score R"]["interval"] is None  # none written: none shown, never invented


def test_no_absolute_path_of_the_machine_reaches_a_page(tmp_path, monkeypatch):
    home = tmp_path / "work"
    (home / "data").mkdir(parents=True)
    monkeypatch.chdir(home)
    out = tmp_path / "runs"
    record = atad_answer("T1-a", True) | {
        "meta": {"task": "T1", "bench_file": str(home / "data" / "b.jsonl")},
        "error": f"cannot read {tmp_path / 'elsewhere.jsonl'}",
    }
    d = make_run(
        out,
        "r",
        "atad",
        [record],
        metrics={"inputs": {str(home / "data" / "b.jsonl"): "given"}},
        events=[event("T1-a", "s", f"see {out / 'r' / 'events.jsonl'} and /v1/chat/completions")],
    )
    make_run(out, "r2", "atad", [atad_answer("T1-a", False)])
    pages = [
        write_view(d),
        cli_page(["--compare", "r", "r2", "--out", str(out)], out, "compare-*.html"),
        cli_page(["--index", str(out)], out, "index.html"),
    ]
    for page in pages:
        assert str(tmp_path) not in page.read_text(encoding="utf-8"), page.name
    text = pages[0].read_text(encoding="utf-8")
    assert "data/b.jsonl" in text  # under the working directory: relative to it
    assert "../../elsewhere.jsonl" in text and "./events.jsonl" in text  # elsewhere: relative to the run
    assert "/v1/chat/completions" in text  # not a path of this machine: as it was


def cli_page(argv: list[str], out: Path, pattern: str) -> Path:
    assert cli.main(argv) == 0
    (page,) = out.glob(pattern)
    return page


def test_relative_paths_leave_urls_relative_paths_and_fractions_alone(tmp_path):
    from dyneval.results.view.paths import Relative

    rel = Relative(tmp_path / "out" / "run", cwd=tmp_path / "cwd")
    assert rel(f"at {tmp_path}/out/run/x.json") == "at ./x.json"
    assert rel({f"{tmp_path}/cwd/a.csv": [f"m.{tmp_path}/cwd/b"]}) == {"a.csv": ["m.b"]}  # keys, dotted keys
    for kept in ("http://127.0.0.1:1/v1", "./x/y", "../x/y", "a/b", "1/2", "/nonexistent-root/x"):
        assert rel(kept) == kept


def test_run_index_lists_every_run_newest_first_with_status_headline_interval_and_cost(tmp_path, capsys):
    from dyneval.results.view.index import index_payload

    interval = {"estimate": 0.5, "low": 0.25, "high": 0.75, "n": 2, "level": 0.95, "method": "clopper-pearson"}
    d = make_run(
        tmp_path,
        "20260101-000000-atad-aaaa",
        "atad",
        [atad_answer("T1-a", True)],
        metrics={"finalized": 1, "items": 2, "intervals": {"finalized": interval}},
    )
    summary = json.loads((d / "summary.json").read_text())
    summary["usage"] = {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.25}
    (d / "summary.json").write_text(json.dumps(summary))
    partial = make_run(
        tmp_path,
        "20260102-000000-atad-bbbb",
        "atad",
        [atad_answer("T1-a", True)],
        units=[{"id": "T1-a"}, {"id": "T2-b"}],
    )
    (partial / "summary.json").unlink()  # running, or killed before its end
    (tmp_path / "_cache").mkdir()  # not a run
    rows = index_payload(tmp_path)["runs"]
    assert [r["run_id"] for r in rows] == [partial.name, d.name]
    assert rows[0]["status"].startswith("no summary") and "1 of 2 units" in rows[0]["status"]
    assert rows[1]["status"] == "finished: ok=1" and rows[1]["started"] == "2026-01-01 00:00 UTC"
    assert rows[1]["headline"][0] == {
        "name": "Finalized problems",
        "value": 1,
        "denominator": "n=2",
        "low": 0.25,
        "high": 0.75,
        "n": 2,
    }
    assert rows[1]["cost"] == "$0.25; 3 calls, 15 tokens"
    assert cli.main(["--index", str(tmp_path)]) == 0 and (tmp_path / "index.html").is_file()
    assert cli.main(["--index", str(tmp_path / "nope")]) == 2


def test_run_dir_reads_the_latest_record_of_each_unit_in_plan_order_skipping_torn_lines(tmp_path):
    from dyneval.stores.rundir import RunDir

    d = make_run(
        tmp_path,
        "r",
        "atad",
        [atad_answer("T2-b", False), atad_answer("T1-a", False)],
        units=[{"id": "T1-a"}, {"id": "T2-b"}, {"id": "T3-c"}],
    )
    with (d / "results.jsonl").open("a", encoding="utf-8") as fh:  # T1-a resumed and finished again, then a cut
        fh.write(
            json.dumps(atad_answer("T1-a", True))
            + "\n"
            + json.dumps(atad_answer("T9-z", True))
            + "\n"
            + '{"unit_id": "T3-c", "sta'
        )
    run = RunDir(d)
    assert [(r["unit_id"], r["correct"]) for r in run.records()] == [("T1-a", True), ("T2-b", False), ("T9-z", True)]
    assert [u["id"] for u in run.units().unfinished()] == ["T3-c"]
    assert run.protocol == "atad" and run.summary().units == 2


def test_comparison_legend_says_what_tells_the_runs_apart(tmp_path):
    a = make_run(tmp_path, "a", "atad", [atad_answer("T1-a", True)])
    b = make_run(tmp_path, "b", "atad", [atad_answer("T1-a", True)])
    for d, examinee in ((a, "ex_a"), (b, "ex_b")):
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps(summary | {"models": {"student": examinee, "teacher": "t"}}))
    config = json.loads((b / "config.json").read_text())
    (b / "config.json").write_text(json.dumps(config | {"params": {"per_task": 2}}))
    assert [r["differs"] for r in compare_payload([a, b])["runs"]] == ["student: ex_a", "student: ex_b, per_task=2"]
