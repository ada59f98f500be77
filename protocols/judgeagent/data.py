"""Base datasets for JudgeAgent, read through the data layer (:mod:`stores.inputs`: JSONL, JSON, CSV, TSV)
or from a Hugging Face ``datasets`` id, normalised into :class:`state.judgeagent.BaseQuestion` and split into
batches (Algorithm 1, ``SPLIT_BATCHES``).

Field mapping (``--fields``): ``question=Q,answer=A,options=OPTS,difficulty=D,references=R,id=ID``.
``options`` and ``references`` may join several columns with ``+`` (``references=para_a+para_b``,
``options=A+B+C+D``). Values: ``question`` is text; ``answer``, ``id`` and ``difficulty`` are text or a
number; ``options`` is a list, an object (its values in key order, e.g. ``{"A": .., "B": ..}``), a
``|``-separated string or several columns; ``references`` is text or a (nested) list of texts.
``--choices yes,no,maybe`` gives every question the same options. A multiple-choice gold answer may be a
letter, a 0-based index (a JSON integer is always an index) or the option text; it is stored as the letter,
and a text answer that reads differently as an index and as an option text is refused as ambiguous, unless
``--answer-form letter|index|text`` names the one way to read every answer (:func:`stores.choices.option_letters`,
shared with llmeval's bank import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeGuard

from pydantic import BaseModel, BeforeValidator
from pydantic_core import PydanticCustomError

from dyneval.samples import sample
from dyneval.state.errors import InputError
from dyneval.state.judgeagent import DIFFICULTIES, BaseQuestion, Difficulty
from dyneval.stores.choices import LETTERS, AnswerForm, option_letters
from dyneval.stores.inputs import (
    FieldMap,
    Record,
    Scalar,
    Text,
    Texts,
    hf_records,
    input_error,
    read_records,
    scalar_text,
)

SAMPLE_DATA = sample("judgeagent", "questions.jsonl")
CANONICAL = ("id", "question", "answer", "options", "difficulty", "references")
JOINABLE = ("options", "references")
DIFFICULTY_ALIASES = {"1": "easy", "2": "medium", "3": "hard", "e": "easy", "m": "medium", "h": "hard"}


def _options(value: Any) -> Any:
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value)]
    elif isinstance(value, str):
        value = [p.strip() for p in value.split("|")]
    elif not isinstance(value, list):
        value = [value]
    if len(value) < 2 or any(isinstance(v, (dict, list)) for v in value):
        raise PydanticCustomError(
            "options", "options must be a list (or object, or 'a|b|c' text) of at least two texts or numbers"
        )
    blank = [LETTERS[i] for i, v in enumerate(value) if v is None or (isinstance(v, str) and not v.strip())]
    if blank:
        raise PydanticCustomError("options", "option {letters} is empty", {"letters": ", ".join(blank)})
    return [scalar_text(v) for v in value]


class RawQuestion(BaseModel):
    """The canonical fields of one dataset record, typed (see the module docstring)."""

    id: Scalar | None = None
    question: Text
    answer: Scalar
    options: Annotated[list[str], BeforeValidator(_options)] | None = None
    difficulty: Scalar | None = None
    references: Texts = []


def field_map(spec: str | None) -> FieldMap:
    """The ``--fields`` mapping of JudgeAgent's canonical names."""
    return FieldMap.parse(spec, CANONICAL, joinable=JOINABLE)


def _is_difficulty(name: str) -> TypeGuard[Difficulty]:
    return name in DIFFICULTIES


def to_question(
    rec: Record, fields: FieldMap, *, choices: list[str] | None = None, form: AnswerForm = "any"
) -> BaseQuestion:
    """One record -> a :class:`BaseQuestion` (a multiple-choice answer read as ``form``, ``--answer-form``, says);
    any problem raises :class:`InputError` naming the record."""
    raw = fields.validate(RawQuestion, rec)
    options = choices or raw.options
    answer = raw.answer
    if options:
        try:
            [answer] = option_letters(fields.values(rec)["answer"], options, form=form)
        except ValueError as exc:
            raise fields.error(rec, "answer", str(exc)) from None
    difficulty: Difficulty | None = None
    if raw.difficulty is not None:
        d = DIFFICULTY_ALIASES.get(raw.difficulty.strip().lower(), raw.difficulty.strip().lower())
        if not _is_difficulty(d):
            raise fields.error(
                rec, "difficulty", f"difficulty {raw.difficulty!r} is not one of easy, medium, hard (or 1-3)"
            )
        difficulty = d
    return BaseQuestion(
        id=raw.id if raw.id is not None else f"q{rec.n}",
        question=raw.question,
        answer=answer,
        options=options,
        difficulty=difficulty,
        references=[t for t in raw.references if t.strip()],
    )


def load_questions(params: dict[str, Any]) -> tuple[list[BaseQuestion], str]:
    """The base questions named by the run parameters, and a label of their source.

    Without ``--data`` or ``--hf-dataset`` the shipped sample is read (see :func:`uses_sample`).
    """
    fields = field_map(params.get("fields"))
    choices = [c.strip() for c in str(params["choices"]).split(",") if c.strip()] if params.get("choices") else None
    if choices is not None and len(choices) < 2:
        raise input_error("give at least two comma-separated choices", flag="--choices")
    if params.get("hf_dataset"):
        records = hf_records(params["hf_dataset"], params.get("hf_split") or "test")
        source = f"hf:{params['hf_dataset']}"
    else:
        path = Path(params.get("data") or SAMPLE_DATA)
        records = read_records(path, flag="--data")
        source = str(path)
    form: AnswerForm = params.get("answer_form") or "any"
    questions = [to_question(r, fields, choices=choices, form=form) for r in records]
    seen: set[str] = set()
    for rec, q in zip(records, questions):
        if q.id in seen:
            raise fields.error(rec, "id", f"duplicate id {q.id!r}")
        seen.add(q.id)
    return questions, source


def uses_sample(params: dict[str, Any]) -> bool:
    """True when no dataset was given, so the shipped sample questions are used."""
    return not (params.get("data") or params.get("hf_dataset"))


def split_batches(questions: list[BaseQuestion], size: int) -> list[list[BaseQuestion]]:
    """SPLIT_BATCHES(D, N_B) of Algorithm 1: consecutive batches of ``size`` (the last may be smaller)."""
    if size < 1:
        raise InputError("batch size must be at least 1", field="--batch-size")
    return [questions[i : i + size] for i in range(0, len(questions), size)]
