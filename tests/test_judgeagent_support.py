"""Fakes shared by the JudgeAgent tests (simulated evaluator and target), and tests of the fakes' contract
with the nodes: entity labelling batches texts and falls back to keywords."""

from __future__ import annotations

import itertools
import random
import re
import threading
from pathlib import Path
from typing import Any

from tests.conftest import make_services
from tests.fakes import ScriptedChat, all_text, last_text

TINY_KB = {
    "canal.md": "# Voss Canal\n\nThe Voss Canal links Lake Orden with the port of Harl. It was finished in 1871 "
    "by the engineer Mira Stolt, who also designed the Harl Lighthouse.\n\nBarges on the Voss Canal "
    "carry timber from Lake Orden to Harl, where the Timber Exchange sells it to Brenmark.",
    "marsh.md": "# Salt marsh\n\nSalt marsh grasses such as Spartina trap silt at high tide, so the marsh surface "
    "slowly rises. The Orden Delta holds the largest salt marsh of Brenmark.\n\nHerons and "
    "Redshanks feed in the Orden Delta at low tide, and Mira Stolt mapped its channels in 1880.",
}

ENTITY_SPLIT = re.compile(r"\[(\d+)\] (.*)")
CAPITALISED = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*")


def write_kb(folder: Path, files: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (files or TINY_KB).items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


class FakeEvaluator:
    """A deterministic evaluator: capitalised phrases as entities, numbered questions, fixed verdicts."""

    def __init__(self, verdict: bool = False, entity_labels: bool = True) -> None:
        self.verdict = verdict
        self.entity_labels = entity_labels
        self.counter = itertools.count(1)
        self.lock = threading.Lock()
        self.prompts: dict[str, list[str]] = {}

    def __call__(self, messages: list, tool: dict[str, Any] | None) -> Any:
        name = tool["function"]["name"] if tool else "text"
        text = all_text(messages)
        with self.lock:
            self.prompts.setdefault(name, []).append(text)
        if name == "EntityLabels":
            if not self.entity_labels:
                return {"labeled": []}
            items = []
            for n, body in ENTITY_SPLIT.findall(last_text(messages)):
                ents = [e for e in CAPITALISED.findall(body) if e not in {"The", "It", "Barges", "Which", "What"}]
                items.append({"n": int(n), "entities": ents})
            return {"labeled": items}
        if name == "ExtendedQuestion":
            level = re.search(r"required difficulty level is \[(\w+)\]", text).group(1)
            with self.lock:
                i = next(self.counter)
            return {"question": f"Generated question number {i} at level {level}?", "answer": f"ans{i}"}
        if name == "Verdict":
            return {"correct": self.verdict}
        if name == "Feedback":
            return {
                "flaws_knowledge": "misses canal facts",
                "flaws_capability": "guesses",
                "comprehensive_performance": "mixed",
                "suggestions": "Read the question twice.",
            }
        return "ok"


class SimulatedTarget:
    """Answers correctly with probability ``p`` (seeded): the gold letter / generated answer, else a wrong one."""

    def __init__(self, p: float, gold: dict[str, str], seed: int = 0) -> None:
        self.p = p
        self.gold = gold  # question stem -> gold letter / answer for base questions
        self.seed = seed
        self.lock = threading.Lock()
        self.prompts: list[str] = []

    def __call__(self, messages: list, tool: dict[str, Any] | None) -> Any:
        text = last_text(messages)
        with self.lock:
            self.prompts.append(all_text(messages))
        # a draw per (seed, prompt): reproducible whatever order concurrent calls arrive in
        right = random.Random(f"{self.seed}:{text}").random() < self.p
        m = re.search(r"Generated question number (\d+)", text)
        if m:
            return f"ans{m.group(1)}" if right else "I do not know"
        for stem, gold in self.gold.items():
            if stem in text:
                if len(gold) == 1:  # option letter
                    return gold if right else ("A" if gold != "A" else "B")
                return gold if right else "something else"
        return "no idea"


def run_batch(svc: Any, batch: list[Any], kb: Path, thread: str = "u1", **params: Any) -> dict[str, Any]:
    """Run one JudgeAgent thread on ``batch`` (BaseQuestion objects) with an in-memory checkpointer; the thread's
    whole state, as the runner reads it (``invoke`` returns the graph's output only)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from dyneval.graphs.judgeagent import builder
    from dyneval.state.judgeagent import JudgeAgentContext

    ctx = JudgeAgentContext(services=svc, kb=str(kb), **params)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"batch": [q.model_dump() for q in batch]}, config, context=ctx)
    return dict(graph.get_state(config).values)


def fake_services(tmp_path: Path, evaluator: Any, target: Any, params: dict[str, Any] | None = None) -> Any:
    return make_services(
        tmp_path,
        protocol="judgeagent",
        chats={"evaluator": ScriptedChat(evaluator), "target": ScriptedChat(target)},
        params=params,
    )


def test_label_entities_batches_texts_and_falls_back_to_keywords(tmp_path):
    from dyneval.nodes.judgeagent.knowledge import label_entities

    ev = FakeEvaluator()
    svc = fake_services(tmp_path, ev, lambda m, t: "x")
    texts = [
        "The Voss Canal links Lake Orden with Harl.",
        "salt marsh grasses trap silt while silt settles",
        "Mira Stolt designed the Harl Lighthouse.",
    ]
    out = label_entities(svc, texts, batch=2)
    assert len(ev.prompts["EntityLabels"]) == 2  # 3 texts, 2 per call
    assert out[0] == (["Voss Canal", "Lake Orden", "Harl"], "llm")
    ents, source = out[1]  # no capitalised word: the model gives nothing usable
    assert source == "keyword" and "grasses" in ents
    assert out[2][1] == "llm" and "Mira Stolt" in out[2][0]


def test_label_entities_drops_entities_not_in_the_text(tmp_path):
    from dyneval.nodes.judgeagent.knowledge import label_entities

    def evaluator(messages, tool):
        return {"labeled": [{"n": 1, "entities": ["Harl", "Atlantis", "Voss Canal"]}]}

    svc = fake_services(tmp_path, evaluator, lambda m, t: "x")
    assert label_entities(svc, ["The Voss Canal ends in Harl."], batch=5) == [(["Harl", "Voss Canal"], "llm")]
