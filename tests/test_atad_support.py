"""Shared fakes for the ATAD tests (no tests here): a scripted teacher, orchestrator and student.

The fake teacher writes well-formed problems with unique sentences and remembers each
problem's answer, so the fake student can be right or wrong on purpose.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text


class World:
    """Problems the fake teacher wrote: first option text -> (task kind, gold answer)."""

    def __init__(self, seed: int = 0) -> None:
        self.answers: dict[str, Any] = {}
        self.counter = itertools.count()
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def problem(self, tool_name: str, messages: list) -> dict[str, Any]:
        with self.lock:
            k = next(self.counter)
            answer = self.rng.randint(1, 5)
        text = all_text(messages)
        if tool_name == "T2Problem":
            coherent = "set coherent=true" in text
            sentences = [f"Order item {k}-{i} of the story." for i in range(5)]
            out = {"sentences": sentences, "coherent": coherent}
            self.answers[sentences[0]] = coherent
            return out
        if tool_name == "T3Problem":
            choices = [f"word{k}x{i}" for i in range(5)]
            self.answers[choices[0]] = answer
            return {"sentence": f"The idea {k} was ___ to everyone.", "choices": choices, "answer": answer}
        if tool_name == "T4Problem":
            choices = [f"Bridge {k}-{i} connects both parts." for i in range(5)]
            self.answers[choices[0]] = answer
            return {
                "first": f"Paragraph one number {k} talks about markets.",
                "second": f"Paragraph two number {k} talks about policy.",
                "choices": choices,
                "answer": answer,
            }
        sentences = [f"Sentence {k}-{i} about the topic." for i in range(5)]
        self.answers[sentences[0]] = answer
        return {"sentences": sentences, "answer": answer}

    def gold_in(self, messages: list) -> Any:
        text = all_text(messages)
        for first, answer in self.answers.items():
            if first in text:
                return answer
        raise AssertionError("student saw a problem the teacher never wrote")


def teacher_chat(world: World, script: list[Any] | None = None) -> ScriptedChat:
    """Valid problems; ``script`` items override calls in order: a dict (raw args) or "garbage" (no tool call)."""
    script = list(script or [])

    def respond(messages, tool):
        if script:
            item = script.pop(0)
            if item == "garbage":
                return "I cannot do that."
            if isinstance(item, dict):
                return item
        return world.problem(tool["function"]["name"], messages)

    return ScriptedChat(respond)


def orchestrator_chat(verdicts: list[bool] | Callable[[list], bool] | None = None) -> ScriptedChat:
    """Approves by default; ``verdicts`` gives the validation verdicts in order (then approve)."""
    queue = list(verdicts) if isinstance(verdicts, list) else None

    def respond(messages, tool):
        name = tool["function"]["name"]
        if name == "EscalationFeedback":
            return {"analysis": "found it quickly", "suggestions": ["subtler shift"], "increase": "hide the cue"}
        if callable(verdicts):
            ok = verdicts(messages)
        else:
            ok = queue.pop(0) if queue else True
        return {"approved": ok, "feedback": "" if ok else "the anomaly is ambiguous; make it clearer"}

    return ScriptedChat(respond)


def student_chat(world: World, p: float | list[bool] = 1.0, seed: int = 0) -> ScriptedChat:
    """Right with probability ``p`` (seeded), or following a list of right/wrong outcomes."""
    rng = random.Random(seed)
    outcomes = list(p) if isinstance(p, list) else None
    lock = threading.Lock()

    def respond(messages, tool):
        gold = world.gold_in(messages)
        with lock:
            right = outcomes.pop(0) if outcomes is not None else rng.random() < p
        if isinstance(gold, bool):
            return {"coherent": gold if right else not gold, "explanation": "flow check"}
        return {"answer": gold if right else gold % 5 + 1, "explanation": f"sentence {gold} stands out"}

    return ScriptedChat(respond)


def services(tmp_path, world: World, *, teacher=None, orchestrator=None, student=None, params=None):
    chats = {
        "teacher": teacher or teacher_chat(world),
        "orchestrator": orchestrator or orchestrator_chat(),
        "student": student or student_chat(world),
    }
    return make_services(tmp_path, protocol="atad", chats=chats, params=params)


def run_graph(svc, inputs: dict[str, Any], thread: str = "u1", **ctx_fields) -> dict[str, Any]:
    """One ATAD thread run to its end; the thread's whole state, as the runner reads it (``invoke`` returns the
    graph's output only)."""
    from dyneval.graphs.atad import builder
    from dyneval.state.atad import AtadContext

    graph = builder.compile(checkpointer=InMemorySaver())
    ctx = AtadContext(services=svc, **ctx_fields)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": 200}
    graph.invoke(inputs, config, context=ctx)
    return dict(graph.get_state(config).values)


def unit_input(task: str = "T1", **extra) -> dict[str, Any]:
    return {"task": task, "topic": "psychology", "challenge": None, "style": "GRE", "target_coherent": None, **extra}


def steps(state: dict[str, Any]) -> list[str]:
    return [e["step"] for e in state["history"]]
