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

Bad records (an empty or missing field the judge needs, a boolean or number where text is expected, a label off
the scale) stop the run with one message naming the file, record, field and what was found, unless
``--skip-invalid`` is given: then they are left out and counted per reason (:class:`Labelled`), and the summary
and report say so. Label values are mapped to the judge's scale with ``--label-map`` (PandaLM's test set marks a
tie ``0``: ``--label-map 0=tie,1=1,2=2``); a boolean or number output is never turned into text.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from dyneval.nodes.atad.problems import normalize, structure_errors
from dyneval.samples import sample
from dyneval.state.atad import PROBLEM_SCHEMAS, TASK_IDS
from dyneval.state.errors import InputError
from dyneval.state.interview import TASK_TYPES
from dyneval.state.judgecheck import PROBLEM_JUDGES, LabelledItem, normalize_label, parse_label_map
from dyneval.state.llmeval import QTYPES
from dyneval.stores.inputs import FieldMap, Record, Scalar, Text, Texts, parse_bounded, read_records

SAMPLES = sample("judgecheck")
#: The shipped hand-written sample for each judge.
SAMPLE_OF = {
    "llmeval.judge": "stars.jsonl",
    "interview.grader": "correctness.jsonl",
    "judgeagent.judge": "correctness.jsonl",
    "atad.orchestrator": "problems.jsonl",
    "atad.reviewer": "problems.jsonl",
    "pairwise": "pairwise.jsonl",
}
CANONICAL = (
    "id",
    "category",
    "question",
    "response",
    "output_1",
    "output_2",
    "reference",
    "solution",
    "explanation",
    "options",
    "qtype",
    "task",
    "problem",
    "level",
    "label",
)


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


def to_item(rec: Record, fields: FieldMap, judge: str, label_map: dict[str, str] | None = None) -> LabelledItem:
    """One record -> a :class:`LabelledItem` for ``judge``; errors name the file, record and field."""
    values = fields.values(rec)
    if "question" not in values and "question" not in fields.given and rec.data.get("input") not in (None, ""):
        values["question"] = rec.data["input"]
    raw = fields.validate(RawItem, rec, values)
    if judge in PROBLEM_JUDGES:
        return LabelledItem(
            id=_item_id(raw, rec),
            category=raw.category,
            task=raw.task,
            level=raw.level,
            problem=_problem(rec, fields, raw),
            label=_label(rec, fields, judge, raw.label, label_map),
        )
    if not raw.question.strip():
        raise fields.missing(rec, "question")
    needed = ("output_1", "output_2") if judge == "pairwise" else ("response",)
    for name in needed:
        if not getattr(raw, name).strip():
            raise fields.missing(rec, name, f"the {judge} judge needs {name}")
    label = _label(rec, fields, judge, raw.label, label_map)
    if judge == "interview.grader" and raw.task not in TASK_TYPES:
        raise fields.error(rec, "task", f"unknown task {raw.task!r}; use one of {', '.join(TASK_TYPES)}")
    if judge == "llmeval.judge" and raw.qtype and raw.qtype not in QTYPES:
        raise fields.error(rec, "qtype", f"unknown question type {raw.qtype!r} (one of {', '.join(QTYPES)})")
    return LabelledItem(
        id=_item_id(raw, rec),
        category=raw.category,
        question=raw.question,
        response=raw.response,
        output_1=raw.output_1,
        output_2=raw.output_2,
        reference=raw.reference,
        solution=raw.solution,
        explanation=raw.explanation,
        options=raw.options,
        qtype=raw.qtype,
        task=raw.task,
        label=label,
    )


def _item_id(raw: RawItem, rec: Record) -> str:
    return raw.id if raw.id is not None else (f"item{rec.n:04d}" if isinstance(rec.n, int) else str(rec.n))


def _label(rec: Record, fields: FieldMap, judge: str, value: str, label_map: dict[str, str] | None) -> str:
    try:
        return normalize_label(judge, value, label_map)
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


@dataclass
class Labelled:
    """The valid items of a labels file and what ``--skip-invalid`` left out: reason -> count, and the first
    records skipped (file, record, field, message) so a person can look at them."""

    items: list[LabelledItem]
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "read": len(self.items) + sum(self.skipped.values()),
            "kept": len(self.items),
            "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(self.skipped),
            "skipped_examples": self.examples,
        }


#: How many skipped records are quoted in the summary and the report (the counts cover them all).
SKIPPED_EXAMPLES = 5


def load_labelled(
    path: str | Path | None,
    judge: str,
    fields: str | None = None,
    *,
    aspect: str = "validity",
    label_map: str | None = None,
    skip_invalid: bool = False,
) -> Labelled:
    """Validated labelled items for ``judge`` (``path`` None = the shipped sample); bad input: InputError naming
    file, record and field, or with ``skip_invalid`` the record left out and counted by :func:`reason`.
    ``aspect``: the reviewer's score compared with the labels (its column holds them unless label is mapped);
    ``label_map``: ``--label-map`` (:func:`state.judgecheck.parse_label_map`)."""
    mapping = FieldMap.parse(fields, CANONICAL)
    if judge == "atad.reviewer" and "label" not in mapping.given:
        mapping = FieldMap.parse(",".join(filter(None, [fields, f"label={aspect}"])), CANONICAL)
    labels = parse_label_map(label_map, judge)
    out = Labelled([])
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for rec in read_records(Path(path) if path else sample_path(judge), flag="--labels"):
        try:
            item = to_item(rec, mapping, judge, labels)
        except InputError as exc:
            if not skip_invalid:
                raise InputError(
                    f"{_bare(exc, rec)}; fix the record, or leave invalid records out with --skip-invalid [{rec.flag}]",
                    file=exc.file,
                    record=exc.record,
                    field=exc.field,
                ) from None
            skipped[reason(rec, exc)] += 1
            if len(out.examples) < SKIPPED_EXAMPLES:
                out.examples.append(str(exc))
            continue
        if item.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        out.items.append(item)
    out.skipped = dict(skipped.most_common())
    if not out.items:
        raise InputError(
            f"no valid record: all {sum(skipped.values())} were skipped ("
            + ", ".join(f"{k}: {v}" for k, v in out.skipped.items())
            + ")",
            file=str(path or sample_path(judge)),
            field="--skip-invalid",
        )
    return out


def load_items(
    path: str | Path | None, judge: str, fields: str | None = None, *, aspect: str = "validity"
) -> list[LabelledItem]:
    """The items of :func:`load_labelled` without skipping (every bad record is an error)."""
    return load_labelled(path, judge, fields, aspect=aspect).items


def reason(rec: Record, exc: InputError) -> str:
    """Why a record was skipped, short enough to count by: ``<field> empty``, ``<field> missing``, ``<field>: a
    boolean`` (what was found where text was expected), or ``<field>: <message>`` for any other refusal."""
    column = exc.field
    if column is None:
        return _bare(exc, rec)
    if column not in rec.data:
        return f"{column} missing"
    value = rec.data[column]
    if value is None or (isinstance(value, str) and not value.strip()):
        return f"{column} empty"
    message = _bare(exc, rec)
    if not isinstance(value, str) and "expected text" in message:
        kind = (
            "a boolean"
            if isinstance(value, bool)
            else "a number"
            if isinstance(value, (int, float))
            else "an object"
            if isinstance(value, dict)
            else "a list"
        )
        return f"{column}: {kind}, expected text"
    return f"{column}: {message.split(';')[0]}"


def _bare(exc: InputError, rec: Record) -> str:
    """The message of a record's error without the flag the data layer appends."""
    return exc.message.removesuffix(f" [{rec.flag}]")
