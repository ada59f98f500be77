"""The shipped embedding model on its two backends, side by side in one run: chunks per second and agreement.

    python -m bench.embeddings [--chunks 512] [--batch 64] [--rounds 2] [--data ori_pqal.json]

Texts: the abstracts of PubMedQA (``--data``, default ``../shared/data/pubmedqa/ori_pqal.json`` beside the
checkout; a worktree elsewhere names the file), cut into the knowledge base's
paragraph chunks (``stores.knowledge_base.split_paragraphs``: 200-1200 characters), the first ``--chunks`` of them.
Both embedding functions are the run's own (``stores.vectors.embedding_function`` with ``embedding_backend`` torch
and openvino), loaded and warmed up first (the ONNX export, if the cache lacks it, happens then and is not timed). Each
round embeds every batch of ``--batch`` chunks (a context-graph build's batch, ``CHUNK_BATCH``) with one backend then
the other, alternating which goes first, so both see the same load. Printed: chunks/s (wall) and CPU ms per chunk of
each backend, the ratios openvino / torch, and the minimum and mean cosine between the two backends' vectors of the same
chunk.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tables import table  # noqa: E402
from dyneval.stores.context_graph import CHUNK_BATCH  # noqa: E402
from dyneval.stores.knowledge_base import split_paragraphs  # noqa: E402
from dyneval.stores.vectors import BACKENDS, embedding_function  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "pubmedqa" / "ori_pqal.json"


def chunks(n: int, data: Path = DATA) -> list[str]:
    """The first ``n`` paragraph chunks of PubMedQA's abstracts."""
    out: list[str] = []
    for record in json.loads(data.read_text(encoding="utf-8")).values():
        out += split_paragraphs("\n\n".join(record["CONTEXTS"]))
        if len(out) >= n:
            return out[:n]
    raise SystemExit(f"{data} has only {len(out)} chunks; ask for fewer with --chunks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=512)
    parser.add_argument("--batch", type=int, default=CHUNK_BATCH)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA, help="PubMedQA's ori_pqal.json")
    args = parser.parse_args()
    texts = chunks(args.chunks, args.data)
    embed = {backend: embedding_function(None, backend) for backend in BACKENDS}
    for f in embed.values():
        f(texts[: args.batch])  # load (and export) the model, warm up
    wall = dict.fromkeys(BACKENDS, 0.0)
    cpu = dict.fromkeys(BACKENDS, 0.0)
    vectors: dict[str, list[np.ndarray]] = {b: [] for b in BACKENDS}
    for rnd in range(args.rounds):
        for k, start in enumerate(range(0, len(texts), args.batch)):
            batch = texts[start : start + args.batch]
            for backend in BACKENDS if (rnd + k) % 2 == 0 else BACKENDS[::-1]:
                w, c = time.perf_counter(), time.process_time()
                got = embed[backend](batch)
                wall[backend] += time.perf_counter() - w
                cpu[backend] += time.process_time() - c
                if rnd == 0:
                    vectors[backend] += [np.asarray(v, dtype=np.float64) for v in got]
    a, b = (np.stack(vectors[backend]) for backend in BACKENDS)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    n = len(texts) * args.rounds
    table(
        f"all-MiniLM-L6-v2, {len(texts)} PubMedQA chunks (mean {np.mean([len(t) for t in texts]):.0f} chars), "
        f"batches of {args.batch}, {args.rounds} round(s)",
        ["backend", "chunks/s", "CPU ms/chunk"],
        [[backend, f"{n / wall[backend]:.1f}", f"{1000 * cpu[backend] / n:.2f}"] for backend in BACKENDS],
    )
    speed, saving = wall["torch"] / wall["openvino"], cpu["torch"] / cpu["openvino"]
    print(f"\nopenvino / torch: {speed:.2f}x chunks/s, {saving:.2f}x less CPU per chunk")
    print(f"cosine openvino vs torch over the {len(texts)} chunks: min {cosine.min():.4f}, mean {cosine.mean():.4f}")


if __name__ == "__main__":
    main()
