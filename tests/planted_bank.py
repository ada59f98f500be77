"""A generated llmeval question file with planted duplicates, for import tests (hashed bag-of-words embeddings,
``tests/fake_embedding.py``, at a near-duplicate threshold of 0.9).

Originals are 12 words drawn from 400 (cosine ~0.25 between two of them); a near duplicate is an earlier record
with one word added (cosine ~0.96), and an exact duplicate is an earlier record upper-cased (the same normalised
hash). Some duplicates repeat the record just before (the same embedding item), others one far back (another
item, or another import batch). Every fifth original is a multiple-choice question, so ``--augment`` replaces it by
its true/false variants (its active flag then goes off), and some are material-analysis questions (for
``--rewrite``). Every record has its own UUID, so two imports of the file can be compared question by question.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = [f"w{i}" for i in range(400)]
ADDED = ("indeed", "precisely", "briefly", "exactly", "clearly")


def planted_records(n: int, seed: int = 11) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``n`` records in the native layout and how many exact and near duplicates were planted."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    planted = {"exact": 0, "near": 0}
    for i in range(n):
        record: dict[str, Any] = {
            "uuid": f"q{i:04d}",
            "discipline": ("Law", "Science", "History")[i % 3],
            "question": " ".join(rng.sample(WORDS, 12)) + "?",
            "answer": "an answer",
        }
        if i >= 2 and i % 7 == 3:  # near duplicate: of the record just before, or of any earlier one
            earlier = records[i - 1] if i % 2 else records[rng.randrange(i - 1)]
            record["question"] = earlier["question"][:-1] + f" {ADDED[i % len(ADDED)]}?"
            planted["near"] += 1
        elif i >= 2 and i % 11 == 5:  # exact duplicate of an earlier record, re-cased
            earlier = records[i - 1] if i % 2 else records[rng.randrange(i - 1)]
            record["question"] = earlier["question"].upper()
            planted["exact"] += 1
        elif i % 13 == 6:  # for --rewrite (the teacher's true/false statements)
            record["qtype"] = "material"
        elif i % 5 == 0:
            record.update(
                qtype="mcq",
                question=record["question"][:-1] + " ( )?",
                answer="B",
                options=[f"option {k} of {i}" for k in "abcd"],
            )
        records.append(record)
    return records, planted


def write_planted(path: Path, n: int, seed: int = 11) -> dict[str, int]:
    records, planted = planted_records(n, seed)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return planted
