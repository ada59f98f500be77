"""Knowledge side of JudgeAgent: entity labelling (Table 11), the context graph (Algorithm 3) and knowledge
path sampling (Algorithm 4).

Entity labelling sends ``extract_batch`` numbered texts per evaluator call (the paper labels many sentences
at once). Entities are kept only when they occur in their text (a weak model invents some). When the model
gives no valid structure or no usable entity for a text, a deterministic keyword extractor supplies the
entities of that text instead (capitalised phrases, then the most frequent long content words), and the
node records ``source = "keyword"``; so the embedded 135M model, which labels poorly, still yields a
connected graph, and the report shows how many entities came from each source. When no entity at all came
from the model, the JudgeAgent protocol warns on the console, in ``kb_stats.json``, the summary and the report.

On a Ray cluster (``services.spread.remote``), the graph build's extraction calls and embedding batches run on the
run's workers (:func:`build_item` through ``services.spread``); the driver keeps what comes back in its caches.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from dyneval.nodes.judgeagent.common import question_text, seed_for
from dyneval.prompts import load_prompt
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.driver_folder import local_path
from dyneval.runtime.services import Background, Services, services_of
from dyneval.state.errors import ModelError
from dyneval.state.judgeagent import SAMPLE_KB, BaseQuestion, EntityLabels, JudgeAgentContext, JudgeAgentState
from dyneval.stores.context_graph import ContextGraph, Progress
from dyneval.stores.context_graph_build import open_context_graph
from dyneval.stores.knowledge_base import Document, load_knowledge_base
from dyneval.tools.knowledge import knowledge_tools

_STOP = {
    "a",
    "an",
    "the",
    "and",
    "or",
    "but",
    "if",
    "of",
    "in",
    "on",
    "at",
    "to",
    "for",
    "by",
    "with",
    "from",
    "as",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "which",
    "what",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "not",
    "no",
    "yes",
    "do",
    "does",
    "did",
    "has",
    "have",
    "had",
    "can",
    "could",
    "would",
    "should",
    "may",
    "might",
    "will",
    "shall",
    "than",
    "then",
    "there",
    "their",
    "they",
    "them",
    "he",
    "she",
    "his",
    "her",
    "we",
    "our",
    "you",
    "your",
    "i",
    "also",
    "into",
    "about",
    "after",
    "before",
    "during",
    "over",
    "under",
    "between",
    "most",
    "more",
    "many",
    "much",
    "some",
    "such",
    "only",
    "other",
    "each",
    "both",
    "all",
    "any",
    "one",
    "two",
    "three",
    "first",
    "second",
    "while",
    "because",
    "although",
    "however",
    "within",
    "without",
    "through",
    "around",
    "following",
    "called",
    "known",
    "used",
    "using",
    "made",
    "make",
    "often",
    "usually",
    "later",
}
_CAPS = re.compile(r"\b[A-Z][\w'\-]*(?:\s+(?:of|de|la|du|van|von)?\s*[A-Z][\w'\-]*)*")


def keyword_entities(text: str, limit: int = 8) -> list[str]:
    """Fallback entities of a text: capitalised phrases, then frequent content words (6+ letters)."""
    found: list[str] = []
    for m in _CAPS.finditer(text):
        words = m.group(0).split()
        while words and words[0].lower() in _STOP:
            words = words[1:]
        phrase = " ".join(words).strip("'-")
        if len(phrase) > 1 and phrase.lower() not in _STOP and phrase.lower() not in {f.lower() for f in found}:
            found.append(phrase)
    counts = Counter(w for w in re.findall(r"[a-z][a-z\-]{5,}", text.lower()) if w not in _STOP)
    for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(found) >= limit:
            break
        if not any(word in f.lower() for f in found):
            found.append(word)
    return found[:limit]


def _usable(entities: list[str], text: str) -> list[str]:
    low = text.lower()
    out: list[str] = []
    for e in entities:
        e = re.sub(r"\s+", " ", str(e)).strip(" .,;:'\"")
        e = re.sub(r"^(?:the|a|an)\s+", "", e, flags=re.IGNORECASE)  # "The Voss Canal" = "Voss Canal"
        if (
            2 <= len(e) <= 80
            and e.lower() in low
            and e.lower() not in _STOP
            and e.lower() not in {o.lower() for o in out}
        ):
            out.append(e)
    return out


def label_entities(
    svc: Services, texts: list[str], batch: int = 5, *, step: str = "extract_entities", progress: Progress | None = None
) -> list[tuple[list[str], str]]:
    """Table 11 over ``texts``, ``batch`` texts per call (up to the run's ``--concurrency`` at once);
    ``(entities, source)`` each. ``progress`` hears ``("extraction", texts labelled, len(texts))`` per call."""
    groups = [texts[i : i + max(1, batch)] for i in range(0, len(texts), max(1, batch))]

    def one(group: list[str]) -> list[tuple[list[str], str]]:
        numbered = "\n".join(f"[{n}] {t}" for n, t in enumerate(group, 1))
        messages = load_prompt("judgeagent/evaluator_extract_entities").render(texts=numbered)
        by_n: dict[int, list[str]] = {}
        try:
            labels = svc.llm("evaluator").structured(EntityLabels, messages, step=step)
            for item in labels.labeled:
                by_n.setdefault(item.n, []).extend(item.entities)
        except ModelError:
            pass
        out = []
        for n, text in enumerate(group, 1):
            ents = _usable(by_n.get(n, []), text)
            out.append((ents, "llm") if ents else (keyword_entities(text), "keyword"))
        if progress is not None:
            progress("extraction", len(group), len(texts))
        return out

    return [r for part in parallel_map(one, groups, workers=svc.config.concurrency) for r in part]


def build_item(svc: Services, item: tuple[str, list[str]]) -> Any:
    """One item of a context-graph build (:data:`stores.context_graph.BuildMap`) where ``svc`` runs, a Ray worker
    on a cluster: ``("label", texts)`` is one Table 11 call over ``texts`` (Algorithm 3's entity extraction), their
    ``(entities, source)``; ``("embed", texts)`` their vectors from the run's embedding model, one float32 row each.
    Nothing is written here: the driver keeps both in its caches."""
    kind, texts = item
    if kind == "label":
        return label_entities(svc, texts, len(texts), step="build_graph")
    return np.asarray(svc.embeddings()(texts), dtype=np.float32)


def kb_documents(ctx: JudgeAgentContext) -> list[Document]:
    """The knowledge base's documents (a relative ``--kb`` is the driver's file on a Ray worker)."""
    return load_knowledge_base(local_path(ctx.kb) if ctx.kb else SAMPLE_KB, ctx.kb_fields or None)


def _kb_key(ctx: JudgeAgentContext) -> str:
    return str(Path(local_path(ctx.kb)).resolve()) if ctx.kb else str(SAMPLE_KB)


def extractor_key(svc: Services, ctx: JudgeAgentContext) -> str:
    """What changes the entities the evaluator extracts, and so keys the cached graph and entity labels beside the
    knowledge base's content: the model and its generation settings and the chunks per extraction call. Not the
    endpoint's URL: the same model served on another port or host extracts the same."""
    spec = svc.spec("evaluator")
    return (
        f"{svc.model_label('evaluator').split('@')[0]} t={spec.temperature} max_tokens={spec.max_tokens} "
        f"{spec.structured_method} batch={ctx.extract_batch}"
    )


def _open_graph(svc: Services, ctx: JudgeAgentContext, log: Any, progress: Progress | None = None) -> ContextGraph:
    """Load or build the context graph of ``ctx.kb`` (:func:`stores.context_graph_build.open_context_graph`). The build
    labels ``8 x --concurrency`` extraction calls' worth of chunks at a time: whole calls (the same requests as all
    at once), enough to keep every slot busy, their labels cached before the next slice (a killed build loses at
    most one slice). When the run's spread is remote (Ray), each extraction call and each embedding batch is one
    item of it (:func:`build_item`), its result cached as it comes back (a killed build loses what was out)."""
    spread = svc.spread
    return open_context_graph(
        kb_documents(ctx),
        cache_dir=svc.cache_dir,
        extractor_label=extractor_key(svc, ctx),
        extract=lambda texts: label_entities(svc, texts, ctx.extract_batch, step="build_graph", progress=progress),
        chroma=svc.chroma,
        embed=svc.embeddings(),
        log=log,
        progress=progress,
        label_slice=ctx.extract_batch if spread.remote else ctx.extract_batch * max(1, svc.config.concurrency) * 8,
        spread=(lambda items: spread.map(build_item, items)) if spread.remote else None,
    )


def context_graph(svc: Services, ctx: JudgeAgentContext, log: Any = lambda s: None) -> ContextGraph:
    """The run's context graph for ``ctx.kb`` (built once per run, cached across runs by corpus hash); when
    :func:`start_context_graph` is building it, waits for that build."""
    return svc.cached(f"judgeagent:graph:{_kb_key(ctx)}", lambda: _open_graph(svc, ctx, log))


def start_context_graph(
    svc: Services, ctx: JudgeAgentContext, log: Any, on_built: Callable[[ContextGraph], None]
) -> Background:
    """Build the run's context graph on a background thread (:meth:`Services.start_background`): a unit runs
    its grading and question-entity steps meanwhile and waits in ``sample_knowledge``, the first step that needs
    the graph (Algorithm 4). ``on_built`` runs on that thread once the graph is ready, before anyone gets it."""

    def build(job: Background) -> ContextGraph:
        graph = _open_graph(svc, ctx, log, job.progress)
        on_built(graph)
        return graph

    return svc.start_background(f"judgeagent:graph:{_kb_key(ctx)}", "context graph", build)


def _chunks_only(svc: Services, ctx: JudgeAgentContext) -> ContextGraph:
    """The knowledge base's chunks without entities: all the "w/o context graph" ablation draws from (its random
    paths are the same as over the full graph's chunks), so it never waits for a build."""
    return svc.cached(f"judgeagent:chunks:{_kb_key(ctx)}", lambda: ContextGraph.construct(kb_documents(ctx), {}))


def knowledge_tool(svc: Services, ctx: JudgeAgentContext, name: str) -> BaseTool:
    """One of the run's retrieval tools (:func:`tools.knowledge.knowledge_tools`) over its context graph (over
    the chunks alone in the "w/o context graph" ablation)."""
    graph = _chunks_only(svc, ctx) if ctx.no_context_graph else context_graph(svc, ctx)  # waits outside the lock
    tools = svc.cached(
        f"judgeagent:tools:{ctx.no_context_graph}:{_kb_key(ctx)}", lambda: {t.name: t for t in knowledge_tools(graph)}
    )
    return tools[name]


# -- nodes -------------------------------------------------------------------------------------


def extract_question_entities(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """Algorithm 4, lines 3-7: entities of the batch's base questions (one Table 11 call for the batch)."""
    ctx = runtime.context
    svc = services_of(ctx)
    qs = [BaseQuestion(**q) for q in state["batch"]]
    texts = [question_text(q) for q in qs]
    labelled = label_entities(svc, texts, batch=len(texts), step="question_entities")
    seeds = [{"entity": e, "question": t, "source": src} for t, (ents, src) in zip(texts, labelled) for e in ents]
    return {"question_entities": seeds}


def sample_knowledge(state: JudgeAgentState, runtime: Runtime[JudgeAgentContext]) -> dict[str, Any]:
    """Algorithm 4, lines 8-19 (or random chunks for the "w/o context graph" ablation); seeded per round.

    Sampled by the ``sample_knowledge_path`` retrieval tool, the one :mod:`tools.knowledge` offers agents.
    """
    ctx = runtime.context
    seeds = [{"entity": s["entity"], "question": s["question"]} for s in state.get("question_entities", [])]
    tool = knowledge_tool(services_of(ctx), ctx, "sample_knowledge_path")
    path = tool.invoke(
        {
            "seeds": seeds,
            "hops": ctx.hops,
            "k": ctx.top_k,
            "random_chunks": ctx.no_context_graph,
            "seed": seed_for(ctx.seed, "path", len(state.get("rounds", [])) + 1),
        }
    )
    return {"path": path}
