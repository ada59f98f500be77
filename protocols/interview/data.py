"""Seed questions for the interview (seed 004, section 4: a benchmark's questions with reference solutions).

Accepted input: JSONL or CSV, one seed question per record, fields ``question``
(required), ``solution``, ``answer``, ``task`` (math | factual | instruction |
generic), ``level``, ``id``. Also read as-is: GSM8K records (``answer`` holding the
worked solution and a final ``#### <number>`` line -> math) and MT-Bench records
(``turns`` -> instruction following, first turn as the seed question).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.errors import InputError
from runtime.inputs import jsonl_objects
from state.interview import TASK_TYPES, SeedQuestion

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "interview" / "seeds.jsonl"


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputError("file not found", file=str(path), field="--data")
    if path.suffix.lower() == ".csv":
        with path.open(encoding="utf-8", newline="") as fh:
            return [dict(row) for row in csv.DictReader(fh)]
    return [value for _, value in jsonl_objects(path)]


def normalize(raw: dict[str, Any], index: int, task_override: str | None = None) -> dict[str, Any]:
    """One raw record -> SeedQuestion fields (GSM8K and MT-Bench shapes recognised)."""
    rec = {k: v for k, v in raw.items() if v not in (None, "")}
    if "question" not in rec and isinstance(rec.get("turns"), list) and rec["turns"]:
        rec["question"] = rec["turns"][0]
        rec.setdefault("task", "instruction")
        rec.setdefault("id", rec.get("question_id"))
    answer = str(rec.get("answer", ""))
    if "####" in answer and "solution" not in rec:
        solution, _, final = answer.rpartition("####")
        rec["solution"], rec["answer"] = solution.strip(), final.strip()
        rec.setdefault("task", "math")
    if task_override:
        rec["task"] = task_override
    rec["id"] = str(rec.get("id") or rec.get("question_id") or f"q{index:04d}")
    keep = {"id", "question", "solution", "answer", "task", "level"}
    out = {k: rec[k] for k in keep if k in rec}
    for key in ("question", "solution", "answer", "level"):
        if key in out and not isinstance(out[key], str):
            out[key] = str(out[key])
    return out


def load_seeds(path: str | Path | None = None, task_override: str | None = None) -> list[SeedQuestion]:
    """Load and validate seed questions; bad records raise :class:`InputError` naming file, record and field."""
    path = Path(path) if path else SAMPLE
    if task_override and task_override not in TASK_TYPES:
        raise InputError(f"unknown task {task_override!r}; use one of {', '.join(TASK_TYPES)}", field="--task")
    seeds: list[SeedQuestion] = []
    seen: set[str] = set()
    for n, raw in enumerate(_records(path), 1):
        rec = normalize(raw, n, task_override)
        if not str(rec.get("question", "")).strip():
            raise InputError("missing or empty question", file=str(path), record=n, field="question")
        if rec.get("task", "generic") not in TASK_TYPES:
            raise InputError(f"unknown task {rec.get('task')!r}; use one of {', '.join(TASK_TYPES)}",
                             file=str(path), record=n, field="task")
        try:
            seed = SeedQuestion(**rec)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(err["msg"], file=str(path), record=n, field=".".join(map(str, err["loc"]))) from None
        if seed.task == "math" and not seed.answer.strip():
            raise InputError("a math seed question needs a reference answer", file=str(path), record=n,
                             field="answer")
        if seed.task == "factual" and not (seed.solution or seed.answer).strip():
            raise InputError("a factual seed question needs a reference solution", file=str(path), record=n,
                             field="solution")
        if seed.id in seen:
            raise InputError(f"duplicate id {seed.id!r}", file=str(path), record=n, field="id")
        seen.add(seed.id)
        seeds.append(seed)
    if not seeds:
        raise InputError("no seed questions", file=str(path))
    return seeds
