"""Base datasets for JudgeAgent: JSONL / JSON / CSV files (or a Hugging Face ``datasets`` id) with
configurable field names, normalised into :class:`state.judgeagent.BaseQuestion` and split into batches
(Algorithm 1, ``SPLIT_BATCHES``).

Field mapping (``--fields``): ``question=Q,answer=A,options=OPTS,difficulty=D,references=R,id=ID``. A
canonical field may name several source fields joined with ``+`` (``references=para_a+para_b``,
``options=A+B+C+D``). ``--choices yes,no,maybe`` gives every question the same options (the gold answer is
then one of them). Multiple-choice gold answers may be a letter, a 0-based index or the option text; they
are stored as the letter.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from runtime.errors import InputError
from runtime.inputs import jsonl_objects
from state.judgeagent import DIFFICULTIES, BaseQuestion
from nodes.judgeagent.common import LETTERS
from nodes.judgeagent.judging import normalize

SAMPLE_DATA = Path(__file__).resolve().parents[2] / "samples" / "judgeagent" / "questions.jsonl"
CANONICAL = ("id", "question", "answer", "options", "difficulty", "references")
DIFFICULTY_ALIASES = {"1": "easy", "2": "medium", "3": "hard", "e": "easy", "m": "medium", "h": "hard"}


def parse_fields(spec: str | None) -> dict[str, list[str]]:
    """``"question=QUESTION,answer=final_decision"`` -> ``{"question": ["QUESTION"], ...}`` (defaults kept)."""
    mapping = {name: [name] for name in CANONICAL}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in CANONICAL or not value.strip():
            raise InputError(f"bad mapping {part!r}; use NAME=FIELD with NAME in {', '.join(CANONICAL)}",
                             field="--fields")
        mapping[key] = [v.strip() for v in value.split("+") if v.strip()]
    return mapping


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise InputError("dataset not found", file=str(path), field="--data")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as fh:
                return list(csv.DictReader(fh))
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            data = json.loads(text)
            if isinstance(data, dict):
                return [{"id": k, **v} if isinstance(v, dict) else {"id": k, "value": v} for k, v in data.items()]
            return list(data)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} (line {exc.lineno})", file=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=str(path)) from None
    return [rec for _, rec in jsonl_objects(path, iter(text.splitlines()))]


def hf_records(dataset_id: str, split: str) -> list[dict[str, Any]]:
    """Records of a Hugging Face dataset (needs the optional ``datasets`` package and network)."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise InputError("reading a Hugging Face dataset needs: pip install datasets", field="--hf-dataset") \
            from None
    name, _, config = dataset_id.partition(":")
    try:
        ds = datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the user's input to fix
        raise InputError(f"cannot load {dataset_id!r} split {split!r}: {exc}", field="--hf-dataset") from None
    return [dict(r) for r in ds]


def _get(rec: dict[str, Any], names: list[str]) -> list[Any]:
    return [rec[n] for n in names if n in rec and rec[n] not in (None, "")]


def _texts(values: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for v in values:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(_texts(v.values()))
        elif isinstance(v, (list, tuple)):
            if all(isinstance(x, str) for x in v):
                out.extend(v)
            else:
                out.extend(_texts(v))
        elif v is not None:
            out.append(str(v))
    return [t for t in out if t.strip()]


def _options(values: list[Any]) -> list[str] | None:
    if not values:
        return None
    if len(values) == 1:
        v = values[0]
        if isinstance(v, dict):
            return [str(x) for _, x in sorted(v.items())]
        if isinstance(v, str):
            parts = [p.strip() for p in v.split("|")]
            return parts if len(parts) > 1 else None
        return [str(x) for x in v]
    return [str(v) for v in values]


def _letter(answer: Any, options: list[str]) -> str | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int) or (isinstance(answer, str) and answer.strip().isdigit()):
        i = int(answer)
        return LETTERS[i] if 0 <= i < len(options) else None
    text = str(answer).strip()
    if len(text) == 1 and text.upper() in LETTERS[: len(options)]:
        return text.upper()
    hits = [LETTERS[i] for i, o in enumerate(options) if normalize(o) == normalize(text)]
    return hits[0] if len(hits) == 1 else None


def to_question(rec: dict[str, Any], n: int, mapping: dict[str, list[str]], *, file: str,
                choices: list[str] | None = None) -> BaseQuestion:
    def need(name: str) -> Any:
        got = _get(rec, mapping[name])
        if not got:
            raise InputError("missing or empty", file=file, record=n, field="+".join(mapping[name]))
        return got[0]

    question = need("question")
    answer = need("answer")
    options = choices or _options(_get(rec, mapping["options"]))
    if options:
        letter = _letter(answer, options)
        if letter is None:
            raise InputError(f"answer {str(answer)[:40]!r} is not an option letter, index or option text",
                             file=file, record=n, field="+".join(mapping["answer"]))
        answer = letter
    diff_raw = _get(rec, mapping["difficulty"])
    difficulty = None
    if diff_raw:
        d = str(diff_raw[0]).strip().lower()
        d = DIFFICULTY_ALIASES.get(d, d)
        if d not in DIFFICULTIES:
            raise InputError(f"difficulty {diff_raw[0]!r} is not one of easy, medium, hard (or 1-3)",
                             file=file, record=n, field="+".join(mapping["difficulty"]))
        difficulty = d
    ids = _get(rec, mapping["id"])
    try:
        return BaseQuestion(id=str(ids[0]) if ids else f"q{n}", question=str(question), answer=str(answer),
                            options=options, difficulty=difficulty,
                            references=_texts(_get(rec, mapping["references"])))
    except ValidationError as exc:
        raise InputError(exc.errors()[0]["msg"], file=file, record=n) from None


def load_questions(params: dict[str, Any]) -> tuple[list[BaseQuestion], str]:
    """The base questions named by the run parameters, and a label of their source."""
    mapping = parse_fields(params.get("fields"))
    choices = [c.strip() for c in str(params["choices"]).split(",") if c.strip()] if params.get("choices") else None
    if params.get("hf_dataset"):
        records = hf_records(params["hf_dataset"], params.get("hf_split") or "test")
        source = f"hf:{params['hf_dataset']}"
    else:
        path = Path(params.get("data") or SAMPLE_DATA)
        records = read_records(path)
        source = str(path)
    if not records:
        raise InputError("dataset holds no records", file=source, field="--data")
    questions = [to_question(r, n, mapping, file=source, choices=choices) for n, r in enumerate(records, 1)]
    seen: set[str] = set()
    for n, q in enumerate(questions, 1):
        if q.id in seen:
            raise InputError(f"duplicate id {q.id!r}", file=source, record=n, field="+".join(mapping["id"]))
        seen.add(q.id)
    return questions, source


def split_batches(questions: list[BaseQuestion], size: int) -> list[list[BaseQuestion]]:
    """SPLIT_BATCHES(D, N_B) of Algorithm 1: consecutive batches of ``size`` (the last may be smaller)."""
    if size < 1:
        raise InputError("batch size must be at least 1", field="--batch-size")
    return [questions[i:i + size] for i in range(0, len(questions), size)]
