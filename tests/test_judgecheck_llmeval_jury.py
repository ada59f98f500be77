"""A jury inside a protocol's judging step: LLMEval's --judge-jury rates each answer by majority vote of the
judges' stars; a vote without a majority leaves the answer unscored as ``split`` (final, never a score)."""

from __future__ import annotations

from dyneval.nodes.llmeval.judge import code_verdict
from dyneval.stores.question_bank import QuestionBank
from tests.fakes import ScriptedChat
from tests.test_llmeval_graph import ctx_for, new_bank, run_session

JURY = [f"judge-{x}@http://127.0.0.1:9/v1" for x in "abc"]


def rater(stars: int) -> ScriptedChat:
    return ScriptedChat(lambda m, t: {"rating": stars, "reason": f"{stars} stars"})


def _session(tmp_path, name, stars):
    bank_path = new_bank(tmp_path / name)
    chats = {
        "target": ScriptedChat(lambda m, t: "I think the answer is true."),
        **{ref: rater(k) for ref, k in zip(JURY, stars)},
    }
    ctx = ctx_for(tmp_path / name, bank_path, chats, questions=12, judge_jury=JURY)
    final = run_session(ctx, name)
    return final, QuestionBank(bank_path).judged_items(name), chats


def test_the_majority_of_the_judges_stars_rates_each_answer(tmp_path):
    final, rows, chats = _session(tmp_path, "agree", (3, 3, 0))
    free = [r for r in rows if code_verdict({**r, "response": r["response"]}) is None]
    assert free and all(r["stars"] == 3 and r["reason"].startswith("jury majority (3, 3, 0)") for r in free)
    assert all(len(chats[ref].calls) == len(rows) for ref in JURY)  # every judge rated every answer once
    assert final["ungraded"] == 0 and final["scores"]["judge_status"].get("split") is None


def test_a_split_jury_leaves_the_answer_unscored_never_a_score(tmp_path):
    final, rows, _ = _session(tmp_path, "split", (1, 2, 3))
    free = [r for r in rows if code_verdict({**r, "response": r["response"]}) is None]
    assert free and all(r["stars"] is None and r["judge_status"] == "split" for r in free)
    assert all("votes 1, 2, 3" in r["reason"] for r in free)
    # a right/wrong answer decided in code bands the votes (correct 2-3, wrong 0-1), so the jury agrees there
    banded = [r for r in rows if r not in free]
    assert all(r["stars"] is not None for r in banded)
    scores = final["scores"]
    assert scores["judge_status"]["split"] == len(free) and scores["N"] == len(banded)
    assert final["ungraded"] == 0  # a split is a final outcome, not a judge failure to re-judge
