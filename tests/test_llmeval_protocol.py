"""The llmeval protocol through the runner with fake models: batch sessions, leaderboard, stability,
kappa, contamination, export, the --serve mode, and checks against real public data when present."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from dyneval.protocols.llmeval.analyses import contamination_test, public_questions
from dyneval.protocols.llmeval.metrics import cohen_kappa, mask_tail
from dyneval.protocols.llmeval.protocol import LLMEvalProtocol
from dyneval.runtime.config_loader import load_config
from dyneval.runtime.runner import execute, open_run
from dyneval.state.errors import InputError
from dyneval.stores.question_bank import QuestionBank
from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
CLI = [
    sys.executable,
    "-c",
    "import sys, dyneval.protocols as protocols, dyneval.cli as run; "
    "run.available = lambda: {'llmeval': protocols.protocol_class('llmeval')}; sys.exit(run.main(sys.argv[1:]))",
]
JUDGE_RE = re.compile(r"Model's answer: (.*?)\n\nReference answer: (.*?)\n\n", re.S)


def star_judge(messages, tool):
    response, reference = JUDGE_RE.search(all_text(messages)).groups()
    key = reference.split(" (")[0].strip().lower()
    return {"rating": 3 if key in response.lower() else 0, "reason": "compared"}


def oracle(messages, tool):
    """Knows every reference answer; answers the question asked last (after any few-shot examples)."""
    text = all_text(messages)
    recs = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    asked = max(recs, key=lambda rec: text.rfind(rec["question"]))
    return f"{asked['answer']}. Because of the definition."


def run_protocol(
    tmp_path: Path, params: dict, chats: dict | None = None, *, resume: str | None = None
) -> tuple[dict, Path, Console]:
    config = load_config(
        "llmeval",
        config_file=None,
        environ={},
        flags={"out": str(tmp_path / "runs"), "params": {"near_dup_threshold": 0, **params}},
    )
    console = Console(record=True, width=200)
    protocol = LLMEvalProtocol()
    run = open_run(
        protocol, config, run_id=resume, console=console, chat_overrides=chats or {}, retry_sleep=lambda s: None
    )
    summary = execute(protocol, run, skip_preflight=True)
    return summary, run.run_dir, console


def fake_chats() -> dict:
    return {
        "target": ScriptedChat(lambda m, t: "true. I am fairly sure."),
        "evaluator": ScriptedChat(star_judge),
        "reference": ScriptedChat(oracle),
    }


def test_batch_run_scores_every_paradigm_and_reports_the_leaderboard(tmp_path):
    summary, run_dir, _ = run_protocol(
        tmp_path, {"questions": 6, "paradigm": "all", "reference_model": "ref"}, fake_chats()
    )
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["unit_id"] for r in records) == ["cot-1", "few-shot-1", "zero-shot-1"]
    assert all(r["status"] == "ok" and r["N"] == 6 and r["S_ref"] == pytest.approx(100.0) for r in records)
    assert all(r["R"] == pytest.approx(r["S"]) for r in records)  # the oracle reference scores 100
    m = summary["metrics"]
    assert set(m["paradigms"]) == {"zero-shot", "few-shot", "cot"}
    assert m["S"] == pytest.approx(sum(r["S"] for r in records) / 3)
    board = {row["model"]: row for row in m["leaderboard"]}
    assert set(board) == {"fake:target", "fake:reference"} and board["fake:reference"]["R"] == pytest.approx(100.0)
    report = (run_dir / "report.md").read_text()
    assert "Leaderboard" in report and "Table 2 style" in report and "Per-discipline" in report
    bank = QuestionBank(tmp_path / "runs" / "_cache" / "llmeval_bank.sqlite")
    assert bank.count() == 36  # the shipped sample was imported into the empty default bank
    # a second run on the same --out: the target is never asked a question twice, nor one it was shown as a
    # few-shot example, until the bank is exhausted (3 x 6 asked + examples, then 2 x 6 more)
    run_protocol(tmp_path, {"questions": 6, "sessions": 2}, fake_chats())
    sessions = bank.sessions_of("fake:target")
    asked = [u for s in sessions for u in bank.question_ids(s["session_id"])]
    assert len(asked) == 30 and len(set(asked)) == 30
    for i, s in enumerate(sessions):
        later = {u for t in sessions[i:] for u in bank.question_ids(t["session_id"])}
        assert not set(s["fewshot"]) & later
    # leaderboard and stability modes over what the bank now holds
    summary, run_dir, console = run_protocol(
        tmp_path,
        {"leaderboard": True, "stability": True, "sizes": "6,18", "trials": 2, "reference_model": "ref"},
        fake_chats(),
    )
    text = console.export_text()
    assert "llmeval leaderboard" in text and "fake:reference" in text
    out = json.loads((run_dir / "summary.json").read_text())
    st = out["stability"]
    assert st["reference"] == "fake:reference" and st["pool"] == 18 and set(st["sizes"]) == {"6", "18"}
    assert st["sizes"]["18"]["spearman_relative"] == pytest.approx(1.0)
    assert st["full"]["fake:reference"] == pytest.approx(100.0)
    assert "Ranking stability" in (run_dir / "report.md").read_text()


def test_kappa_mode_matches_human_labels_to_judged_answers(tmp_path):
    run_protocol(tmp_path, {"questions": 8}, fake_chats())
    bank = QuestionBank(tmp_path / "runs" / "_cache" / "llmeval_bank.sqlite")
    session = bank.sessions_of("fake:target")[0]
    items = bank.judged_items(session["session_id"])
    human = [i["stars"] if k < 6 else (i["stars"] + 1) % 4 for k, i in enumerate(items)]
    labels = tmp_path / "labels.jsonl"
    rows = [{"session_id": session["session_id"], "position": i["position"], "label": h} for i, h in zip(items, human)]
    rows.append({"model": "nobody", "question_uuid": "none", "label": 1})
    labels.write_text("\n".join(json.dumps(r) for r in rows))
    summary, run_dir, _ = run_protocol(tmp_path, {"kappa": str(labels)})
    got = json.loads((run_dir / "summary.json").read_text())["kappa"]
    assert got["matched"] == 8 and got["unmatched"] == 1 and got["agreement"] == pytest.approx(6 / 8)
    assert got["kappa"] == pytest.approx(cohen_kappa(human, [i["stars"] for i in items]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"model": "m", "question_uuid": "q", "label": 9}))
    with pytest.raises(InputError, match="record 1, field 'label'"):
        run_protocol(tmp_path, {"kappa": str(bad)})


def test_contamination_replay_counts_questions_recalled_in_two_of_three_attempts(tmp_path):
    public = [
        "the mitochondria is widely known as the powerhouse of the living cell in biology class",
        "to be or not to be that is the question whether it is nobler in the mind to suffer",
        "four score and seven years ago our fathers brought forth on this continent a new nation",
    ]
    calls = {"n": 0}

    def memoriser(messages, tool):
        calls["n"] += 1
        text = all_text(messages)
        for p in public:
            prefix, tail = mask_tail(p)
            if prefix in text:  # remembers public texts, but only in two attempts out of three
                return tail if calls["n"] % 3 else "something else entirely here"
        return "no memory of this question at all"

    svc = make_services(tmp_path, chats={"target": ScriptedChat(memoriser)})
    bank_texts = [json.loads(x)["question"] for x in SAMPLE.read_text().splitlines()]
    out = contamination_test(svc.llm("target"), {"public": public, "bank": bank_texts}, per_set=10, concurrency=1)
    assert out["public"]["tested"] == 3 and out["bank"]["tested"] == 10
    assert out["bank"]["recalled"] == 0
    assert calls["n"] == 3 * 13  # three attempts per tested question
    assert 1 <= out["public"]["recalled"] <= 3
    hits = [e["hits"] for e in out["public"]["examples"]]
    assert out["public"]["recalled"] == sum(h >= 2 for h in hits)


def test_contamination_mode_and_export_run_through_the_protocol(tmp_path):
    public = tmp_path / "public.jsonl"
    public.write_text(
        "\n".join(
            json.dumps(
                {"question": f"public question number {i} asks about a well known fact of the world and its history"}
            )
            for i in range(4)
        )
    )
    summary, run_dir, console = run_protocol(
        tmp_path,
        {"contamination": str(public), "questions": 3, "export": str(tmp_path / "bank_export.jsonl")},
        {"target": ScriptedChat(lambda m, t: "a fact of the world")},
    )
    out = json.loads((run_dir / "summary.json").read_text())
    assert out["contamination"]["public"]["tested"] == 3 and out["contamination"]["bank"]["tested"] == 3
    assert out["exported"] == 36 and len((tmp_path / "bank_export.jsonl").read_text().splitlines()) == 36
    assert "replay public" in console.export_text()


def test_serve_mode_starts_the_exam_server_on_loopback(tmp_path):
    from dyneval.runtime.embedded import free_port

    port = free_port()
    env = {**os.environ, "DYNEVAL_LLMEVAL_JWT_SECRET": "s" * 40}
    proc = subprocess.Popen(
        [
            *CLI,
            "--protocol",
            "llmeval",
            "--serve",
            "--port",
            str(port),
            "--out",
            str(tmp_path / "runs"),
            "--near-dup-threshold",
            "0",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # start-up imports are slow on a loaded machine
        health = None
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert health == {"ok": True, "questions": 36}
        token = next((tmp_path / "runs").glob("*/admin_token")).read_text().strip()
        r = httpx.post(
            f"http://127.0.0.1:{port}/admin/sessions",
            json={"model": "m", "questions": 2},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert r.status_code == 200 and r.json()["allocated"] == 2
        assert httpx.get(f"http://127.0.0.1:{port}/admin/leaderboard", timeout=5).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_kappa_code_reproduces_llmbar_published_agreement(shared_data):
    """LLMBar's MT-Bench statistics: GPT-4 agrees with itself across swapped orders with kappa 0.7401
    and with the human majority label on 79.5 % / 82.5 % of the 200 pairs."""
    folder = shared_data / "llmbar"
    results = json.loads((folder / "Processed_MT-Bench.GPT-4_Vanilla_NoRules.result.json").read_text())
    stats = json.loads((folder / "Processed_MT-Bench.GPT-4_Vanilla_NoRules.statistics.json").read_text())
    human = [r["label"] for r in results]
    plain = [int(r["results"][0]["swap = False"]["winner"]) for r in results]
    swapped = [int(r["results"][0]["swap = True"]["winner"]) for r in results]
    assert cohen_kappa(plain, swapped) == pytest.approx(stats["kappa_agreement"], abs=1e-9)
    assert sum(a == b for a, b in zip(plain, human)) / 200 == pytest.approx(0.795)
    assert sum(a == b for a, b in zip(swapped, human)) / 200 == pytest.approx(0.825)


def test_public_agieval_set_is_readable_for_the_replay_test(shared_data):
    path = shared_data / "agieval_en" / "lsat-lr.jsonl"
    texts = public_questions(path)
    assert len(texts) == len([x for x in path.read_text().splitlines() if x.strip()])
    assert sum(mask_tail(t) is not None for t in texts) > len(texts) * 0.9


def test_dry_run_lists_one_session_per_paradigm_and_bad_flags_exit_2(tmp_path):
    base = [*CLI, "--protocol", "llmeval", "--out", str(tmp_path / "runs")]
    dry = subprocess.run(
        [*base, "--dry-run", "--questions", "5", "--paradigm", "all", "--sessions", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0, dry.stderr
    flat = " ".join(dry.stdout.split())  # rich wraps long lines
    assert "units: 6" in flat and "at most 10: 5 answers and 5 judgements" in flat and "fewer when the bank" in flat
    for unit in ("zero-shot-1", "few-shot-2", "cot-2"):
        assert unit in dry.stdout
    bad = subprocess.run(
        [*base, "--dry-run", "--reference-model", "no-such-model"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no-such-model" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run(
        [*base, "--kappa", str(tmp_path / "none.jsonl"), "--near-dup-threshold", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and all(x in bad.stderr for x in ("none.jsonl", "--kappa", "file not found"))


def test_a_resume_neither_reprints_nor_rewrites_the_import_of_its_bank_file(tmp_path):
    """The resume imports the file again (every record now an exact duplicate): the console says so in one line,
    not one line per record, and import_report.txt keeps what the run's own import did."""
    bank_file = tmp_path / "bank.jsonl"
    bank_file.write_text(
        "".join(
            json.dumps(
                {
                    "discipline": "Science",
                    "question": f"Is {n} an even number?",
                    "qtype": "true_false",
                    "answer": str(n % 2 == 0).lower(),
                }
            )
            + "\n"
            for n in range(6)
        )
    )
    params = {"bank": str(bank_file), "sessions": 1, "questions": 3}
    _, run_dir, _ = run_protocol(tmp_path, params, fake_chats())
    first = (run_dir / "import_report.txt").read_text()
    assert "6 imported" in first
    _, resumed_dir, console = run_protocol(tmp_path, params, fake_chats(), resume=run_dir.name)
    text = console.export_text()
    assert resumed_dir == run_dir and (run_dir / "import_report.txt").read_text() == first
    assert "exact duplicate" not in text
    assert (
        "bank.jsonl: 6 records: 0 imported, 6 duplicates skipped, 0 rejected; 0 true/false variants added "
        "(imported when this run started: import_report.txt)" in text
    )


def test_import_with_augmentation_and_rewrite_through_the_protocol(tmp_path):
    bank_file = tmp_path / "mixed.jsonl"
    bank_file.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "discipline": "Economics",
                    "qtype": "material",
                    "question": "Read the material on the 1970s oil shock and analyse why inflation rose.",
                    "answer": "Oil prices quadrupled, raising costs; wages followed prices.",
                },
                {
                    "discipline": "Science",
                    "question": "Water boils at ( ) degrees Celsius at sea level.",
                    "options": ["90", "100", "110"],
                    "answer": "B",
                },
            ]
        )
    )
    teacher = ScriptedChat(
        lambda m, t: {
            "statements": [
                "Oil prices rose sharply in the 1970s oil shock.",
                "Wages fell as prices rose in the material.",
            ],
            "truths": [True, False],
        }
    )
    _, run_dir, console = run_protocol(
        tmp_path, {"bank": str(bank_file), "augment": True, "rewrite": True, "import_only": True}, {"teacher": teacher}
    )
    bank = QuestionBank(tmp_path / "runs" / "_cache" / "llmeval_bank.sqlite")
    kids = [q for q in bank.all_questions() if q.parent_uuid]
    assert sorted(q.answer for q in kids) == ["false", "false", "false", "true", "true"]  # 3 MCQ + 2 rewritten
    assert bank.count() == 2 + 3 + 2 - 1  # the MCQ parent is replaced by its variants
    assert "2 imported" in console.export_text() and (run_dir / "import_report.txt").exists()
