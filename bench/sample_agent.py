"""One turn of the shipped sample retrieval agent (``samples/agents/rag.py``) on its in-process embedded model,
with llama.cpp's prompt batch at langchain_community's default of 8 tokens and at the sample's own
(``rag.N_BATCH``), side by side in this process.

    python -m bench.sample_agent [--repeats 1]

The turn is the one a JudgeAgent run sends first: the protocol's answer instructions and the sample's first base
question, on a fresh thread (retrieval, then the model's answer with the notes it found). The figure is the wall
time of the turn (the model's load excluded), and the default's as a ratio of the sample's, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from langchain_core.messages import HumanMessage

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tables import table  # noqa: E402
from dyneval.samples.agents import rag  # noqa: E402

#: langchain_community's ChatLlamaCpp default prompt batch.
LIBRARY_N_BATCH = 8


def first_turn() -> str:
    """JudgeAgent's first message to an agent: its system prompt as the preamble, then the sample's first base
    question with its options (``nodes/judgeagent/grading.py``)."""
    from dyneval.nodes.judgeagent.grading import base_messages
    from dyneval.state.judgeagent import BaseQuestion

    question = BaseQuestion(**json.loads((REPO / "samples/judgeagent/questions.jsonl").read_text().splitlines()[0]))
    return "\n\n".join(str(m.content) for m in base_messages(question, "phrase"))


def turn_seconds(n_batch: int, message: str) -> float:
    """Wall seconds of one sample-agent turn with the model's prompt batch at ``n_batch`` (loaded beforehand)."""
    rag.N_BATCH = n_batch
    rag.chat_model.cache_clear()
    rag.chat_model()  # loaded outside the timing
    started = time.perf_counter()
    rag.graph.invoke({"messages": [HumanMessage(message)]})
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1, help="turns per setting (alternating)")
    args = ap.parse_args()
    for name in (rag.MODEL_ENV, rag.EMBEDDED_ENV):
        os.environ.pop(name, None)  # the in-process model
    shipped, message = rag.N_BATCH, first_turn()
    times: dict[int, list[float]] = {LIBRARY_N_BATCH: [], shipped: []}
    for _ in range(args.repeats):
        for n_batch in times:
            times[n_batch].append(turn_seconds(n_batch, message))
    rows = [[n, f"{min(t):.1f}", f"{sum(t) / len(t):.1f}"] for n, t in times.items()]
    table("one sample-agent turn, in-process SmolLM2-135M", ["n_batch", "min s", "mean s"], rows)
    ratio = min(times[LIBRARY_N_BATCH]) / min(times[shipped])
    print(f"\nn_batch {LIBRARY_N_BATCH} / n_batch {shipped}: {ratio:.1f}x; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
