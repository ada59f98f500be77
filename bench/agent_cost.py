"""The harness's own cost per turn of an agent target against a chat-model target (docs/agents.md).

    python -m bench.agent_cost [--conversations 10] [--turns 8]

Both targets answer from the same stand-in endpoint (``tests/standin_endpoint.py``, in a process of its own so that
its CPU does not count): the model target ``standin@URL`` directly, the agent target ``graph:bench.agent_cost:graph``
through a one-node LangGraph graph that calls the same chat model (built by ``runtime.models.build_chat_model``).
Each target holds ``--conversations`` conversations of ``--turns`` turns through the call layer
(``Services.llm("target").text``), the model re-sent the whole conversation each turn, the agent only the new
message on its thread. The figure is this process's CPU milliseconds per turn (user + system, every thread), and
the agent's as a ratio of the model's; the difference is what an agent turn costs beyond the request: the graph's
steps, its checkpoints, the thread of the turn and the record.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dyneval.runtime.agents.chat import independent_item  # noqa: E402
from dyneval.runtime.events import EventLog  # noqa: E402
from dyneval.runtime.models import build_chat_model  # noqa: E402
from dyneval.runtime.services import Services  # noqa: E402
from dyneval.state.config import RunConfig, parse_model_ref  # noqa: E402

#: The stand-in's ``MODEL@URL`` (the agent's module is imported anew by its reference, not run as ``__main__``).
MODEL_ENV = "AGENT_COST_MODEL"


@functools.cache
def _chat() -> Any:
    return build_chat_model(parse_model_ref(os.environ[MODEL_ENV], {}))


def _answer(state: MessagesState) -> dict[str, Any]:
    return {"messages": [_chat().invoke(state["messages"])]}


_builder = StateGraph(MessagesState)
_builder.add_node("answer", _answer)
_builder.add_edge(START, "answer")
_builder.add_edge("answer", END)
#: The agent: one node calling the stand-in's chat model (the run gives it an in-memory checkpointer).
graph = _builder.compile()


def cpu_ms_per_turn(ref: str, conversations: int, turns: int, run_dir: Path) -> float:
    config = RunConfig(protocol="interview", roles={"target": ref, "evaluator": ref})
    llm = Services(config=config, run_dir=run_dir, events=EventLog()).llm("target")
    llm.text([HumanMessage("warm-up")], step="warm-up")
    started = time.process_time()
    for c in range(conversations):
        messages: list[Any] = [SystemMessage("You are being interviewed.")]
        with independent_item(f"c{c}"):
            for t in range(turns):
                messages.append(HumanMessage(f"Question {t} of conversation {c}: why is the sky blue?"))
                messages.append(AIMessage(llm.text(messages, step=f"t{t}")))
    return (time.process_time() - started) * 1000 / (conversations * turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=8)
    args = parser.parse_args()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tests.standin_endpoint import StandIn; s = StandIn(); print(s.url, flush=True)"
            "; import sys; sys.stdin.read()",
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        spec = f"standin@{server.stdout.readline().strip()}"
        os.environ[MODEL_ENV] = spec
        with tempfile.TemporaryDirectory() as tmp:
            model = cpu_ms_per_turn(spec, args.conversations, args.turns, Path(tmp) / "model")
            agent = cpu_ms_per_turn("graph:bench.agent_cost:graph", args.conversations, args.turns, Path(tmp) / "a")
    finally:
        server.kill()
        server.wait()
    print(f"{args.conversations} conversations x {args.turns} turns, CPU ms per turn (this process)")
    print(f"model target  {model:8.2f}")
    print(f"agent target  {agent:8.2f}")
    print(f"ratio agent/model {agent / model:.2f}")


if __name__ == "__main__":
    main()
