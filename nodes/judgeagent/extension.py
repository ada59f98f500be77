"""Interactive Extension (seed 000, section 3.2; Algorithm 1, lines 20-29; Algorithm 4, line 20).

Per round: the knowledge path (:func:`nodes.judgeagent.knowledge.sample_knowledge`) -> one question with a
concise answer at the current difficulty (Table 12) -> the target answers -> judgement -> the running score
``sc_B / RND_total`` decides the next round's difficulty. Unlike the authors' published code, the difficulty
is re-decided after every round.

A generation the evaluator cannot produce (no valid structure after the repair attempt, an empty question
or answer, an "answer" longer than a short phrase, or a question copied from the prompt's own examples) is
recorded as ``status = "generation_failed"``: the target is not asked, the score and the difficulty stay as
they were. A generated answer is concise by construction (Table 12), so the target answers it as a phrase.

An answer the evaluator cannot judge (after retries and one repair) is recorded with ``verdict =
"ungraded"``: it is left out of ``sc_B`` and ``RND_total`` (Algorithm 1, lines 24-27 count judged answers),
so the running score and the difficulty stay as they were, exactly as for a failed generation.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from dyneval.nodes.judgeagent.common import clip
from dyneval.nodes.judgeagent.grading import next_difficulty
from dyneval.nodes.judgeagent.judging import judge_free
from dyneval.nodes.judgeagent.knowledge import keyword_entities
from dyneval.prompts import load_prompt
from dyneval.runtime.services import services_of
from dyneval.state.errors import ModelError
from dyneval.state.judgeagent import ExtendedQuestion, JudgeAgentContext, JudgeAgentState
from dyneval.stores.choices import normalize_answer

MAX_ANSWER_CHARS = 160
MAX_CONTEXT_CHARS = 2400


def focus_entities(path: dict[str, Any]) -> str:
    names = [e for e in path.get("entities", []) if e] or keyword_entities(path.get("text", ""), limit=3)
    return ", ".join(dict.fromkeys(names)) or "the main topic"


def _generated(state: JudgeAgentState) -> dict[str, Any]:
    """This round's generation: :func:`generate_question` writes it before the nodes that read it run, and
    :func:`estimate_capability` clears it; a thread without it was not left by the graph, and is refused here."""
    gen = state.get("generated")
    if gen is None:
        raise ValueError("the unit's state has no generated question for this round")
    return gen


def generate_question(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """GENERATE_QUESTION(t, M) with the difficulty requirements of Table 12."""
    svc = services_of(runtime.context)
    path = state["path"]
    difficulty = state["difficulty"]
    context = clip(path["text"], MAX_CONTEXT_CHARS)
    messages = load_prompt("judgeagent/evaluator_generate_question").render(
        difficulty=difficulty, entity=focus_entities(path), context=context
    )
    try:
        out = svc.llm("evaluator").structured(ExtendedQuestion, messages, step="generate_question")
    except ModelError as exc:
        return {"generated": {"status": "generation_failed", "reason": str(exc)[:300]}}
    question, answer = out.question.strip(), out.answer.strip()
    if len(question) < 8 or not answer:
        return {"generated": {"status": "generation_failed", "reason": "empty question or answer"}}
    if len(answer) > MAX_ANSWER_CHARS:
        return {"generated": {"status": "generation_failed", "reason": "answer is not concise"}}
    instructions = normalize_answer(" ".join(str(m.content) for m in messages).replace(context, " "))
    if normalize_answer(question) in instructions:  # a small model echoing the prompt's examples or wording
        return {"generated": {"status": "generation_failed", "reason": "question copied from the prompt"}}
    return {"generated": {"status": "ok", "question": question, "answer": answer}}


def ask_target(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """QUERY_LLM(q_e, M_t) (Algorithm 1, line 22)."""
    gen = _generated(state)
    if gen.get("status") != "ok":
        return {}
    svc = services_of(runtime.context)
    reply = svc.llm("target").text(
        load_prompt("judgeagent/target_answer_phrase").render(question=gen["question"]), step="extended_answer"
    )
    return {"generated": {**gen, "reply": reply}}


def estimate_capability(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """Algorithm 1, lines 23-28: judge, update ``sc_B`` and ``RND_total``, decide the next difficulty."""
    ctx = runtime.context
    svc = services_of(ctx)
    gen = _generated(state)
    path = state["path"]
    k = len(state.get("rounds", [])) + 1
    difficulty = state["difficulty"]
    score, answered = state["score"], state["answered"]
    record: dict[str, Any] = {
        "round": k,
        "difficulty": difficulty,
        "status": gen.get("status"),
        "path": {key: path.get(key) for key in ("mode", "seed_entity", "entities", "chunks", "truncated")},
        "context": clip(path.get("text", ""), 1500),
    }
    graded = False
    if gen.get("status") == "ok":
        verdict = judge_free(
            svc, gen["question"], gen["answer"], gen.get("reply", ""), step="extended_judge", jury=ctx.judge_jury
        )
        graded = verdict["verdict"] != "ungraded"
        gain = ctx.control().gain(difficulty) if verdict["correct"] else 0.0
        score, answered = score + gain, answered + int(graded)
        record.update(question=gen["question"], answer=gen["answer"], reply=gen.get("reply", ""), gain=gain, **verdict)
    else:
        record["reason"] = gen.get("reason")
    nxt = next_difficulty(ctx, score, answered, difficulty) if graded else difficulty
    avg = score / answered if answered else None
    record.update(avg_after=avg, next_difficulty=nxt)
    return {
        "rounds": [record],
        "score": score,
        "answered": answered,
        "difficulty": nxt,
        "trajectory": [*state.get("trajectory", []), {"after": k, "avg": avg, "next": nxt}],
        "generated": None,
    }
