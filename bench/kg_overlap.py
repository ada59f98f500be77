"""JudgeAgent with its context graph built before the batches start vs while they run (issue 14), measured in one
process, back to back, against the stand-in endpoint of ``bench.speed`` (its own process, ``--latency`` s per
request).

    python -m bench.kg_overlap [--latency 0.2] [--chunks 300] [--concurrency 16] [--limit 5] [--repeats 1]

* ``before``: the protocol's ``prepare()`` waits for the build before it returns, as it did before the build moved
  to a background thread (the shipped code, with ``prepare`` wrapped to wait for the build's future);
* ``slots held``: overlapped, but a batch keeps its ``--concurrency`` slot while it waits for the graph (the
  runner's scheduling before waiting units gave their slots back: ``runtime.executors.threads._UnitSlot.idle``
  made a no-op), so with more batches than ``--concurrency`` the others start only as the first ones end;
* ``overlapped``: the shipped code: batches grade their base questions and label their question entities while the
  graph builds, and wait for it at their first knowledge path, giving their slot to the next batch meanwhile.

Each run is ``run.main`` (the CLI) with a fresh ``--out``, so neither the graph nor the entity labels nor the
vectors come from a cache; the embedding model (all-MiniLM) is loaded once before the first timed run, so both
modes pay the build's embedding but not the model load (a cold process would overlap that ~10 s too). Knowledge
bases: the shipped sample (16 chunks) and a synthetic one of ``--chunks`` chunks this script writes (documents of
five paragraphs naming made-up places, people and trades). Columns: wall seconds of each mode, the ratios to
``overlapped``, and when the first batch request left after the run started (the overlap shows there).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.speed import ROLES, standin  # noqa: E402
from bench.tables import table  # noqa: E402

_PLACES = "Arden Bexley Corran Dunmore Elswick Farrow Glenrae Hallam Inver Jarrow Kelso Lindum".split()
_PEOPLE = "Ada Bram Cato Delia Emrys Fenna Gideon Hilde Ivo Juno Kasimir Leda".split()
_TRADES = "mill ferry foundry tannery granary quarry orchard harbour archive beacon guild market".split()


def synthetic_kb(folder: Path, chunks: int, seed: int = 0) -> Path:
    """A JSONL knowledge base of ``chunks`` paragraphs (five per document), each long enough to be one chunk."""
    rng = random.Random(seed)
    path = folder / "synthetic_kb.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for d in range(-(-chunks // 5)):
            paragraphs = []
            for _ in range(min(5, chunks - 5 * d)):
                place, other, person = rng.choice(_PLACES), rng.choice(_PLACES), rng.choice(_PEOPLE)
                trade, second = rng.choice(_TRADES), rng.choice(_TRADES)
                paragraphs.append(
                    f"The {trade} of {place} was run by {person} {rng.choice(_PLACES)}son for {rng.randint(3, 40)} "
                    f"years. Its goods went by road to {other}, where the {second} bought them at the autumn "
                    f"fair. In {rng.randint(1700, 1900)} a flood closed the road, and {person} moved the {trade} "
                    f"closer to the {rng.choice(_TRADES)} of {rng.choice(_PLACES)}."
                )
            fh.write(
                json.dumps(
                    {
                        "id": f"doc{d}",
                        "title": f"Records of {_PLACES[d % len(_PLACES)]} {d}",
                        "text": "\n\n".join(paragraphs),
                    }
                )
                + "\n"
            )
    return path


@contextlib.contextmanager
def graph_first() -> Iterator[None]:
    """``prepare()`` returns only once the context graph is built (the order before the build ran in the
    background)."""
    from dyneval.protocols.judgeagent import JudgeAgentProtocol

    original = JudgeAgentProtocol.prepare

    def prepare(self: Any, run: Any, units: Any) -> None:
        original(self, run, units)
        for job in run.services.background():
            job.future.result()

    JudgeAgentProtocol.prepare = prepare  # type: ignore[method-assign]
    try:
        yield
    finally:
        JudgeAgentProtocol.prepare = original  # type: ignore[method-assign]


@contextlib.contextmanager
def slots_held() -> Iterator[None]:
    """A batch waiting for the graph keeps its worker slot."""
    import dyneval.runtime.executors.threads as threads

    original = threads._UnitSlot.idle
    threads._UnitSlot.idle = lambda self: contextlib.nullcontext()  # type: ignore[method-assign]
    try:
        yield
    finally:
        threads._UnitSlot.idle = original  # type: ignore[method-assign]


MODES = {"before": graph_first, "slots held": slots_held, "overlapped": contextlib.nullcontext}


def timed_run(url: str, kb: Path | None, concurrency: int, limit: int, mode: str) -> dict[str, float]:
    """One JudgeAgent run through the CLI; its wall and when its first batch request left (seconds)."""
    from dyneval import cli

    with tempfile.TemporaryDirectory() as out:
        argv = [
            "--protocol",
            "judgeagent",
            "--limit",
            str(limit),
            "--concurrency",
            str(concurrency),
            "--out",
            out,
            *(["--kb", str(kb)] if kb else []),
            *[x for role in ROLES for x in (f"--{role}", f"{role}@{url}")],
        ]
        started = time.time()
        with MODES[mode](), contextlib.redirect_stdout(io.StringIO()) as console:
            code = cli.main(argv)
        wall = time.time() - started
        if code != 0:
            raise RuntimeError(f"judgeagent exited {code}: {console.getvalue()[-2000:]}")
        run_dir = next(p for p in Path(out).iterdir() if p.is_dir() and not p.name.startswith("_"))
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        first = min(e["ts"] - e["latency_s"] - e.get("queue_s", 0.0) for e in events if e["unit"] != "-")
        chunks = json.loads((run_dir / "kb_stats.json").read_text())["chunks"]
    return {"wall": wall, "first_unit": first - started, "chunks": chunks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request at the stand-in")
    parser.add_argument("--chunks", type=int, default=300, help="chunks of the synthetic knowledge base")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--limit", type=int, default=5, help="batches (3 sample questions each)")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs per knowledge base")
    args = parser.parse_args()
    from dyneval.stores.vectors import embedding_function

    embedding_function(None)(["warm-up"])  # the model loads at its first call: once, outside the timed runs
    rows = []
    with tempfile.TemporaryDirectory() as tmp, standin(args.latency) as url:
        for name, kb in (("shipped sample", None), ("synthetic", synthetic_kb(Path(tmp), args.chunks))):
            for _ in range(args.repeats):
                runs = {mode: timed_run(url, kb, args.concurrency, args.limit, mode) for mode in MODES}
                before, held, overlapped = runs.values()
                rows.append(
                    [
                        name,
                        before["chunks"],
                        *(f"{r['wall']:.1f}" for r in runs.values()),
                        f"{before['wall'] / overlapped['wall']:.2f}x",
                        f"{held['wall'] / overlapped['wall']:.2f}x",
                        f"{before['first_unit']:.1f}",
                        f"{overlapped['first_unit']:.1f}",
                    ]
                )
    table(
        f"judgeagent, --limit {args.limit} batches, --concurrency {args.concurrency}, latency {args.latency}s: "
        "graph built before the batches vs overlapped (waiting batches keeping their slot vs giving it back)",
        [
            "knowledge base",
            "chunks",
            "wall before s",
            "slots held s",
            "overlapped s",
            "before / overlapped",
            "held / overlapped",
            "first batch request before s",
            "overlapped s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
