"""The exam graph with fake models: anti-leak, paradigms, judge rules, scores, resume, calibration."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from dyneval.graphs.llmeval import builder
from dyneval.nodes.llmeval.bankio import import_file
from dyneval.nodes.llmeval.judge import code_verdict, judge_item, response_letters, response_verdict
from dyneval.protocols.llmeval.analyses import leaderboard, score_matrix
from dyneval.protocols.llmeval.metrics import spearman, stability
from dyneval.protocols.llmeval.protocol import LLMEvalProtocol
from dyneval.state.errors import InfraError
from dyneval.state.llmeval import LLMEvalContext
from dyneval.stores.question_bank import QuestionBank
from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
JUDGE_RE = re.compile(r"Model's answer: (.*?)\n\nReference answer: (.*?)\n\n", re.S)


def new_bank(tmp_path: Path, augment: bool = False) -> Path:
    path = tmp_path / "bank.sqlite"
    import_file(QuestionBank(path), SAMPLE, augment=augment)
    return path


def ctx_for(tmp_path: Path, bank_path: Path, chats: dict, **kw) -> LLMEvalContext:
    svc = make_services(tmp_path, protocol="llmeval", chats=chats)
    return LLMEvalContext(services=svc, bank_db=str(bank_path), **kw)


def run_session(ctx: LLMEvalContext, session_id: str, **inputs) -> dict:
    graph = builder.compile(checkpointer=InMemorySaver())
    return graph.invoke({"session_id": session_id, **inputs}, {"configurable": {"thread_id": session_id}}, context=ctx)


def star_judge(messages, tool):
    """A fake judge: 3 stars when the answer contains the reference answer's first words, else 0."""
    response, reference = JUDGE_RE.search(all_text(messages)).groups()
    key = reference.split(" (")[0].strip().lower()
    return {"rating": 3 if key and key in response.lower() else 0, "reason": "compared with the reference"}


def test_answers_and_explanations_never_reach_the_target(tmp_path):
    bank_path = new_bank(tmp_path)
    target = ScriptedChat(lambda m, t: "I think the answer is true.")
    ctx = ctx_for(tmp_path, bank_path, {"target": target, "evaluator": ScriptedChat(star_judge)}, questions=36)
    final = run_session(ctx, "leak")
    bank = QuestionBank(bank_path)
    asked = [bank.get(u) for u in bank.question_ids("leak")]
    assert len(target.calls) == 36
    for (messages, _), q in zip(target.calls, asked):
        text = all_text(messages)
        assert q.question in text  # each call carries exactly its own question, in the fixed order
        assert q.explanation not in text
        if q.qtype == "mcq":  # the key letter is also an option label; it must never be named as the answer
            assert not re.search(rf"answer\W*{q.answer}\b", text, re.I), q.uuid
        elif q.answer.lower() not in q.question.lower():
            assert q.answer.lower() not in text.lower(), (q.uuid, q.answer)
    assert not {"answer", "explanation", "reference"} & set(final)  # the graph state holds ids and counts only


def test_paradigms_build_zero_shot_few_shot_and_cot_prompts(tmp_path):
    bank_path = new_bank(tmp_path)
    bank = QuestionBank(bank_path)
    seen: dict[str, list[list[BaseMessage]]] = {}
    for paradigm in ("zero-shot", "few-shot", "cot"):
        target = ScriptedChat(lambda m, t: "false")
        ctx = ctx_for(
            tmp_path, bank_path, {"target": target, "evaluator": ScriptedChat(star_judge)}, questions=4, fewshot_k=2
        )
        run_session(ctx, f"p-{paradigm}", paradigm=paradigm, model=f"m-{paradigm}")
        seen[paradigm] = [m for m, _ in target.calls]
    zs, fs, cot = (all_text(seen[p][0]) for p in ("zero-shot", "few-shot", "cot"))
    assert "step by step" in cot and "step by step" not in zs
    session = bank.session("p-few-shot")
    examples = [bank.get(u) for u in session["fewshot"]]
    assert len(examples) == 2 and not set(session["fewshot"]) & set(bank.question_ids("p-few-shot"))
    assert all(e.question in fs for e in examples) and "solved exam questions" in fs
    assert all(e.question not in zs for e in examples)


def test_code_checks_bound_the_judge_for_true_false_and_multiple_choice():
    assert response_verdict("False. A stack is LIFO.") is False
    assert response_verdict("This is true because ...") is True
    assert response_verdict("It depends.") is None
    assert response_letters("The answer is C because ...") == "C"
    assert response_letters("(B) log2 n") == "B"
    assert response_letters("Answer: D. satire") == "D" and response_letters("I pick option A.") == "A"
    assert response_letters("C") == "C" and response_letters("B.\nbecause ...") == "B"
    assert response_letters("A metaphor compares two things.") is None  # the article is not an option
    assert response_letters("The answer is a tragedy.") is None
    tf = {"qtype": "true_false", "answer": "false", "question": "q", "explanation": ""}
    assert code_verdict({**tf, "response": "true, because"}) is False
    assert code_verdict({**tf, "response": "False."}) is True
    generous = ScriptedChat(lambda m, t: {"rating": 3, "reason": "looks fine"})
    harsh = ScriptedChat(lambda m, t: {"rating": 0, "reason": "bad"})
    svc = make_services(Path("/tmp"), chats={"evaluator": generous, "grader": harsh})
    stars, reason, status = judge_item(svc.llm("evaluator"), {**tf, "response": "true, because"})
    assert (stars, status) == (1, "banded")  # a wrong verdict cannot earn 2-3 stars
    stars, _, status = judge_item(svc.llm("grader"), {**tf, "response": "False: it is LIFO"})
    assert (stars, status) == (2, "banded")  # a correct verdict earns at least 2
    stars, _, status = judge_item(svc.llm("evaluator"), {**tf, "response": "   "})
    assert (stars, status) == (0, "empty")
    mcq = {"qtype": "mcq", "answer": "B", "question": "q", "explanation": "", "options": ["a", "b"]}
    assert judge_item(svc.llm("grader"), {**mcq, "response": "B"})[0] == 2


def test_invalid_judge_output_leaves_every_answer_ungraded_even_where_code_could_check_it(tmp_path):
    bank_path = new_bank(tmp_path)
    broken_judge = ScriptedChat(lambda m, t: {"rating": 7, "reason": "out of range"})
    ctx = ctx_for(
        tmp_path,
        bank_path,
        {"target": ScriptedChat(lambda m, t: "true, because of the rules"), "evaluator": broken_judge},
        questions=36,
    )
    final = run_session(ctx, "broken")
    items = QuestionBank(bank_path).judged_items("broken")
    assert items and all(i["stars"] is None and i["judge_status"] == "ungraded" for i in items)
    scores = final["scores"]
    assert scores["S"] is None and scores["N"] == 0  # no score from zero scored answers, never 0 or 100
    assert scores["ungraded"] == len(items) == final["ungraded"]
    assert LLMEvalProtocol().ungraded(final) == len(items)
    assert QuestionBank(bank_path).sessions_of()[0]["scores"] in (None, {})  # nothing for the leaderboard


def test_relative_score_uses_the_reference_model_on_the_same_questions(tmp_path):
    bank_path = new_bank(tmp_path)
    bank = QuestionBank(bank_path)
    answers = {q.question: q.answer for q in bank.all_questions()}

    def oracle(messages, tool):
        text = all_text(messages)
        return next(a for qtext, a in answers.items() if qtext in text) + ". That is the reason."

    ctx = ctx_for(
        tmp_path,
        bank_path,
        {
            "target": ScriptedChat(lambda m, t: "no idea"),
            "evaluator": ScriptedChat(star_judge),
            "reference": ScriptedChat(oracle),
        },
        questions=12,
        reference_model="ref",
    )
    final = run_session(ctx, "rel")
    assert bank.question_ids("rel") == bank.question_ids("rel#ref")
    assert final["reference_scores"]["S"] == pytest.approx(100.0)
    s = final["scores"]["S"]
    assert final["relative"] == pytest.approx(s / 100.0 * 100)
    stored = bank.session("rel")["scores"]
    assert stored["R"] == pytest.approx(final["relative"]) and stored["S_ref"] == pytest.approx(100.0)
    # the replayed questions count as met by the reference model: its own next session avoids them
    bank.create_session("own", model="fake:reference", n=20, seed="x")
    assert not set(bank.question_ids("own")) & set(bank.question_ids("rel"))


def test_an_endpoint_failure_mid_session_resumes_without_losing_or_repeating_answers(tmp_path):
    bank_path = new_bank(tmp_path)
    state = {"calls": 0}

    def flaky(messages, tool):
        state["calls"] += 1
        if state["calls"] == 5:
            raise InfraError("endpoint down")
        return f"answer {state['calls']}"

    ctx = ctx_for(
        tmp_path,
        bank_path,
        {"target": ScriptedChat(flaky), "evaluator": ScriptedChat(star_judge)},
        questions=8,
        answer_batch=3,
    )
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "resume"}}
    with pytest.raises(InfraError):
        graph.invoke({"session_id": "resume"}, config, context=ctx)
    bank = QuestionBank(bank_path)
    assert bank.quota("resume") == {"allocated": 8, "undelivered": 3, "pending": 1, "completed": 4}
    final = graph.invoke(None, config, context=ctx)
    assert final["answered"] == 8 and state["calls"] == 9  # 8 answers + the one failed call
    responses = [i["response"] for i in bank.judged_items("resume")]
    assert responses == [f"answer {n}" for n in (1, 2, 3, 4, 6, 7, 8, 9)]


def simulated_examinee(p: float, answers: dict[str, str]):
    """A fake model that answers correctly with probability ``p`` (decided per question, seeded)."""

    def respond(messages, tool):
        text = all_text(messages)
        qtext, key = next((q, a) for q, a in answers.items() if q in text)
        right = random.Random(f"{p}:{qtext}").random() < p
        if right:
            return f"{key}. This follows from the definition."
        if key.lower() in ("true", "false"):
            return ("false" if key.lower() == "true" else "true") + ". I believe so."
        return "I am not sure; maybe something else."

    return respond


def test_calibration_simulated_examinees_are_ranked_by_accuracy_and_resampling_keeps_the_ranking(tmp_path):
    bank_path = new_bank(tmp_path, augment=True)  # 60 questions after the A.2 expansion
    bank = QuestionBank(bank_path)
    answers = {q.question: q.answer for q in bank.all_questions(active_only=True)}
    assert len(answers) == 60
    ps = (0.2, 0.5, 0.9)
    per_model: dict[str, list[dict]] = {}
    for p in ps:
        for k in range(3):  # three non-repeating sessions of 20 questions per model
            ctx = ctx_for(
                tmp_path,
                bank_path,
                {
                    "target": ScriptedChat(simulated_examinee(p, answers)),
                    "evaluator": ScriptedChat(star_judge),
                    "reference": ScriptedChat(simulated_examinee(1.0, answers)),
                },
                questions=20,
                reference_model="ref",
            )
            final = run_session(ctx, f"p{p}-{k}", model=f"p={p}")
            per_model.setdefault(f"p={p}", []).append(final)
    for finals in per_model.values():
        ids = [u for f in finals for u in bank.question_ids(f["session_id"])]
        assert len(ids) == 60 and len(set(ids)) == 60  # the three sessions cover the bank without repeats
    s = {m: sum(f["scores"]["S"] for f in fs) / 3 for m, fs in per_model.items()}
    r = {m: sum(f["relative"] for f in fs) / 3 for m, fs in per_model.items()}
    assert s["p=0.2"] < s["p=0.5"] < s["p=0.9"]
    assert r["p=0.2"] < r["p=0.5"] < r["p=0.9"]
    for k in range(3):  # every single resampled session keeps the order
        order = [per_model[f"p={p}"][k]["relative"] for p in ps]
        assert order == sorted(order)
    # the leaderboard across sessions agrees
    board = [row["model"] for row in leaderboard(bank) if row["model"].startswith("p=")]
    assert board == ["p=0.9", "p=0.5", "p=0.2"]
    # resampling on the shared pool: every draw ranks the simulated examinees the same way
    matrix = {m: v for m, v in score_matrix(bank).items() if m.startswith("p=")}
    out = stability(matrix, reference="p=0.9", sizes=[20, 40, 60], trials=5, seed=3)
    print({n: (size["spearman_relative"], size["spearman_elo"]) for n, size in out["sizes"].items()})
    assert out["ranking"] == ["p=0.9", "p=0.5", "p=0.2"]
    assert out["mean"]["p=0.2"] < out["mean"]["p=0.5"] < out["mean"]["p=0.9"]
    for n in ("40", "60"):  # draws of 40+ questions never invert the examinees
        for trial in out["sizes"][n]["trials"]:
            assert trial["p=0.2"] < trial["p=0.5"] < trial["p=0.9"]
        assert out["sizes"][n]["spearman_relative"] == pytest.approx(1.0)
    assert out["sizes"]["20"]["spearman_relative"] >= 0.5  # small draws may swap the two weakest now and then
    assert spearman([s[f"p={p}"] for p in ps], list(ps)) == pytest.approx(1.0)


def test_open_session_node_is_idempotent_and_usable_outside_a_graph(tmp_path):
    from dyneval.nodes.llmeval.session import open_session

    bank_path = new_bank(tmp_path)
    ctx = ctx_for(tmp_path, bank_path, {}, questions=5)
    first = open_session({"session_id": "solo"}, Runtime(context=ctx))
    again = open_session({"session_id": "solo"}, Runtime(context=ctx))
    assert first["allocated"] == again["allocated"] == 5
    with pytest.raises(ValueError):
        open_session({"session_id": "bad", "paradigm": "telepathy"}, Runtime(context=ctx))


def test_a_graph_on_an_empty_bank_uses_the_shipped_sample_as_in_studio(tmp_path):
    ctx = ctx_for(
        tmp_path,
        tmp_path / "empty.sqlite",
        {"target": ScriptedChat(lambda m, t: "false"), "evaluator": ScriptedChat(star_judge)},
        questions=3,
    )
    final = run_session(ctx, "studio")
    assert final["allocated"] == 3 and final["scores"]["N"] == 3
    assert QuestionBank(tmp_path / "empty.sqlite").count() == 36
