"""JudgeAgent's context-graph build (seed 000, Algorithm 3) spread over a run's workers (``services.spread``, as on
a Ray cluster): the extraction calls and embedding batches go out as items and come back in any order, and the
driver keeps what comes back. Run here by a test-only spread that ends the items in reversed or shuffled order,
the build equals an in-order build in this process: the same requests, every entity's node and neighbours, the
entity-label cache, the vector cache and rows, the progress of every stage. A stop ends the build with
``StopRequested``, keeping what came back; the next build asks only for the rest and equals a fresh one."""

from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dyneval.stores.context_graph as cg
from dyneval.nodes.judgeagent.knowledge import _open_graph
from dyneval.runtime import stop
from dyneval.runtime.services import Background, Services
from dyneval.state.judgeagent import JudgeAgentContext
from tests.fake_embedding import HashEmbedding
from tests.test_judgeagent_support import FakeEvaluator, fake_services

PLACES = [
    "Voss Canal",
    "Lake Orden",
    "Harl",
    "Brenmark",
    "Orden Delta",
    "Timber Exchange",
    "Harl Lighthouse",
    "Stolt Bridge",
    "Kelm Ridge",
    "Askel Fjord",
    "Port Vinna",
    "Dunmere",
]
PEOPLE = ["Mira Stolt", "Jonas Keller", "Ada Brenn", "Tomas Vinn", "Elsa Marr", "Otto Lind"]


def write_kb(folder: Path, documents: int = 6, paragraphs: int = 4, seed: int = 3) -> Path:
    """A knowledge base of ``documents`` Markdown files about a made-up coast, ``paragraphs`` chunks each (every
    paragraph over the chunker's 200 characters); places and people recur across documents, so entities link
    documents."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(documents):
        paras = []
        for p in range(paragraphs):
            a, b = rng.sample(PLACES, 2)
            who = rng.choice(PEOPLE)
            year = 1850 + rng.randrange(80)
            paras.append(
                f"In {year} {who} surveyed the route from {a} to {b}, noting the depth of every channel "
                f"and the tides that governed the barges. Her report on {a} (part {d}.{p}) was read aloud "
                f"in {b}, where merchants argued for weeks about the cost of dredging the lower reaches."
            )
        (folder / f"doc{d}.md").write_text(f"# Survey {d}\n\n" + "\n\n".join(paras), encoding="utf-8")
    return folder


class OrderedSpread:
    """A test-only :class:`runtime.spread.Spread` that says its items leave the process (``remote``) but runs them
    here, with the run's services, in ``order(n)`` (a permutation of the item indices); after ``stop_after`` results
    it requests the run's stop, as Ctrl-C would."""

    remote = True

    def __init__(self, services: Services, order: Callable[[int], list[int]], stop_after: int | None = None) -> None:
        self.services, self.order, self.stop_after = services, order, stop_after
        self.items: list[Any] = []  # every item of every map, in the order run

    def map(self, fn: Callable[[Services, Any], Any], items: list[Any]):
        for n, i in enumerate(self.order(len(items))):
            stop.raise_if_stopped()
            self.items.append(items[i])
            yield i, fn(self.services, items[i])
            if self.stop_after is not None and n + 1 >= self.stop_after:
                stop.request_stop()


ORDERS = {"reversed": lambda n: list(range(n))[::-1], "shuffled": lambda n: random.Random(11).sample(range(n), n)}


@pytest.fixture
def small_batches(monkeypatch):
    """Embedding batches of 4 texts, so a small knowledge base has several of each kind."""
    monkeypatch.setattr(cg, "CHUNK_BATCH", 4)
    monkeypatch.setattr(cg, "ENTITY_BATCH", 4)


@pytest.fixture
def embeddings(monkeypatch) -> dict[Path, HashEmbedding]:
    """Each run's own counting embedding function, by its run folder."""
    by_run: dict[Path, HashEmbedding] = {}
    monkeypatch.setattr(Services, "embeddings", lambda self: by_run.setdefault(self.run_dir, HashEmbedding()))
    return by_run


class Build:
    """One build of the knowledge base's graph by a run of its own (``out``), with its evaluator and progress."""

    def __init__(self, out: Path, kb: Path, spread: Callable[[Services], Any] | None = None) -> None:
        self.evaluator = FakeEvaluator()
        self.services = fake_services(out, self.evaluator, lambda m, t: "x")
        if spread is not None:
            self.services.spread = spread(self.services)
        self.job = Background("context graph")
        self.ctx = JudgeAgentContext(services=self.services, kb=str(kb), extract_batch=2)

    def open(self) -> cg.ContextGraph:
        return _open_graph(self.services, self.ctx, lambda s: None, self.job.progress)

    def requests(self) -> Counter[str]:
        return Counter(self.evaluator.prompts.get("EntityLabels", []))

    def labels(self) -> tuple[dict[str, Any], int]:
        """The entity-label cache (text hash -> entities and source) and its number of lines."""
        [path] = (self.services.cache_dir / "judgeagent").glob("entities-*.jsonl")
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return {r["h"]: (r["entities"], r["source"]) for r in lines}, len(lines)

    def vectors(self) -> dict[str, bytes]:
        [path] = (self.services.cache_dir / "judgeagent").glob("embeddings-*.sqlite")
        with sqlite3.connect(path) as db:
            return dict(db.execute("SELECT key, vec FROM vectors"))


def same_graph(a: cg.ContextGraph, b: cg.ContextGraph) -> None:
    assert a.keys == b.keys and len(a.keys) > 10 and dict(a.chunks) == dict(b.chunks)
    for key in a.keys:
        assert a.node(key) == b.node(key)
        assert a.neighbours(key) == b.neighbours(key)
    for kind in ("chunks", "entities"):
        assert np.array_equal(a._matrix(kind), b._matrix(kind))


@pytest.mark.parametrize("order", list(ORDERS))
def test_items_ending_out_of_order_build_what_an_in_order_build_does(tmp_path, small_batches, embeddings, order):
    kb = write_kb(tmp_path / "kb")
    here = Build(tmp_path / "threads", kb)
    spread = Build(tmp_path / "spread", kb, lambda svc: OrderedSpread(svc, ORDERS[order]))
    in_order, out_of_order = here.open(), spread.open()

    same_graph(out_of_order, in_order)
    assert spread.requests() == here.requests() and sum(here.requests().values()) == -(-24 // 2)
    assert spread.labels() == here.labels()  # one line per chunk: none labelled twice
    assert spread.vectors() == here.vectors()
    embed_here, embed_spread = embeddings[here.services.run_dir], embeddings[spread.services.run_dir]
    assert sorted(embed_spread.calls) == sorted(embed_here.calls)
    assert len(embed_here.calls) == 24 // 4 + -(-len(in_order.keys) // 4)  # each text once, in batches of 4
    assert Counter(embed_spread.texts) == Counter(embed_here.texts)
    assert spread.job.snapshot() == here.job.snapshot()  # every stage counted to its total, on the driver
    kinds = [kind for kind, _ in spread.services.spread.items]
    assert kinds.count("label") == 12 and kinds.count("embed") == len(embed_here.calls)
    assert spread.services.events.by_role()["evaluator"].calls == here.services.events.by_role()["evaluator"].calls


def test_a_stop_ends_the_spread_build_and_the_next_build_labels_only_what_had_not_come_back(
    tmp_path, small_batches, embeddings
):
    kb = write_kb(tmp_path / "kb")
    # reversed: the 6 chunk batches to embed come back first, then 4 of the 12 extraction calls
    first = Build(tmp_path / "spread", kb, lambda svc: OrderedSpread(svc, ORDERS["reversed"], stop_after=10))
    try:
        with pytest.raises(stop.StopRequested):
            first.open()
    finally:
        stop.clear()
    came_back = first.services.spread.items
    labelled = {t for kind, texts in came_back if kind == "label" for t in texts}
    assert len(came_back) == 10 and len(labelled) == 8
    cached, lines = first.labels()
    assert lines == len(cached) == len(labelled)  # each result kept once, as it came back
    embedded = embeddings[first.services.run_dir].texts  # the same run folder: the next build adds to it
    first_embedded = len(embedded)
    assert first_embedded == 24  # every chunk

    resumed = Build(tmp_path / "spread", kb, lambda svc: OrderedSpread(svc, ORDERS["shuffled"]))
    graph = resumed.open()
    asked = {t for kind, texts in resumed.services.spread.items if kind == "label" for t in texts}
    assert asked and not asked & labelled and len(asked | labelled) == 24
    assert not set(embedded[first_embedded:]) & set(embedded[:first_embedded])  # no chunk embedded again
    fresh = Build(tmp_path / "threads", kb)
    same_graph(graph, fresh.open())
    assert resumed.labels()[0] == fresh.labels()[0] and resumed.vectors() == fresh.vectors()
