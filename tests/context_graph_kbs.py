"""Small knowledge bases for the context-graph equivalence tests, and the path samples drawn on them.

Each knowledge base is drawn from a fixed ``random.Random``: several documents, entities shared between chunks
and documents, an entity in every document, entity names differing only in case or a leading article (one graph
node, Algorithm 3's ``e not in N``), chunks without entities, and a one-document knowledge base (every entity a
neighbour of every other). ``tests/context_graph_paths.json`` holds the knowledge paths the materialized-clique
implementation (``stores/context_graph.py`` at commit 4afd1ff, networkx edges) sampled on these knowledge bases
with :func:`sample_all` through its ``open_context_graph`` (hashed embeddings, real Chroma), captured once with a
copy of that module before the incidence store replaced it; three captures in separate processes were identical.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from dyneval.stores.knowledge_base import Document

PATHS_FIXTURE = Path(__file__).resolve().parent / "context_graph_paths.json"

_NAMES = (
    "Harbor Mill",
    "Voss Canal",
    "Ada Quill",
    "Orden Bridge",
    "Kelso Ferry",
    "Juno Tannery",
    "Bram Quarry",
    "Lindum Guild",
    "Corran Beacon",
    "Hilde Archive",
    "Farrow Market",
    "Inver Granary",
    "Delia Orchard",
    "Gideon Foundry",
    "Elswick Chapel",
    "Jarrow Lantern",
    "Cato Tower",
    "Fenna Garden",
    "Emrys Council",
    "Leda River",
    "Ivo Harbour",
    "Kasimir Field",
    "Arden Road",
    "Bexley Dock",
)
_WORDS = "timber flood barge toll ledger spring autumn lock salt grain wool tide fair road".split()


def knowledge_base(
    seed: int, n_docs: int, chunks: tuple[int, int], per_chunk: tuple[int, int]
) -> tuple[list[Document], dict[str, list[str]]]:
    """``n_docs`` documents and the entity labels of every chunk text (the stand-in extractor's answers)."""
    rng = random.Random(seed)
    docs: list[Document] = []
    labels: dict[str, list[str]] = {}
    for d in range(n_docs):
        texts = []
        for c in range(rng.randint(*chunks)):
            k = rng.randint(*per_chunk)
            names = rng.sample(_NAMES[:16], k) if k else []
            if d % 2 == 0 and c == 0:
                names.append("Voss Canal")  # in every even document
            if rng.random() < 0.3 and names:  # another spelling of an entity already named
                names.append(rng.choice([n.lower() for n in names] + [f"the {n}" for n in names]))
            text = (
                f"Document {d} part {c}: "
                + ", ".join(names)
                + " and the "
                + " ".join(rng.sample(_WORDS, 4))
                + f" of year {rng.randint(1700, 1900)}."
            )
            texts.append(text)
            labels[text] = names
        docs.append(Document(id=f"doc{d}", title=f"doc {d}", chunks=texts))
    return docs, labels


#: name -> knowledge base
KBS: dict[str, tuple[list[Document], dict[str, list[str]]]] = {
    "several documents": knowledge_base(1, 6, (2, 6), (0, 4)),
    "one document": knowledge_base(2, 1, (8, 8), (1, 3)),
    "many documents, few entities each": knowledge_base(3, 14, (1, 3), (1, 2)),
}


def extractor(labels: dict[str, list[str]]) -> Any:
    """``extract(texts)`` answering each chunk text's labels (``"llm"``, or ``"keyword"`` for texts of part 1)."""
    return lambda texts: [(labels[t], "keyword" if " part 1:" in t else "llm") for t in texts]


def sample_all(graph: Any, names: list[str]) -> list[dict[str, Any]]:
    """Knowledge paths of 30 seeds: two question entities each (graph names, other spellings, or a phrase no node
    is keyed by, whose most similar entity is found by Chroma: one without a tie, as Chroma's order among equally
    similar entities varies between processes), 4 hops, top 5 (top 3 for every third seed)."""
    names = [n for n in names if not n.lower().startswith("the ")]  # "The the X" would be a phrase, not a name
    out = []
    for s in range(30):
        rng = random.Random(s)
        seeds = []
        for q in range(2):
            name = rng.choice(names)
            spelled = rng.choice([name, name.lower(), f"The {name}", f"the old {name}"])
            seeds.append((spelled, f"Question {q} of seed {s}: what about the {rng.choice(_WORDS)}?"))
        path = graph.sample_path(seeds, 4, random.Random(f"path-{s}"), k=3 if s % 3 == 0 else 5)
        out.append(path)
    return out
