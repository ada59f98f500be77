"""The interviewee (seed 004, section 3): the target model, or a person through ``interrupt()``.

The interviewee sees the session as a chat: every interviewer turn of the
transcript (question, feedback, follow-up) is a user message and each of its own
answers an assistant message (Algorithm 1, lines 11 and 20).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from dyneval.prompts import load_prompt
from dyneval.runtime.agents.chat import independent_item
from dyneval.runtime.services import services_of
from dyneval.state.interview import InterviewContext, InterviewState, Turn


def _clip(text: str, limit: int) -> str:
    text = str(text or "")
    return text if len(text) <= limit else text[: limit - 15] + " ... (cut)"


def interviewer_message(turn: Turn) -> str:
    """What the interviewee reads for one interviewer turn."""
    if turn.get("kind") == "feedback":
        return str(load_prompt("interview/interviewee_retry").render(feedback=turn["text"])[0].content)
    return str(turn.get("text", ""))


def conversation(state: InterviewState, ctx: InterviewContext) -> list[BaseMessage]:
    """System message plus the session so far as chat messages (earlier turns clipped)."""
    task = state["seed"].get("task", "generic")
    messages: list[BaseMessage] = list(load_prompt("interview/interviewee_system").render(task=task))
    turns = [t for t in state.get("transcript", []) if t.get("speaker") in ("interviewer", "interviewee")]
    for i, turn in enumerate(turns):
        last = i == len(turns) - 1
        if turn["speaker"] == "interviewer":
            text = interviewer_message(turn)
            messages.append(HumanMessage(text if last else _clip(text, ctx.history_chars)))
        else:
            messages.append(AIMessage(_clip(turn.get("text", ""), ctx.history_chars)))
    return messages


def answer(state: InterviewState, runtime: Runtime[InterviewContext]) -> dict[str, Any]:
    """The interviewee answers the current question (model call, or a human through ``interrupt``)."""
    ctx = runtime.context
    cur = state["current"]
    if ctx.interviewee == "human":
        pending = [t for t in state.get("transcript", []) if t.get("speaker") == "interviewer"]
        value = interrupt(
            {
                "question": interviewer_message(pending[-1]) if pending else cur["text"],
                "kind": cur["kind"],
                "q": cur["q"],
                "attempt": cur["attempt"],
                "hint": "reply with your answer (a string, or {'answer': ...})",
            }
        )
        text = value.get("answer", "") if isinstance(value, dict) else str(value if value is not None else "")
    else:
        svc = services_of(ctx)
        text = svc.llm("target").text(conversation(state, ctx), step=f"answer:q{cur['q']}:try{cur['attempt']}")
    turn = {"speaker": "interviewee", "kind": "answer", "text": text, "q": cur["q"], "attempt": cur["attempt"]}
    return {"last_answer": text, "transcript": [turn]}


def answer_single_turn(ctx: InterviewContext, task: str, question: str) -> str:
    """A fresh, one-question conversation (the LLM-as-a-Judge setting): an agent target answers it on a thread of
    its own, so the interview that follows is not its continuation (the agent has not seen the seed question)."""
    svc = services_of(ctx)
    messages = [*load_prompt("interview/interviewee_system").render(task=task), HumanMessage(question)]
    with independent_item("single"):
        return svc.llm("target").text(messages, step="single_turn:answer")
