"""Human-labelled items for a judge check, read through the data layer (:mod:`stores.inputs`).

JSONL, JSON, CSV or TSV, one item per record. Canonical fields (renamed with ``--fields label=Human,...``):
``question`` (required; a pairwise set's ``input`` is read as the question when there is no ``question``),
``label`` (required, on the judge's scale: :func:`state.judgecheck.normalize_label`), ``id``, ``category``,
and what the judge sees: ``response`` (pointwise), ``output_1`` and ``output_2`` (pairwise), ``reference``,
``solution``, ``explanation``, ``options``, ``qtype`` (llmeval), ``task`` (interview). So a pairwise set
``{input, output_1, output_2, label}`` (LLMBar, MT-Bench human judgements) needs no mapping. Without
``--labels`` the shipped sample for the judge is used.

ATAD's judges see a generated problem instead: ``task`` (T1-T7), ``problem`` (an object with the task's Table 6
fields; in CSV/TSV a JSON text) and ``level`` (the tier of a difficulty-scaled problem; empty = a base problem).
The problem must pass ATAD's structure checks in code (:func:`nodes.atad.problems.structure_errors`): ATAD
rejects any other before the orchestrator sees it, so a verdict on it would describe no real decision. The
reviewer's label is read from the column named after ``--aspect`` (``validity`` ...) unless ``label`` is mapped.
"""

from __future__ import annotations

from pathlib import Path

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from dyneval.nodes.atad.problems import normalize, structure_errors
from dyneval.state.atad import PROBLEM_SCHEMAS, TASK_IDS
from dyneval.state.interview import TASK_TYPES
from dyneval.state.judgecheck import PROBLEM_JUDGES, LabelledItem, normalize_label
from dyneval.state.llmeval import QTYPES
from dyneval.stores.inputs import FieldMap, Record, Scalar, Text, Texts, parse_bounded, read_records
from dyneval.samples import sample

SAMPLES = sample("judgecheck")
#: The shipped hand-written sample for each judge.
SAMPLE_OF = {"llmeval.judge": "stars.jsonl", "interview.grader": "correctness.jsonl",
             "judgeagent.judge": "correctness.jsonl", "atad.orchestrator": "problems.jsonl",
             "atad.reviewer": "problems.jsonl", "pairwise": "pairwise.jsonl"}
CANONICAL = ("id", "category", "question", "response", "output_1", "output_2", "reference", "solution",
             "explanation", "options", "qtype", "task", "problem", "level", "label")


def _object(value: Any) -> Any:
    """An ATAD problem: an object, or (CSV/TSV) the JSON text of one."""
    if isinstance(value, str):
        try:
            value = parse_bounded(json.loads, value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError(f"needs an object with the task's fields, got {type(value).__name__}")
    return value


class RawItem(BaseModel):
    """The canonical fields of one record, typed (see the module docstring)."""

    id: Scalar | None = None
    category: Scalar = ""
    question: Text = ""
    response: Text = ""
    output_1: Text = ""
    output_2: Text = ""
    reference: Scalar = ""
    solution: Text = ""
    explanation: Text = ""
    options: Texts = []
    qtype: Text = ""
    task: Text = "generic"
    problem: Annotated[dict[str, Any], BeforeValidator(_object)] = {}
    level: Scalar = ""
    label: Scalar


def sample_path(judge: str) -> Path:
    return SAMPLES / SAMPLE_OF[judge]


def to_item(rec: Record, fields: FieldMap, judge: str) -> LabelledItem:
    """One record -> a :class:`LabelledItem` for ``judge``; errors name the file, record and field."""
    values = fields.values(rec)
    if "question" not in values and "question" not in fields.given and rec.data.get("input") not in (None, ""):
        values["question"] = rec.data["input"]
    raw = fields.validate(RawItem, rec, values)
    if judge in PROBLEM_JUDGES:
        return LabelledItem(id=_item_id(raw, rec), category=raw.category, task=raw.task, level=raw.level,
                            problem=_problem(rec, fields, raw), label=_label(rec, fields, judge, raw.label))
    if not raw.question.strip():
        raise fields.missing(rec, "question")
    needed = ("output_1", "output_2") if judge == "pairwise" else ("response",)
    for name in needed:
        if not getattr(raw, name).strip():
            raise fields.missing(rec, name, f"the {judge} judge needs {name}")
    label = _label(rec, fields, judge, raw.label)
    if judge == "interview.grader" and raw.task not in TASK_TYPES:
        raise fields.error(rec, "task", f"unknown task {raw.task!r}; use one of {', '.join(TASK_TYPES)}")
    if judge == "llmeval.judge" and raw.qtype and raw.qtype not in QTYPES:
        raise fields.error(rec, "qtype", f"unknown question type {raw.qtype!r} (one of {', '.join(QTYPES)})")
    return LabelledItem(id=_item_id(raw, rec), category=raw.category, question=raw.question, response=raw.response,
                        output_1=raw.output_1, output_2=raw.output_2, reference=raw.reference,
                        solution=raw.solution, explanation=raw.explanation, options=raw.options, qtype=raw.qtype,
                        task=raw.task, label=label)


def _item_id(raw: RawItem, rec: Record) -> str:
    return raw.id if raw.id is not None else (f"item{rec.n:04d}" if isinstance(rec.n, int) else str(rec.n))


def _label(rec: Record, fields: FieldMap, judge: str, value: str) -> str:
    try:
        return normalize_label(judge, value)
    except ValueError as exc:
        raise fields.error(rec, "label", str(exc)) from None


def _problem(rec: Record, fields: FieldMap, raw: RawItem) -> dict[str, Any]:
    """The problem of an ATAD item, typed by its task's schema and well-formed by ATAD's code checks."""
    if raw.task not in TASK_IDS:
        raise fields.error(rec, "task", f"unknown ATAD task {raw.task!r}; use one of {', '.join(TASK_IDS)}")
    if not raw.problem:
        raise fields.missing(rec, "problem", "ATAD's judges need the problem")
    try:
        problem = normalize(raw.task, PROBLEM_SCHEMAS[raw.task].model_validate(raw.problem).model_dump())
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise fields.error(rec, "problem", f"{where}: {err['msg']} (task {raw.task})") from None
    if errors := structure_errors(raw.task, problem):
        raise fields.error(rec, "problem", f"ATAD rejects it in code before the orchestrator sees it: {errors[0]}")
    return problem


def load_items(path: str | Path | None, judge: str, fields: str | None = None, *,
               aspect: str = "validity") -> list[LabelledItem]:
    """Validated labelled items for ``judge`` (``path`` None = the shipped sample); bad input: InputError.
    ``aspect``: the reviewer's score compared with the labels (its column holds them unless label is mapped)."""
    mapping = FieldMap.parse(fields, CANONICAL)
    if judge == "atad.reviewer" and "label" not in mapping.given:
        mapping = FieldMap.parse(",".join(filter(None, [fields, f"label={aspect}"])), CANONICAL)
    items: list[LabelledItem] = []
    seen: set[str] = set()
    for rec in read_records(Path(path) if path else sample_path(judge), flag="--labels"):
        item = to_item(rec, mapping, judge)
        if item.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    return items
