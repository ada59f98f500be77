"""Human-labelled items for a judge check, read through the data layer (:mod:`stores.inputs`).

JSONL, JSON, CSV or TSV, one item per record. Canonical fields (renamed with ``--fields label=Human,...``):
``question`` (required; a pairwise set's ``input`` is read as the question when there is no ``question``),
``label`` (required, on the judge's scale: :func:`state.judgecheck.normalize_label`), ``id``, ``category``,
and what the judge sees: ``response`` (pointwise), ``output_1`` and ``output_2`` (pairwise), ``reference``,
``solution``, ``explanation``, ``options``, ``qtype`` (llmeval), ``task`` (interview). So a pairwise set
``{input, output_1, output_2, label}`` (LLMBar, MT-Bench human judgements) needs no mapping. Without
``--labels`` the shipped sample for the judge is used.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from state.interview import TASK_TYPES
from state.judgecheck import LabelledItem, normalize_label
from stores.inputs import FieldMap, Record, Scalar, Text, Texts, read_records
from stores.question_bank import QTYPES

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "judgecheck"
#: The shipped hand-written sample for each judge.
SAMPLE_OF = {"llmeval.judge": "stars.jsonl", "interview.grader": "correctness.jsonl",
             "judgeagent.judge": "correctness.jsonl", "pairwise": "pairwise.jsonl"}
CANONICAL = ("id", "category", "question", "response", "output_1", "output_2", "reference", "solution",
             "explanation", "options", "qtype", "task", "label")


class RawItem(BaseModel):
    """The canonical fields of one record, typed (see the module docstring)."""

    id: Scalar | None = None
    category: Scalar = ""
    question: Text
    response: Text = ""
    output_1: Text = ""
    output_2: Text = ""
    reference: Scalar = ""
    solution: Text = ""
    explanation: Text = ""
    options: Texts = []
    qtype: Text = ""
    task: Text = "generic"
    label: Scalar


def sample_path(judge: str) -> Path:
    return SAMPLES / SAMPLE_OF[judge]


def to_item(rec: Record, fields: FieldMap, judge: str) -> LabelledItem:
    """One record -> a :class:`LabelledItem` for ``judge``; errors name the file, record and field."""
    values = fields.values(rec)
    if "question" not in values and "question" not in fields.given and rec.data.get("input") not in (None, ""):
        values["question"] = rec.data["input"]
    raw = fields.validate(RawItem, rec, values)
    needed = ("output_1", "output_2") if judge == "pairwise" else ("response",)
    for name in needed:
        if not getattr(raw, name).strip():
            raise fields.missing(rec, name, f"the {judge} judge needs {name}")
    try:
        label = normalize_label(judge, raw.label)
    except ValueError as exc:
        raise fields.error(rec, "label", str(exc)) from None
    if judge == "interview.grader" and raw.task not in TASK_TYPES:
        raise fields.error(rec, "task", f"unknown task {raw.task!r}; use one of {', '.join(TASK_TYPES)}")
    if judge == "llmeval.judge" and raw.qtype and raw.qtype not in QTYPES:
        raise fields.error(rec, "qtype", f"unknown question type {raw.qtype!r} (one of {', '.join(QTYPES)})")
    item_id = raw.id if raw.id is not None else (f"item{rec.n:04d}" if isinstance(rec.n, int) else str(rec.n))
    return LabelledItem(id=item_id, category=raw.category, question=raw.question, response=raw.response,
                        output_1=raw.output_1, output_2=raw.output_2, reference=raw.reference,
                        solution=raw.solution, explanation=raw.explanation, options=raw.options, qtype=raw.qtype,
                        task=raw.task, label=label)


def load_items(path: str | Path | None, judge: str, fields: str | None = None) -> list[LabelledItem]:
    """Validated labelled items for ``judge`` (``path`` None = the shipped sample); bad input: InputError."""
    mapping = FieldMap.parse(fields, CANONICAL)
    items: list[LabelledItem] = []
    seen: set[str] = set()
    for rec in read_records(Path(path) if path else sample_path(judge), flag="--labels"):
        item = to_item(rec, mapping, judge)
        if item.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    return items
