"""llmeval at LLMEval-3's scale (issue 14): import rate of a 220k-question bank and session sampling time.

    python -m bench.bank_scale [--questions 220000] [--real-embedding] [--sessions 7]

LLMEval-3 (seed 002, section 2.1) holds over 220k questions and samples 1000 unseen ones per session (2.2).
The bank here is synthetic, generated below: random questions in 13 disciplines and four types, with a known
number of planted exact duplicates (an earlier question re-cased and re-punctuated: the same normalised hash)
and near duplicates (an earlier question with one word added: a different hash, cosine ~0.98 with the hashed
bag of words), some of them inside one import batch and some far apart. The figures: import rate (questions
read per second, validation, duplicate checks, embedding and both stores included), duplicates found vs
planted, and the milliseconds to sample a 1000-question session (median over ``--sessions`` sessions of one
model, each excluding the questions of the earlier ones; smaller sessions when the bank cannot hold that
many). Embedding: the fake hashed bag of words (``tests/fake_embedding.py``) by default, so the figure measures
our code; ``--real-embedding`` uses the offline all-MiniLM-L6-v2, loaded before the clock starts (only
sensible for a few thousand questions on this CPU).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DISCIPLINES = (
    "Engineering",
    "Economics",
    "Education",
    "Law",
    "Literature",
    "Management",
    "Science",
    "History",
    "Medicine",
    "Military",
    "Agriculture",
    "Philosophy",
    "Art",
)
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "to",
    "vi",
    "be",
    "do",
    "fu",
    "ga",
    "hi",
    "jo",
    "pe",
    "qua",
    "ri",
    "so",
    "tu",
    "ze",
    "an",
    "el",
    "or",
    "um",
    "is",
)
#: Words a near duplicate adds to its original (a different one each time, so two near duplicates of one
#: original are not exact duplicates of each other).
ADDED_WORDS = ("concisely", "briefly", "clearly", "precisely", "exactly", "fully", "carefully", "plainly")


def _words(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct pseudo-words of 2-4 syllables."""
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def synthetic_bank(
    n: int, *, seed: int = 0, exact: float = 0.02, near: float = 0.03
) -> tuple[list[dict[str, Any]], int, int]:
    """``n`` question records (native layout) and the numbers of exact and near duplicates planted among them.

    A duplicate repeats a random earlier original: half the time one of the 50 just before it (often in the same
    import batch), else any earlier one. Originals are ~20 random pseudo-words, so two of them are never close.
    """
    rng = random.Random(seed)
    vocabulary = _words(rng, 5000)
    records: list[dict[str, Any]] = []
    originals: list[int] = []
    planted = {"exact": 0, "near": 0}
    nears: dict[int, int] = {}  # original -> near duplicates planted of it
    for i in range(n):
        draw = rng.random()
        if originals and draw < exact + near:
            pick = originals[-rng.randint(1, min(50, len(originals)))] if rng.random() < 0.5 else rng.choice(originals)
            src = records[pick]
            used = nears.get(pick, 0)
            if draw < exact or used == len(ADDED_WORDS):
                text = src["question"].upper().replace("?", " ?!")
                planted["exact"] += 1
            else:
                text = src["question"].rstrip("?") + f" {ADDED_WORDS[used]}?"
                nears[pick] = used + 1
                planted["near"] += 1
            records.append({**src, "uuid": f"syn-{i:07d}", "question": text})
            continue
        originals.append(i)
        body = " ".join(rng.sample(vocabulary, 20))
        kind = rng.random()
        record: dict[str, Any] = {
            "uuid": f"syn-{i:07d}",
            "discipline": DISCIPLINES[i % len(DISCIPLINES)],
            "sub_discipline": f"area {i % 53}",
        }
        if kind < 0.25:
            options = rng.sample(vocabulary, 4)
            record.update(qtype="mcq", question=f"Which fits {body} ( )?", options=options, answer="ABCD"[i % 4])
        elif kind < 0.5:
            record.update(qtype="true_false", question=f"True or false: {body}?", answer=rng.choice(["true", "false"]))
        elif kind < 0.75:
            record.update(qtype="fill_blank", question=f"Complete: {body} ____?", answer=rng.choice(vocabulary))
        else:
            record.update(qtype="short_answer", question=f"Explain {body}?", answer=" ".join(rng.sample(vocabulary, 5)))
        records.append(record)
    return records, planted["exact"], planted["near"]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


TITLE = "llmeval question bank at LLMEval-3's scale (synthetic)"
HEADERS = [
    "embedding",
    "questions",
    "imported",
    "validate s",
    "import s",
    "questions/s",
    "exact found/planted",
    "near found/planted",
    "session size",
    "session ms (median)",
    "stratified ms (median)",
]


def _session_ms(bank: Any, model: str, count: int, size: int, stratified: bool) -> tuple[float, list[list[str]]]:
    """Median milliseconds of ``count`` sessions of ``size`` questions of one model, and their questions."""
    times, sessions = [], []
    for k in range(count):
        started = time.perf_counter()
        bank.create_session(f"{model}-{k}", model=model, n=size, seed=f"bench:{k}", stratified=stratified)
        times.append((time.perf_counter() - started) * 1000)
        sessions.append(bank.question_ids(f"{model}-{k}"))
    return statistics.median(times), sessions


def part_bank(questions: int = 220_000, *, real_embedding: bool = False, sessions: int = 7) -> list[list[Any]]:
    """Generate, import and sample one synthetic bank; one table row (see the module docstring)."""
    from dyneval.nodes.llmeval.bankio import NearDuplicateIndex, import_file, index_name, load_file
    from dyneval.stores.question_bank import QuestionBank
    from dyneval.stores.vectors import chroma_client, embedding_function
    from tests.fake_embedding import HashEmbedding

    records, exact, near = synthetic_bank(questions)
    embed = embedding_function() if real_embedding else HashEmbedding()
    if real_embedding:
        embed(["load the model before the clock starts"])
    with tempfile.TemporaryDirectory() as tmp:
        path = write_jsonl(Path(tmp) / "bank.jsonl", records)
        bank = QuestionBank(Path(tmp) / "bank.sqlite")
        index = NearDuplicateIndex(chroma_client(Path(tmp) / "chroma"), embed, index_name(bank))
        started = time.perf_counter()
        loaded = load_file(path)
        validated = time.perf_counter()
        report = import_file(bank, loaded, index=index, threshold=0.95)
        imported = time.perf_counter()
        size = min(1000, bank.count() // sessions)  # 1000 (section 2.2) unless the bank is too small to hold them
        plain, drawn = _session_ms(bank, "bench-plain", sessions, size, False)
        strat, drawn_strat = _session_ms(bank, "bench-stratified", sessions, size, True)
        for group in (drawn, drawn_strat):  # the paper's rule: distinct questions, none met twice by a model
            met = [q for s in group for q in s]
            assert all(len(s) == size for s in group) and len(set(met)) == len(met)
        bank.close()
    found = {kind: sum(d.kind == kind for d in report.duplicates) for kind in ("exact", "near")}
    return [
        [
            "all-MiniLM-L6-v2" if real_embedding else "fake (hashed words)",
            report.read,
            report.imported,
            f"{validated - started:.1f}",
            f"{imported - validated:.1f}",
            f"{report.read / (imported - started):.0f}",
            f"{found['exact']}/{exact}",
            f"{found['near']}/{near}",
            size,
            f"{plain:.1f}",
            f"{strat:.1f}",
        ]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=220_000, help="questions in the synthetic bank")
    parser.add_argument("--real-embedding", action="store_true", help="embed with the offline all-MiniLM-L6-v2")
    parser.add_argument("--sessions", type=int, default=7, help="sessions timed per sampling mode")
    args = parser.parse_args()
    from bench.tables import table

    table(TITLE, HEADERS, part_bank(args.questions, real_embedding=args.real_embedding, sessions=args.sessions))


if __name__ == "__main__":
    main()
