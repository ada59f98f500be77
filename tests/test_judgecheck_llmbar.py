"""Acceptance: the judge check reproduces LLMBar's published GPT-4 statistics on the 200 MT-Bench pairs.

GPT-4's stored verdicts (``Processed_MT-Bench.GPT-4_Vanilla_NoRules.result.json``: per pair, the winner in
the original order and, mapped back to the original numbering, with the outputs swapped) are replayed
through a stand-in endpoint: for each request it finds the pair and the order it shows (by the exact
rendered pairwise prompt) and calls the tool with the stored winner as GPT-4 saw it (A = shown first).
The judge check then has to give exactly the statistics file's numbers.

Kappa: LLMBar's evaluate.py encodes a winner as ``int(w) if w in ("0", "1") else 0`` (so winner "2" becomes 0)
and compares it with the labels 1 / 2 unchanged; its published 0.199 / 0.216 are Cohen's kappa over that
mismatched encoding, reproduced here from the run's verdicts. Over one encoding the judge check's kappa is
0.590 / 0.650 (and 0.740 between the orders, the file's ``kappa_agreement``).
"""

from __future__ import annotations

import json

import pytest
from sklearn.metrics import cohen_kappa_score

from dyneval.cli import main
from dyneval.prompts import load_prompt
from tests.standin_endpoint import StandIn

DATA = "llmbar/Processed_MT-Bench.json"
RESULT = "llmbar/Processed_MT-Bench.GPT-4_Vanilla_NoRules.result.json"
STATS = "llmbar/Processed_MT-Bench.GPT-4_Vanilla_NoRules.statistics.json"


def _user_text(instruction: str, first: str, second: str) -> str:
    messages = load_prompt("judgecheck/evaluator_pairwise").render(
        instruction=instruction, output_a=first, output_b=second
    )
    return str(messages[-1].content)


def replay(results: list[dict]) -> dict[str, str]:
    """Rendered user message -> the stored winner as shown (A = first output on screen).

    Five pairs occur twice with their outputs in the other order; GPT-4's stored verdicts on the same screen
    agree there, so one reply per screen replays all 400 verdicts.
    """
    shown: dict[str, str] = {}
    for r in results:
        final = r["results"][-1]
        original, swapped = final["swap = False"]["winner"], final["swap = True"]["winner"]
        # swapped: output_2 is shown first, so the original "1" is B on screen
        for text, winner in (
            (_user_text(r["input"], r["output_1"], r["output_2"]), {"1": "A", "2": "B"}[original]),
            (_user_text(r["input"], r["output_2"], r["output_1"]), {"1": "B", "2": "A"}[swapped]),
        ):
            assert shown.setdefault(text, winner) == winner
    return shown


@pytest.fixture
def llmbar_run(shared_data, tmp_path):
    results = json.loads((shared_data / RESULT).read_text())
    shown = replay(results)

    def respond(body: dict) -> dict | None:
        if not body.get("tools"):
            return None  # the pre-flight ping
        winner = shown[body["messages"][-1]["content"]]
        args = json.dumps({"winner": winner, "reason": "stored GPT-4 verdict"})
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_replay", "type": "function", "function": {"name": "PairwiseVerdict", "arguments": args}}
            ],
        }

    with StandIn(respond=respond) as standin:
        rc = main(
            [
                "--protocol",
                "judgecheck",
                "--judge",
                "pairwise",
                "--labels",
                str(shared_data / DATA),
                "--evaluator",
                standin.spec("gpt-4-replay"),
                "--out",
                str(tmp_path),
                "--concurrency",
                "4",
                "--bootstrap-resamples",
                "200",
            ]
        )
        requests = len(standin.ok_requests())
    assert rc == 0
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return summary, records, results, requests


def test_replayed_gpt4_verdicts_reproduce_llmbars_published_mt_bench_statistics(llmbar_run, shared_data):
    summary, records, results, requests = llmbar_run
    stats = json.loads((shared_data / STATS).read_text())
    assert requests == 1 + 2 * 200  # the ping, then each pair in both orders, no repair
    assert summary["status_counts"] == {"ok": 200}
    m = summary["metrics"]["raters"]["m0"]["measures"]
    assert m["accuracy_original"]["n"] == m["accuracy_swapped"]["n"] == 200
    assert round(m["accuracy_original"]["value"] * 100, 1) == 79.5 == float(stats["correct_False"].split("= ")[1][:-1])
    assert round(m["accuracy_swapped"]["value"] * 100, 1) == 82.5 == float(stats["correct_True"].split("= ")[1][:-1])
    assert round(m["accuracy_mean"]["value"] * 100, 1) == 81.0 == float(stats["correct_average"][:-1])
    assert round(m["both_orders_correct"]["value"] * 100, 1) == 74.5 == float(stats["correct_both"].split("= ")[1][:-1])
    assert round(m["swap_consistency"]["value"] * 100, 1) == 87.0 == float(stats["equal"].split("= ")[1][:-1])
    assert m["kappa_between_orders"]["value"] == pytest.approx(stats["kappa_agreement"], abs=1e-12)
    for key in ("accuracy_original", "accuracy_mean", "swap_consistency"):
        assert m[key]["low"] < m[key]["value"] < m[key]["high"]

    # the published kappas: LLMBar's encoding of the run's own verdicts
    by_id = {r["item_id"]: r for r in records}
    labels = [int(r["label"]) for r in results]
    for order, published in (("original", stats["kappa_False"]), ("swapped", stats["kappa_True"])):
        winners = [
            next(v["value"] for v in by_id[f"item{n:04d}"]["verdicts"] if v["order"] == order)
            for n in range(1, len(results) + 1)
        ]
        encoded = [int(w) if w in ("0", "1") else 0 for w in winners]
        assert cohen_kappa_score(encoded, labels) == pytest.approx(published, abs=1e-12)
        assert round(published, 3) in (0.199, 0.216)
        # the judge check's own kappa: verdicts and labels on one scale
        assert m[f"kappa_{order}"]["value"] == pytest.approx(cohen_kappa_score(winners, [str(x) for x in labels]))
    assert round(m["kappa_original"]["value"], 3) == 0.590 and round(m["kappa_swapped"]["value"], 3) == 0.650
