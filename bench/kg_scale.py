"""JudgeAgent's context graph at knowledge-base scale: the incidence store vs the materialized cliques it replaced.

    python -m bench.kg_scale [--docs 20,200] [--old-max-edges 8000000] [--dims 384] [--hops 200]

A synthetic knowledge base of N documents shaped like long filings (``--chunks`` paragraphs each, default 190,
so 20 documents = 3800 chunks): every chunk names ``--common`` entities drawn (Zipf-like) from a pool of 900
shared by every document and ``--own`` entities of its own document's 120, so 20 documents hold ~3300 entities
and a shared entity neighbours nearly all of them (Algorithm 3, seed 000, Appendix C). Entities are labelled
deterministically (a dict lookup stands in for the LLM: extraction cost is not measured) and embedded by the fast
hashed bag of words of ``tests/fake_embedding.py`` (``--dims``); Chroma is the real one.

Each figure comes from its own child process (so one measurement's memory is not another's):

* ``new build``: ``open_context_graph`` from nothing (store, vector rows, Chroma), wall seconds and the child's
  peak RSS (``VmHWM``; the generated documents and labels, which a run also holds, are in it: ``input RSS``
  says how much);
* ``store``: megabytes of the incidence store, of the vector rows and of Chroma's folder;
* ``open``: a fresh process opening the built graph (``open_context_graph`` on the cached corpus: hashing the
  corpus, reading the store, mapping the vectors; no Chroma, no embedding) and its peak RSS;
* ``hop``: one hop of Algorithm 4 (line 13: the 5 unvisited neighbours most similar to the entity, line 15: that
  entity's 5 chunks most similar to the question) at the entity of median and of 99th-percentile degree, and at
  the degree nearest 10,000 when the knowledge base has one: median over ``--hops`` hops after the first, and
  the first (cold: its pages not yet read) separately;
* ``old``: the replaced code (kept here only, as reference): networkx clique edges and ``graph.json`` written
  (its build time leaves out the embedding and Chroma, which the new build time includes), ``graph.json``
  parsed (its open), a hop ranking every neighbour's vector with a Python sort (vectors already in memory: its
  warm case; reading them from Chroma, as a cold run did, is slower). Run only when the cliques hold at most
  ``--old-max-edges`` edges (it needs ~1 KB per edge).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tables import table  # noqa: E402

_WORDS = (
    "quarter revenue income margin segment liability asset equity cash flow operating expense tax share "
    "dividend lease debt interest rate customer product market risk growth cost goodwill inventory"
).split()


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def knowledge_base(n_docs: int, chunks: int, common: int, own: int, seed: int = 0) -> tuple[list[Any], dict]:
    """Documents and the labels of every chunk text (see the module docstring)."""
    from dyneval.stores.knowledge_base import Document

    rng = random.Random(seed)
    shared = [f"Shared Item {i}" for i in range(900)]
    weights = [1 / (i + 1) ** 0.6 for i in range(len(shared))]
    docs, labels = [], {}
    for d in range(n_docs):
        mine = [f"Filing {d} Item {i}" for i in range(120)]
        texts = []
        for c in range(chunks):
            names = list(dict.fromkeys(rng.choices(shared, weights, k=common) + rng.sample(mine, own)))
            filler = " ".join(rng.choices(_WORDS, k=80))
            text = f"Filing {d}, part {c}. " + "; ".join(names) + ". " + filler + "."
            texts.append(text)
            labels[text] = names
        docs.append(Document(id=f"filing-{d:04d}", title=f"filing {d}", chunks=texts))
    return docs, labels


# -- the replaced code, as reference --------------------------------------------------------------


def old_construct(docs: list[Any], labels: dict) -> Any:
    """The materialized Algorithm 3 of the replaced ``ContextGraph.construct``: networkx clique edges."""
    import networkx as nx

    from dyneval.stores.incidence import entity_key

    g = nx.Graph()
    for doc in docs:
        doc_entities: set[str] = set()
        for i, text in enumerate(doc.chunks):
            cid = f"{doc.id}#{i}"
            keys = []
            for name in labels[text]:
                k = entity_key(name)
                if k not in g:
                    g.add_node(k, name=name.strip(), chunks=[], docs=[], source="llm")
                node = g.nodes[k]
                if cid not in node["chunks"]:
                    node["chunks"].append(cid)
                if doc.id not in node["docs"]:
                    node["docs"].append(doc.id)
                keys.append(k)
            for a in keys:
                for b in keys:
                    if a != b:
                        g.add_edge(a, b, relation="chunk")
            doc_entities.update(keys)
        for a in doc_entities:
            for b in doc_entities:
                if a != b and not g.has_edge(a, b):
                    g.add_edge(a, b, relation="document")
    return g


def old_rank(query: np.ndarray, vecs: dict[str, np.ndarray], k: int) -> list[str]:
    ids = list(vecs)
    matrix = np.stack([vecs[i] for i in ids])
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
    sims = (matrix @ query) / np.where(norms == 0, 1.0, norms).astype(np.float32)
    sim = dict(zip(ids, sims.tolist()))
    return sorted(ids, key=lambda i: (-round(sim[i], 6), i))[:k]


def old_edges_estimate(docs: list[Any], labels: dict) -> int:
    """Edges of the clique graph (exact: distinct entity pairs sharing a document), counted without building it
    when the documents are few, else bounded by the per-document cliques."""
    from dyneval.stores.incidence import entity_key

    per_doc = [len({entity_key(n) for t in d.chunks for n in labels[t]}) for d in docs]
    return sum(n * (n - 1) // 2 for n in per_doc)


# -- children ----------------------------------------------------------------------------------------


def _args_kb(args: argparse.Namespace, n_docs: int) -> tuple[list[Any], dict]:
    return knowledge_base(n_docs, args.chunks, args.common, args.own)


def _extract(labels: dict) -> Any:
    return lambda texts: [(labels[t], "llm") for t in texts]


def _open(docs: list[Any], labels: dict, cache: Path, dims: int) -> Any:
    """``open_context_graph`` (imported by :func:`child`, before any clock starts)."""
    from dyneval.stores.context_graph_build import open_context_graph
    from dyneval.stores.vectors import chroma_client
    from tests.fake_embedding import HashEmbedding

    return open_context_graph(
        docs,
        cache_dir=cache,
        extractor_label="bench",
        extract=_extract(labels),
        chroma=chroma_client,
        embed=HashEmbedding(dims),
        label_slice=10_000,
    )


def _folder_mb(folder: Path, pattern: str) -> float:
    return (
        sum(
            p.stat().st_size
            for f in folder.glob(pattern)
            for p in ([f] if f.is_file() else f.rglob("*"))
            if p.is_file()
        )
        / 1e6
    )


def _timed_open(args: argparse.Namespace, n_docs: int, cache: Path) -> tuple[Any, float, float]:
    """The knowledge base of ``n_docs`` documents opened (built when not cached); RSS before, seconds taken."""
    docs, labels = _args_kb(args, n_docs)
    before = rss_mb()
    started = time.perf_counter()
    graph = _open(docs, labels, cache, args.dims)
    return graph, before, time.perf_counter() - started


def child_new_build(args: argparse.Namespace, n_docs: int, cache: Path) -> dict[str, Any]:
    graph, input_rss, wall = _timed_open(args, n_docs, cache)
    folder = graph.folder
    return {
        "build_s": wall,
        "peak_rss_mb": peak_rss_mb(),
        "input_rss_mb": input_rss,
        **graph.stats(),
        "store_mb": _folder_mb(folder, "incidence.sqlite*"),
        "vectors_mb": _folder_mb(folder, "vectors-*"),
        "chroma_mb": _folder_mb(folder, "chroma"),
    }


def child_new_open(args: argparse.Namespace, n_docs: int, cache: Path) -> dict[str, Any]:
    graph, before, open_s = _timed_open(args, n_docs, cache)
    open_peak = peak_rss_mb()
    rng = random.Random(0)
    pool = graph.keys if len(graph.keys) <= 40_000 else rng.sample(graph.keys, 20_000)  # degrees of a sample
    degrees = np.array([graph.degree(k) for k in pool])
    out: dict[str, Any] = {
        "open_s": open_s,
        "open_peak_rss_mb": open_peak,
        "rss_before_open_mb": before,
        "degree_p50": float(np.percentile(degrees, 50)),
        "degree_p99": float(np.percentile(degrees, 99)),
        "degree_max": int(degrees.max()),
    }
    targets = {"p50": out["degree_p50"], "p99": out["degree_p99"]}
    if out["degree_max"] >= 10_000:
        targets["10k"] = 10_000
    for name, target in targets.items():
        entities = [pool[i] for i in np.argsort(np.abs(degrees - target), kind="stable")[:10]]
        times, first = [], None
        for h in range(args.hops + 1):
            entity = entities[h % len(entities)]
            t0 = time.perf_counter()
            cands = graph.nearest_neighbours(entity, 5, exclude=[entity])
            graph.nearest_chunks(cands[0], f"What was the {_WORDS[h % len(_WORDS)]} in the quarter?", 5)
            ms = (time.perf_counter() - t0) * 1000
            if first is None:
                first = ms
            else:
                times.append(ms)
        out[f"hop_{name}"] = {
            "degree": int(np.median([graph.degree(e) for e in entities])),
            "median_ms": statistics.median(times),
            "first_ms": first,
        }
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_old(args: argparse.Namespace, n_docs: int, cache: Path) -> dict[str, Any]:
    import networkx as nx

    from tests.fake_embedding import HashEmbedding

    docs, labels = _args_kb(args, n_docs)
    input_rss = rss_mb()
    started = time.perf_counter()
    g = old_construct(docs, labels)
    build_s = time.perf_counter() - started
    path = cache / "graph.json"
    started = time.perf_counter()
    chunks = {f"{d.id}#{i}": {"doc": d.id, "text": t} for d in docs for i, t in enumerate(d.chunks)}
    path.write_text(json.dumps({"format": 1, "chunks": chunks, "graph": nx.node_link_data(g, edges="edges")}))
    build_s += time.perf_counter() - started
    build_peak = peak_rss_mb()
    edges = g.number_of_edges()
    del g
    started = time.perf_counter()
    data = json.loads(path.read_text())
    g = nx.node_link_graph(data["graph"], edges="edges")
    open_s = time.perf_counter() - started
    embed = HashEmbedding(args.dims)
    keys = list(g.nodes)
    entity_vecs = dict(zip(keys, embed([g.nodes[k]["name"] for k in keys])))
    chunk_vecs = dict(zip(chunks, embed([c["text"] for c in chunks.values()])))
    degrees = np.array([g.degree[k] for k in keys])
    out: dict[str, Any] = {
        "build_s": build_s,
        "build_peak_rss_mb": build_peak,
        "input_rss_mb": input_rss,
        "edges": edges,
        "json_mb": path.stat().st_size / 1e6,
        "open_s": open_s,
    }
    for name, target in (("p50", np.percentile(degrees, 50)), ("p99", np.percentile(degrees, 99))):
        entities = [keys[i] for i in np.argsort(np.abs(degrees - target), kind="stable")[:10]]
        times = []
        for h in range(args.hops):
            entity = entities[h % len(entities)]
            t0 = time.perf_counter()
            cands = [n for n in g.neighbors(entity) if n != entity]
            best = old_rank(entity_vecs[entity], {c: entity_vecs[c] for c in cands}, 5)
            query = np.asarray(embed([f"What was the {_WORDS[h % len(_WORDS)]} in the quarter?"])[0])
            old_rank(query, {c: chunk_vecs[c] for c in g.nodes[best[0]]["chunks"]}, 5)
            times.append((time.perf_counter() - t0) * 1000)
        out[f"hop_{name}"] = {
            "degree": int(np.median([g.degree[e] for e in entities])),
            "median_ms": statistics.median(times),
        }
    out["peak_rss_mb"] = peak_rss_mb()
    return out


CHILDREN = {"new-build": child_new_build, "new-open": child_new_open, "old": child_old}


def run_child(args: argparse.Namespace, what: str, n_docs: int, cache: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "bench.kg_scale",
        "--child",
        what,
        str(n_docs),
        str(cache),
        "--chunks",
        str(args.chunks),
        "--common",
        str(args.common),
        "--own",
        str(args.own),
        "--dims",
        str(args.dims),
        "--hops",
        str(args.hops),
    ]
    done = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    )
    if done.returncode != 0:
        raise SystemExit(f"{what} {n_docs}: failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", default="20,200", help="knowledge-base sizes in documents (up to 2000)")
    parser.add_argument("--chunks", type=int, default=190, help="chunks per document")
    parser.add_argument("--common", type=int, default=5, help="shared entities named per chunk")
    parser.add_argument("--own", type=int, default=4, help="the document's own entities named per chunk")
    parser.add_argument("--dims", type=int, default=384, help="embedding dimensions (all-MiniLM-L6-v2: 384)")
    parser.add_argument("--hops", type=int, default=200, help="hops timed per degree")
    parser.add_argument("--old-max-edges", type=int, default=8_000_000, help="largest clique graph to build")
    parser.add_argument("--child", nargs=3, metavar=("WHAT", "DOCS", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, n_docs, cache = args.child
        for module in ("dyneval.stores.context_graph_build", "tests.fake_embedding"):  # chromadb with it: imports are
            importlib.import_module(module)  # the process's cost, not the figure's
        print(json.dumps(CHILDREN[what](args, int(n_docs), Path(cache)), default=float))
        return
    print(
        f"machine: {os.cpu_count()} cores; {args.chunks} chunks per document, {args.common} shared + {args.own} "
        f"own entities per chunk, {args.dims}-dimensional hashed embeddings"
    )
    rows_build, rows_open, rows_hop = [], [], []
    for n_docs in [int(x) for x in args.docs.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            build = run_child(args, "new-build", n_docs, Path(tmp))
            opened = run_child(args, "new-open", n_docs, Path(tmp))
        docs, labels = knowledge_base(n_docs, args.chunks, args.common, args.own)
        edges = old_edges_estimate(docs, labels)
        del docs, labels
        old = None
        if edges <= args.old_max_edges:
            with tempfile.TemporaryDirectory() as tmp:
                old = run_child(args, "old", n_docs, Path(tmp))
        label = f"{n_docs} docs"
        rows_build.append(
            [
                label,
                build["chunks"],
                build["entities"],
                build["mentions"],
                old["edges"] if old else f"~{edges:,} (not built)",
                f"{build['build_s']:.1f}",
                f"{old['build_s']:.1f}" if old else "-",
                f"{build['peak_rss_mb']:.0f} (input {build['input_rss_mb']:.0f})",
                f"{old['build_peak_rss_mb']:.0f}" if old else "-",
                f"{build['store_mb']:.1f} + {build['vectors_mb']:.1f} + {build['chroma_mb']:.1f}",
                f"{old['json_mb']:.1f}" if old else "-",
            ]
        )
        rows_open.append(
            [
                label,
                f"{opened['open_s']:.2f}",
                f"{old['open_s']:.2f}" if old else "-",
                f"{opened['open_peak_rss_mb']:.0f} (before {opened['rss_before_open_mb']:.0f})",
                f"{old['peak_rss_mb']:.0f}" if old else "-",
            ]
        )
        for name in ("p50", "p99", "10k"):
            if f"hop_{name}" not in opened:
                continue
            hop = opened[f"hop_{name}"]
            old_hop = old.get(f"hop_{name}") if old else None
            rows_hop.append(
                [
                    label,
                    name,
                    hop["degree"],
                    f"{hop['median_ms']:.2f}",
                    f"{hop['first_ms']:.2f}",
                    f"{old_hop['median_ms']:.2f}" if old_hop else "-",
                    f"{old_hop['median_ms'] / hop['median_ms']:.0f}x" if old_hop else "-",
                ]
            )
        print(f"{label}: build {build}\n  open {opened}\n  old {old}", file=sys.stderr)
    table(
        "Build (seconds, peak RSS MB of the build process; store MB = incidence + vector rows + Chroma; "
        "old s = cliques + graph.json only, no embedding)",
        [
            "KB",
            "chunks",
            "entities",
            "mentions",
            "clique edges",
            "new s",
            "old s",
            "new peak MB",
            "old peak MB",
            "new store MB",
            "old graph.json MB",
        ],
        rows_build,
    )
    table(
        "Open a built graph in a fresh process (seconds; peak RSS MB of that process)",
        ["KB", "new s", "old s", "new peak MB", "old peak MB"],
        rows_open,
    )
    table(
        "One hop of Algorithm 4 (lines 13-16), ms: median over hops, first hop after opening; old = warm",
        ["KB", "degree", "value", "new ms", "new first ms", "old ms", "old/new"],
        rows_hop,
    )


if __name__ == "__main__":
    main()
