"""Deterministic in-process agents for the agent-target tests: a LangGraph graph with one tool and a checkpointer,
an openevals-style app, and agents that fail in each of the four ways a turn can fail.

Every agent logs what it received (thread id, message text) in :data:`SEEN`, so a test asserts on what the agent
saw, not on what we meant to send. A structured request (our format instructions carry the JSON schema) is
answered with a schema instance built from the schema alone (first choice, 1, true, "toy").
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

#: (thread id, text of the message the agent received), in arrival order.
SEEN: list[tuple[str, str]] = []
_LOCK = threading.Lock()
#: Set to end the hanging agent's turn (the test sets it when done).
RELEASE = threading.Event()


@tool
def lookup(query: str) -> str:
    """Look up what the notes say about ``query``."""
    return f"notes on {query[:30]}: ".ljust(3000, "x")  # longer than the record keeps of a tool result


def _instance(schema: dict[str, Any]) -> dict[str, Any]:
    values = {"integer": 1, "number": 1.0, "boolean": True, "string": "toy"}
    out = {}
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or next((a.get("type") for a in prop.get("anyOf", []) if a.get("type")), "string")
        out[name] = prop["enum"][0] if "enum" in prop else values.get(kind, "toy")
    return out


def reply_to(text: str) -> str:
    """The toy's answer: a schema instance for a structured request, else a fixed sentence."""
    match = re.search(r"```\s*(\{.*\})\s*```", text, re.S)
    if match:
        return json.dumps(_instance(json.loads(match.group(1))))
    return "The answer is 1, from my notes."


def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    last = state["messages"][-1]
    if last.type == "human":
        time.sleep(config["configurable"].get("toy_delay", 0))
        with _LOCK:
            SEEN.append((config["configurable"]["thread_id"], str(last.content)))
        call = {"name": "lookup", "args": {"query": str(last.content)[-40:]}, "id": f"call{len(state['messages'])}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    human = next(m for m in reversed(state["messages"]) if m.type == "human")
    usage = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    return {"messages": [AIMessage(content=reply_to(str(human.content)), usage_metadata=usage)]}


def _route(state: MessagesState) -> str:
    return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END


def _builder() -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


#: The toy agent: one tool, its own checkpointer.
graph = _builder().compile(checkpointer=InMemorySaver(), name="toy")
#: The same agent uncompiled (the run compiles it with an in-memory checkpointer).
builder = _builder()
#: The same agent taking 0.3 s per turn (a run to kill mid-unit).
slow = _builder().compile().with_config(configurable={"toy_delay": 0.3})


def app(message: dict[str, Any], *, thread_id: str) -> dict[str, Any]:
    """openevals' app contract, sync."""
    with _LOCK:
        SEEN.append((thread_id, message["content"]))
    return {"role": "assistant", "content": reply_to(message["content"])}


async def async_app(message: dict[str, Any], *, thread_id: str) -> dict[str, Any]:
    """openevals' app contract, async."""
    return app(message, thread_id=thread_id)


def _one_node(step: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", step)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile()


def _raise(state: MessagesState) -> dict[str, Any]:
    raise RuntimeError("the toy agent broke")


def _hang(state: MessagesState) -> dict[str, Any]:
    RELEASE.wait(600)
    return {"messages": [AIMessage(content="late")]}


def _silent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [ToolMessage(content="a tool spoke, the agent did not", tool_call_id="none")]}


def _loop_builder() -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node(
        "agent",
        lambda s: {
            "messages": [
                AIMessage(
                    content="",
                    tool_calls=[{"name": "lookup", "args": {"query": "again"}, "id": f"c{len(s['messages'])}"}],
                )
            ]
        },
    )
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "agent")
    return builder


raising = _one_node(_raise)
hanging = _one_node(_hang)
silent = _one_node(_silent)
looping = _loop_builder().compile()


#: ATAD's sample problem -> the coin agent's verdict in each of 4 trials: 1 right, 0 wrong, x it raises (a failed
#: trial). pass^k and the flip rate of these are counted by hand in tests/test_trials.py.
TRIAL_PATTERN = {
    "T1-sample": "1111",
    "T2-sample": "0000",
    "T3-sample": "1010",
    "T4-sample": "1110",
    "T5-sample": "1x01",
    "T6-sample": "0001",
    "T7-sample": "1100",
}


def coin(message: dict[str, Any], *, thread_id: str) -> dict[str, Any]:
    """openevals' app contract: answers the ATAD sample problem of its thread (``RUN/ans-m0-b0-ITEM-final~tT``)
    right or wrong as :data:`TRIAL_PATTERN` says for trial T."""
    from dyneval.samples import sample

    unit = thread_id.split("/")[1]
    base, _, trial = unit.rpartition("~t")
    item = base.split("-", 3)[3].rsplit("-", 1)[0]
    verdict = TRIAL_PATTERN[item][int(trial) - 1]
    if verdict == "x":
        raise RuntimeError(f"the coin agent broke on trial {trial} of {item}")
    bench = {json.loads(line)["id"]: json.loads(line) for line in sample("atad", "benchmark.jsonl").open()}
    problem = bench[item]["problem"]
    if "coherent" in problem:
        answer: dict[str, Any] = {"coherent": problem["coherent"] == (verdict == "1")}
    else:
        options = len(problem.get("choices") or problem["sentences"])
        answer = {"answer": problem["answer"] if verdict == "1" else problem["answer"] % options + 1}
    return {"role": "assistant", "content": json.dumps({**answer, "explanation": "a coin's"})}


def looked_up(state: dict[str, Any], item: dict[str, Any]) -> tuple[bool, str]:
    """A ``--state-check``: the toy's final state holds a tool result for every message it was sent."""
    asked = sum(m.type == "human" for m in state["messages"])
    looked = sum(m.type == "tool" for m in state["messages"])
    return looked == asked, f"{looked} lookups for {asked} messages"
