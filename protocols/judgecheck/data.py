"""Human-labelled items for a judge check, read through the data layer (:mod:`stores.inputs`).

JSONL, JSON, CSV or TSV, one item per record. Canonical fields (renamed with ``--fields label=Human,...``):
``question`` (required; a pairwise set's ``input`` is read as the question when there is no ``question``),
``label`` (required, on the judge's scale: :func:`state.judgecheck.normalize_label`), ``id``, ``category``,
and what the judge sees: ``response`` (pointwise), ``output_1`` and ``output_2`` (pairwise), ``reference``,
``solution``, ``explanation``, ``options``, ``qtype`` (llmeval), ``task`` (interview). So a pairwise set
``{input, output_1, output_2, label}`` (LLMBar) needs no mapping. A multi-turn pair (MT-Bench's human
judgements) gives ``conversation_1`` and ``conversation_2`` instead of the outputs: each a list of
``{role, content}`` turns (in CSV/TSV a JSON text), user and assistant alternating from the user, ending with an
assistant, the same user turns on both sides; the question is the first user turn unless given. Without
``--labels`` the shipped sample for the judge is used.

ATAD's judges see a generated problem instead: ``task`` (T1-T7), ``problem`` (an object with the task's Table 6
fields; in CSV/TSV a JSON text) and ``level`` (the tier of a difficulty-scaled problem; empty = a base problem).
The problem must pass ATAD's structure checks in code (:func:`nodes.atad.problems.structure_errors`): ATAD
rejects any other before the orchestrator sees it, so a verdict on it would describe no real decision. The
reviewer's label is read from the column named after ``--aspect`` (``validity`` ...) unless ``label`` is mapped.

An empty answer (``response``, ``output_1``, ``output_2``, a blank or null value) is an item like any other: the
judge sees an empty answer (in a pair the other output should win), as the published pairwise sets hold such
items; ``--skip-empty`` leaves such records out instead, counted. A column that is absent is an error.
``--label-vote COL1,COL2,...`` takes the label as the majority of several annotators' columns (each value on the
judge's scale or ``--label-map``); an item whose annotators tie (no value has the most votes) is left out and
counted as ``annotators tied``: a tie between people is no label.

Bad records (an empty question, a missing field the judge needs, a boolean or number where text is expected, a
label off the scale) stop the run with one message naming the file, record, field and what was found, unless
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
from dyneval.state.judgecheck import (
    PROBLEM_JUDGES,
    SPLIT,
    LabelledItem,
    Turn,
    majority,
    normalize_label,
    parse_label_map,
)
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
    "conversation_1",
    "conversation_2",
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


def _json(value: Any, kind: type, name: str, what: str) -> Any:
    """``value`` as a ``kind`` (``dict``, ``list``), or (CSV/TSV) the JSON text of one (a JSON ``name``);
    ``ValueError`` saying ``what`` it needs."""
    if isinstance(value, str):
        try:
            value = parse_bounded(json.loads, value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON {name}: {exc.msg}") from None
    if not isinstance(value, kind):
        raise ValueError(f"needs {what}, got {type(value).__name__}")
    return value


def _object(value: Any) -> Any:
    """An ATAD problem: an object, or (CSV/TSV) the JSON text of one."""
    return _json(value, dict, "object", "an object with the task's fields")


def _turns(value: Any) -> Any:
    """A conversation: a list of turns, or (CSV/TSV) the JSON text of one."""
    return _json(value, list, "list of turns", "a list of {role, content} turns")


Conversation = Annotated[list[Turn], BeforeValidator(_turns)]


def conversation_error(turns: list[Turn], other: list[Turn]) -> str | None:
    """Why a pair of conversations cannot be judged as one multi-turn item (None: it can)."""
    if not turns:
        return "empty (a multi-turn pair needs both conversations)"
    for k, turn in enumerate(turns):
        if turn.role != ("user", "assistant")[k % 2]:
            return f"turn {k + 1} is {turn.role}'s; turns alternate user, assistant, from the user"
    if turns[-1].role != "assistant":
        return "ends with a user turn; the last turn is the answer judged"
    if [t.content for t in turns if t.role == "user"] != [t.content for t in other if t.role == "user"]:
        return "its user turns differ from the other conversation's; both sides answer the same user turns"
    return None


class RawItem(BaseModel):
    """The canonical fields of one record, typed (see the module docstring)."""

    id: Scalar | None = None
    category: Scalar = ""
    question: Text = ""
    response: Text = ""
    output_1: Text = ""
    output_2: Text = ""
    conversation_1: Conversation = []
    conversation_2: Conversation = []
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


class Left(InputError):
    """A record left out by a rule the user chose (``--skip-empty``, ``--label-vote``'s annotator tie), counted
    by its ``reason``; never an error."""

    def __init__(self, error: InputError, reason: str, flag: str) -> None:
        super().__init__(error.message, file=error.file, record=error.record, field=error.field)
        self.reason, self.flag = reason, flag


#: Why a record was left out by ``--label-vote``: its annotators tied.
TIED = "annotators tied"


def voted_label(rec: Record, columns: tuple[str, ...], judge: str, label_map: dict[str, str] | None) -> str:
    """The majority of the annotators' ``columns`` (:func:`state.judgecheck.majority`), each normalized to the
    judge's scale; :class:`Left` when they tie, an error naming the column for a value off the scale."""
    votes: list[str | None] = []
    for column in columns:
        if column not in rec.data or rec.data[column] is None or str(rec.data[column]).strip() == "":
            raise rec.error("missing or empty (an annotator column of --label-vote)", field=column)
        try:
            votes.append(normalize_label(judge, rec.data[column], label_map))
        except ValueError as exc:
            raise rec.error(f"(--label-vote) {exc}", field=column) from None
    vote = majority(votes)
    if vote == SPLIT:
        raise Left(
            rec.error(f"the annotators tie ({', '.join(str(v) for v in votes)})", field=columns[0]),
            TIED,
            "--label-vote",
        )
    assert vote is not None  # every column gave a label
    return vote


def to_item(
    rec: Record,
    fields: FieldMap,
    judge: str,
    label_map: dict[str, str] | None = None,
    *,
    skip_empty: bool = False,
    label_vote: tuple[str, ...] = (),
) -> LabelledItem:
    """One record -> a :class:`LabelledItem` for ``judge``; errors name the file, record and field; records left
    out by ``skip_empty`` (an empty answer) or ``label_vote`` (tied annotators) raise :class:`Left`."""
    values = fields.values(rec)
    if "question" not in values and "question" not in fields.given and rec.data.get("input") not in (None, ""):
        values["question"] = rec.data["input"]
    voted = voted_label(rec, label_vote, judge, label_map) if label_vote else None
    if voted is not None:
        values["label"] = voted
    raw = fields.validate(RawItem, rec, values)
    if judge in PROBLEM_JUDGES:
        return LabelledItem(
            id=_item_id(raw, rec),
            category=raw.category,
            task=raw.task,
            level=raw.level,
            problem=_problem(rec, fields, raw),
            label=voted or _label(rec, fields, judge, raw.label, label_map),
        )
    turns = judge == "pairwise" and bool(raw.conversation_1 or raw.conversation_2)
    if turns:
        for name, mine, other in (
            ("conversation_1", raw.conversation_1, raw.conversation_2),
            ("conversation_2", raw.conversation_2, raw.conversation_1),
        ):
            if why := conversation_error(mine, other):
                raise fields.error(rec, name, why)
            if skip_empty and not all(t.content.strip() for t in mine if t.role == "assistant"):
                empty = fields.error(rec, name, "an assistant turn is empty (--skip-empty)")
                raise Left(empty, f"{fields.label(name)} empty", "--skip-empty")
        if not raw.question.strip():
            raw.question = raw.conversation_1[0].content
    if not raw.question.strip():
        raise fields.missing(rec, "question")
    for name in () if turns else ("output_1", "output_2") if judge == "pairwise" else ("response",):
        if not any(c in rec.data for c in fields.sources[name]):
            raise fields.missing(rec, name, f"the {judge} judge needs {name}")
        if skip_empty and not getattr(raw, name).strip():
            raise Left(fields.missing(rec, name, "--skip-empty"), f"{fields.label(name)} empty", "--skip-empty")
    label = voted or _label(rec, fields, judge, raw.label, label_map)
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
        conversation_1=raw.conversation_1,
        conversation_2=raw.conversation_2,
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
    """The valid items of a labels file and what was left out (by ``--skip-invalid``, ``--skip-empty`` or
    ``--label-vote``'s tie rule, the ``flags``): reason -> count, and the first records skipped (file, record,
    field, message) so a person can look at them."""

    items: list[LabelledItem]
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def leave_out(self, reason: str, flag: str, message: str) -> None:
        """Count one record left out (its first few messages kept as examples)."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.flags = sorted({*self.flags, flag})
        if len(self.examples) < SKIPPED_EXAMPLES:
            self.examples.append(message)

    def summary(self) -> dict[str, Any]:
        return {
            "read": len(self.items) + sum(self.skipped.values()),
            "kept": len(self.items),
            "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(self.skipped),
            "skipped_examples": self.examples,
            "skipped_by": self.flags,
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
    skip_empty: bool = False,
    label_vote: str | None = None,
) -> Labelled:
    """Validated labelled items for ``judge`` (``path`` None = the shipped sample); bad input: InputError naming
    file, record and field, or with ``skip_invalid`` the record left out and counted by :func:`reason`.
    ``aspect``: the reviewer's score compared with the labels (its column holds them unless label is mapped);
    ``label_map``: ``--label-map`` (:func:`state.judgecheck.parse_label_map`); ``skip_empty``, ``label_vote``:
    ``--skip-empty`` and ``--label-vote`` (the module docstring)."""
    mapping = FieldMap.parse(fields, CANONICAL)
    if judge == "atad.reviewer" and "label" not in mapping.given:
        mapping = FieldMap.parse(",".join(filter(None, [fields, f"label={aspect}"])), CANONICAL)
    labels = parse_label_map(label_map, judge)
    out = Labelled([])
    seen: set[str] = set()
    voters = split_columns(label_vote)
    for rec in read_records(Path(path) if path else sample_path(judge), flag="--labels"):
        try:
            item = to_item(rec, mapping, judge, labels, skip_empty=skip_empty, label_vote=voters)
        except Left as left:
            out.leave_out(left.reason, left.flag, str(left))
            continue
        except InputError as exc:
            if not skip_invalid:
                raise InputError(
                    f"{_bare(exc, rec)}; fix the record, or leave invalid records out with --skip-invalid [{rec.flag}]",
                    file=exc.file,
                    record=exc.record,
                    field=exc.field,
                ) from None
            out.leave_out(reason(rec, exc), "--skip-invalid", str(exc))
            continue
        if item.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        out.items.append(item)
    out.skipped = dict(Counter(out.skipped).most_common())
    if not out.items:
        raise InputError(
            f"no valid record: all {sum(out.skipped.values())} were skipped ("
            + ", ".join(f"{k}: {v}" for k, v in out.skipped.items())
            + ")",
            file=str(path or sample_path(judge)),
            field=out.flags[0],
        )
    return out


def split_columns(spec: str | None) -> tuple[str, ...]:
    """``--label-vote``'s ``COL1,COL2,COL3``: two or more distinct column names, else InputError naming the flag."""
    if spec is None:
        return ()
    columns = tuple(c.strip() for c in spec.split(","))
    if len(columns) < 2 or "" in columns or len(set(columns)) < len(columns):
        raise InputError(
            f"{spec!r}: name two or more distinct annotator columns, e.g. annotator1,annotator2,annotator3",
            field="--label-vote",
        )
    return columns


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
