"""Seed questions for the interview (seed 004, section 4: a benchmark's questions with reference solutions).

Read through the data layer (:mod:`stores.inputs`): JSONL, JSON, CSV or TSV, one seed question per record.
Canonical fields (renamed with ``--fields question=Q,answer=A,...``): ``question`` (required, text),
``solution`` (reference solution), ``answer`` (reference final answer: text or a number such as ``42``),
``task`` (math | factual | instruction | generic), ``level``, ``id`` (text or a number). Two public shapes are
also read as they are: GSM8K records (``answer`` holding the worked solution and a final ``#### <number>``
line -> solution and answer, task math) and MT-Bench records (``turns`` -> instruction following, the first
turn as the seed question, ``question_id`` as the id). ``--hf-dataset NAME[:CONFIG]`` (``--hf-split``) reads a
Hugging Face dataset instead, with the same ``--fields`` (the ``[hub]`` extra). Without either the shipped sample
is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeGuard

from pydantic import BaseModel, ValidationError

from dyneval.samples import sample
from dyneval.state.interview import TASK_TYPES, SeedQuestion, TaskType
from dyneval.stores.inputs import FieldMap, Record, Scalar, Text, hf_records, input_error, read_records

SAMPLE = sample("interview", "seeds.jsonl")
CANONICAL = ("id", "question", "solution", "answer", "task", "level")


class RawSeed(BaseModel):
    """The canonical fields of one seed record, typed (see the module docstring)."""

    id: Scalar | None = None
    question: Text
    solution: Scalar = ""
    answer: Scalar = ""
    task: Scalar | None = None
    level: Scalar | None = None


def field_map(spec: str | None) -> FieldMap:
    """The ``--fields`` mapping of the interview's canonical names."""
    return FieldMap.parse(spec, CANONICAL)


def _is_task(name: str) -> TypeGuard[TaskType]:
    return name in TASK_TYPES


def to_seed(rec: Record, fields: FieldMap, task_override: str | None = None) -> SeedQuestion:
    """One record -> a :class:`SeedQuestion` (GSM8K and MT-Bench shapes recognised); errors name the record."""
    values = fields.values(rec)
    turns = rec.data.get("turns")
    if "question" not in values and "question" not in fields.given and isinstance(turns, list) and turns:
        values["question"] = turns[0]
        values.setdefault("task", "instruction")
    if "id" not in values and "id" not in fields.given and rec.data.get("question_id") not in (None, ""):
        values["id"] = rec.data["question_id"]
    raw = fields.validate(RawSeed, rec, values)
    solution, answer, task = raw.solution, raw.answer, raw.task
    if "####" in answer and not solution:
        worked, _, final = answer.rpartition("####")
        solution, answer = worked.strip(), final.strip()
        task = task or "math"
    task = task_override or task or "generic"
    if not _is_task(task):
        raise fields.error(rec, "task", f"unknown task {task!r}; use one of {', '.join(TASK_TYPES)}")
    if task == "math" and not answer.strip():
        raise fields.missing(rec, "answer", "a math seed question needs a reference answer")
    if task == "factual" and not (solution or answer).strip():
        raise fields.missing(rec, "solution", "a factual seed question needs a reference solution")
    try:
        return SeedQuestion(
            id=raw.id if raw.id is not None else f"q{rec.n:04d}" if isinstance(rec.n, int) else str(rec.n),
            question=raw.question,
            solution=solution,
            answer=answer,
            task=task,
            level=raw.level,
        )
    except ValidationError as exc:
        raise rec.error(exc.errors()[0]["msg"]) from None


def load_seeds(
    path: str | Path | None = None,
    task_override: str | None = None,
    fields: str | None = None,
    *,
    hf_dataset: str | None = None,
    hf_split: str = "test",
) -> list[SeedQuestion]:
    """Load and validate seed questions from ``path``, or the Hugging Face dataset ``hf_dataset`` (split
    ``hf_split``; both None = the shipped sample); bad input raises InputError."""
    if task_override and task_override not in TASK_TYPES:
        raise input_error(f"unknown task {task_override!r}; use one of {', '.join(TASK_TYPES)}", flag="--task")
    if path and hf_dataset:
        raise input_error("give --data or --hf-dataset, not both", flag="--hf-dataset")
    mapping = field_map(fields)
    records = hf_records(hf_dataset, hf_split) if hf_dataset else read_records(Path(path) if path else SAMPLE)
    seeds: list[SeedQuestion] = []
    seen: set[str] = set()
    for rec in records:
        seed = to_seed(rec, mapping, task_override)
        if not seed.question.strip():
            raise mapping.missing(rec, "question")
        if seed.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {seed.id!r}")
        seen.add(seed.id)
        seeds.append(seed)
    return seeds
