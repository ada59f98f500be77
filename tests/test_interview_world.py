"""A simulated interview world for the interview tests (fake interviewer, grader and interviewees).

Helpers only (imported by the other ``test_interview_*`` modules); the one test
here checks that the simulated grader itself is right, since the calibration
results depend on it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text, last_text


def uniform(*parts: Any) -> float:
    """A reproducible number in [0, 1) from the parts (the simulated randomness)."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(h[:12], 16) / 16**12


def field(text: str, label: str) -> str:
    """The value after ``label:`` in a rendered prompt (up to the next line)."""
    m = re.search(re.escape(label) + r"[^:\n]*:\s*(.*)", text)
    return m.group(1).strip() if m else ""


def math_seed(i: int, level: str | None = None) -> dict[str, Any]:
    a, b = 3 + i, 7 + 2 * i
    return {
        "id": f"m{i:03d}",
        "task": "math",
        "level": level,
        "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
        "solution": f"{a} + {b} = {a + b}",
        "answer": str(a + b),
    }


# -- interviewer ---------------------------------------------------------------------------------


def interviewer(messages: list, tool: dict | None) -> Any:
    """A competent fake interviewer; its feedback never states the answer on its own."""
    text = all_text(messages)
    name = tool["function"]["name"] if tool else None
    if name == "ModifiedQuestion":
        q = field(text, "Problem") or field(text, "Question") or field(text, "Original question")
        nums = re.findall(r"\d+", q)
        if nums:
            return {"question": q.replace(nums[0], "x", 1), "explanation": f"x stands for {nums[0]}"}
        return {"question": "In other words: " + q, "explanation": "reworded"}
    if name == "Feedback":
        level = field(text, "Hint level for this feedback")
        return {"feedback": f"Level {level}: re-check how the quantities combine.", "kind": "process_guidance"}
    if name == "FollowUp":
        asked = text.split("already asked:")[-1].count("\n- ") + text.split("already asked:")[-1].startswith(" -")
        return {"question": f"Why did you choose that step? (number {asked + 1})", "answer": "because of the sum"}
    return "The interviewee answered and reacted to feedback."


# -- grader --------------------------------------------------------------------------------------


def grader(messages: list, tool: dict | None) -> Any:
    """Marks a math answer correct when its final line holds the correct answer; follow-ups by 'because'."""
    text = all_text(messages)
    name = tool["function"]["name"] if tool else None
    if name == "Grade":
        correct = field(text, "Correct answer") or field(text, "Reference answer")
        output = text.split("Model's output:")[-1] if "Model's output:" in text else text.split("response:")[-1]
        final = re.findall(r"Final answer:\s*(\S+)", output)
        ok = bool(final) and final[-1].strip(".") == correct
        return {"correct": ok, "error_type": "N/A" if ok else "Calculation", "reason": "checked the final line"}
    if name == "FollowUpGrade":
        reply = text.split("Model's reply:")[-1]
        return {"correct": "because" in reply.lower(), "reason": "looked for a reason"}
    if name == "FactGrade":
        answer = text.split("Model's answer:")[-1] if "Model's answer:" in text else text.split("correction:")[-1]
        sents = [s.strip() for s in re.split(r"[.\n]", answer) if s.strip()]
        return {"facts": [{"fact": s, "supported": "wrong" not in s.lower()} for s in sents], "complete": True}
    return "ok"


# -- interviewees ---------------------------------------------------------------------------------


def simulated_interviewee(p: float, helped: float = 0.5, salt: str = "") -> ScriptedChat:
    """Knows a question with probability ``p``; after real feedback gets it right with probability ``helped``.

    After a plain "not correct, try again" (feedback duty off) it repeats its wrong answer.
    Follow-up questions are answered with a reason when the seed question was known.
    """

    def respond(messages: list, tool: dict | None) -> Any:
        convo = [m for m in messages if m.type in ("human", "ai")]
        first = str(convo[0].content)
        last = last_text(messages)
        knows = uniform(salt, "know", first) < p
        if "Why did you choose" in last:
            return "I added them because of the sum." if knows else "I do not know."
        correct = answer_of(first)
        tries = sum(1 for m in convo if m.type == "ai")
        if knows:
            return f"Adding gives the total.\nFinal answer: {correct}"
        fixed = any(
            "Feedback on your answer" in str(m.content) and uniform(salt, "help", first, k) < helped
            for k, m in enumerate(convo)
            if m.type == "human"
        )
        if fixed:
            return f"I see my mistake now.\nFinal answer: {correct}"
        return f"I think it is this.\nFinal answer: {correct + 1000 + tries * 0}"

    return ScriptedChat(respond)


def answer_of(question: str) -> int:
    """The correct answer of a ``math_seed`` question (whose first number may be hidden as ``x``)."""
    nums = [int(n) for n in re.findall(r"\d+", question)]
    if "x apples" in question:  # modified: the first value is hidden; recover it from the second
        b = nums[0]
        a = (b - 7) // 2 + 3
        return a + b
    return sum(nums[:2])


def services(tmp_path, target, params: dict | None = None, inter=interviewer, grade=grader):
    return make_services(
        tmp_path,
        protocol="interview",
        params=params,
        chats={"target": target, "evaluator": ScriptedChat(inter), "grader": ScriptedChat(grade)},
    )


def run_session(seed: dict[str, Any], svc, saver=None, thread: str | None = None, **ctx_fields) -> dict[str, Any]:
    """Run one interview to its end on the graph (in-memory checkpoints) and return the final state."""
    from dyneval.graphs.interview import builder
    from dyneval.state.interview import InterviewContext

    graph = builder.compile(checkpointer=saver or InMemorySaver())
    uid = thread or seed["id"]
    ctx = InterviewContext(services=svc, **ctx_fields)
    return graph.invoke({"unit_id": uid, "seed": seed}, {"configurable": {"thread_id": uid}}, context=ctx)


def test_simulated_grader_accepts_only_the_correct_final_answer():
    seed = math_seed(1)
    good = grader(
        [_msg(f"Correct answer: {seed['answer']}\nModel's output: steps\nFinal answer: {seed['answer']}")],
        {"function": {"name": "Grade"}},
    )
    bad = grader(
        [_msg(f"Correct answer: {seed['answer']}\nModel's output: steps\nFinal answer: 999")],
        {"function": {"name": "Grade"}},
    )
    assert good["correct"] is True and bad["correct"] is False
    assert answer_of(seed["question"]) == int(seed["answer"])
    assert answer_of(seed["question"].replace("4 apples", "x apples")) == int(seed["answer"])


def _msg(text: str):
    from langchain_core.messages import HumanMessage

    return HumanMessage(text)
