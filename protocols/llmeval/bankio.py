"""Import, validation, near-duplicate detection and export of the llmeval question bank.

Accepted inputs (JSONL, JSON array or CSV):

* the native layout: ``discipline``, ``sub_discipline``, ``qtype``, ``question``,
  ``answer``, optional ``uuid``, ``explanation``, ``source``, ``options``;
* the LLMEval record layout of appendix A.2 / Figure 8: ``category``,
  ``sub_category``, ``question_uuid``, a ``dialog`` whose user turn holds the
  question, and ``hint`` holding the reference answer.

Every record is validated on its own; a bad record gives one line naming the
file, record number and field, and the good records are imported anyway. Exact
duplicates (normalised-text hash) and near duplicates (cosine similarity of
sentence embeddings in a Chroma collection, section 2.1 "redundancy") are
reported and skipped. Multiple-choice questions can be expanded into
true/false variants (appendix A.2, :mod:`protocols.llmeval.augment`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from protocols.llmeval.augment import check_format, expand_mcq, redundant_variants, tf_value, BLANK_RE
from stores.question_bank import QTYPES, Question, QuestionBank, content_hash, new_uuid

QTYPE_ALIASES = {
    "multiple_choice": "mcq", "multiple-choice": "mcq", "choice": "mcq", "mc": "mcq",
    "tf": "true_false", "true/false": "true_false", "true-false": "true_false", "judgement": "true_false",
    "fill_in_the_blank": "fill_blank", "fill-in-the-blank": "fill_blank", "blank": "fill_blank",
    "short": "short_answer", "short-answer": "short_answer", "term_explanation": "term",
    "material_analysis": "material", "analysis": "material",
}


@dataclass
class Problem:
    record: int
    field: str
    message: str

    def line(self, file: str) -> str:
        return f"{file}, record {self.record}, field {self.field!r}: {self.message}"


@dataclass
class ImportReport:
    file: str
    read: int = 0
    imported: int = 0
    augmented: int = 0
    errors: list[Problem] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    imported_ids: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [p.line(self.file) for p in self.errors]
        out += [f"{self.file}, record {d['record']}: {d['kind']} duplicate of {d['of']}"
                + (f" (cosine {d['similarity']:.3f})" if d.get("similarity") is not None else "")
                for d in self.duplicates]
        out.append(self.summary())
        return out

    def summary(self) -> str:
        return (f"{self.file}: {self.read} records read, {self.imported} imported, {len(self.errors)} rejected, "
                f"{len(self.duplicates)} duplicates skipped, {self.augmented} true/false variants added")


def read_records(path: Path) -> Iterator[tuple[int, Any]]:
    """``(record number, raw record)``; a line that is not JSON yields its error message instead."""
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8-sig")
    if suffix == ".csv":
        for i, row in enumerate(csv.DictReader(text.splitlines()), start=1):
            yield i, dict(row)
        return
    if suffix == ".json" and text.lstrip().startswith("["):
        for i, rec in enumerate(json.loads(text), start=1):
            yield i, rec
        return
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield i, json.loads(line)
        except json.JSONDecodeError as exc:
            yield i, ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})")


def _options(raw: Any) -> list[str] | None:
    if raw in (None, "", []):
        return None
    if isinstance(raw, dict):
        return [str(raw[k]) for k in sorted(raw)]
    if isinstance(raw, list):
        return [str(o) for o in raw]
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            return [str(o) for o in json.loads(text)]
        return [o.strip() for o in text.split("||")]
    raise ValueError(f"options must be a list, an object or a '||'-separated string, got {type(raw).__name__}")


def _dialog_question(dialog: Any) -> str:
    turns = dialog if isinstance(dialog, list) else [dialog]
    for turn in turns:
        if isinstance(turn, dict) and turn.get("role") == "user" and str(turn.get("content") or "").strip():
            return str(turn["content"])
    return ""


def parse_record(rec: Any, source: str) -> tuple[Question | None, list[tuple[str, str]]]:
    """A :class:`Question` from one raw record, or the problems that prevent it."""
    if isinstance(rec, Exception):
        return None, [("record", str(rec))]
    if not isinstance(rec, dict):
        return None, [("record", f"expected an object, got {type(rec).__name__}")]
    problems: list[tuple[str, str]] = []
    llmeval_layout = "dialog" in rec or "hint" in rec or "question_uuid" in rec
    if llmeval_layout:
        question = _dialog_question(rec.get("dialog"))
        if not question:
            problems.append(("dialog", "no user turn with the question"))
        answer = rec.get("hint")
        discipline, sub = rec.get("category"), rec.get("sub_category")
        uid = rec.get("question_uuid")
        disc_field, answer_field = "category", "hint"
    else:
        question = str(rec.get("question") or "")
        if not question.strip():
            problems.append(("question", "missing or empty"))
        answer = rec.get("answer")
        discipline, sub = rec.get("discipline"), rec.get("sub_discipline")
        uid = rec.get("uuid")
        disc_field, answer_field = "discipline", "answer"
    if answer is None or not str(answer).strip():
        problems.append((answer_field, "missing reference answer"))
    if not discipline or not str(discipline).strip():
        problems.append((disc_field, "missing discipline"))
    try:
        options = _options(rec.get("options"))
    except (ValueError, json.JSONDecodeError) as exc:
        problems.append(("options", str(exc)))
        options = None
    qtype = str(rec.get("qtype") or rec.get("type") or "").strip().lower()
    qtype = QTYPE_ALIASES.get(qtype, qtype)
    if not qtype:
        answer_text = str(answer or "")
        qtype = ("mcq" if options else "true_false" if tf_value(answer_text) is not None
                 else "fill_blank" if BLANK_RE.search(question) else "short_answer")
    elif qtype not in QTYPES:
        problems.append(("qtype", f"unknown question type {qtype!r} (one of {', '.join(QTYPES)})"))
    if problems:
        return None, problems
    q = Question(uuid=str(uid).strip() if uid else new_uuid(), discipline=str(discipline).strip(),
                 sub_discipline=str(sub or "").strip(), qtype=qtype, question=question.strip(),
                 answer=str(answer).strip(), explanation=str(rec.get("explanation") or "").strip(),
                 source=str(rec.get("source") or source), options=options)
    return (None, check_format(q)) if check_format(q) else (q, [])


class NearDuplicateIndex:
    """Sentence embeddings of the bank's questions in a Chroma collection (cosine space)."""

    def __init__(self, client: Any, embed: Callable[[list[str]], Any], name: str = "llmeval_questions") -> None:
        self.embed = embed
        self.collection = client.get_or_create_collection(name, metadata={"hnsw:space": "cosine"})

    def vectors(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self.embed(texts)] if texts else []

    def nearest(self, vector: list[float]) -> tuple[str, float] | None:
        if self.collection.count() == 0:
            return None
        found = self.collection.query(query_embeddings=[vector], n_results=1)
        if not found["ids"] or not found["ids"][0]:
            return None
        return found["ids"][0][0], 1.0 - float(found["distances"][0][0])

    def add(self, ids: list[str], texts: list[str], vectors: list[list[float]]) -> None:
        if ids:
            self.collection.upsert(ids=ids, documents=texts, embeddings=vectors)


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(y * y for y in b) ** 0.5
    return dot / (na * nb) if na and nb else 0.0


def import_file(bank: QuestionBank, path: Path, *, index: NearDuplicateIndex | None = None,
                threshold: float = 0.95, augment: bool = False) -> ImportReport:
    """Validate and import one file; bad records and duplicates are reported, the rest imported."""
    report = ImportReport(file=str(path))
    if not path.is_file():
        raise FileNotFoundError(str(path))
    candidates: list[tuple[int, Question]] = []
    seen_uuids: set[str] = set()
    seen_hashes: dict[str, str] = {}
    for number, raw in read_records(path):
        report.read += 1
        q, problems = parse_record(raw, source=path.name)
        if q is None:
            report.errors.extend(Problem(number, f, m) for f, m in problems)
            continue
        if q.uuid in seen_uuids or bank.has_uuid(q.uuid):
            report.errors.append(Problem(number, "uuid", f"UUID {q.uuid} is already in use"))
            continue
        digest = content_hash(q.question, q.options or [])
        earlier = seen_hashes.get(digest) or next(iter(bank.uuids_with_hash(digest)), None)
        if earlier:
            report.duplicates.append({"record": number, "kind": "exact", "of": earlier, "similarity": None})
            continue
        seen_uuids.add(q.uuid)
        seen_hashes[digest] = q.uuid
        candidates.append((number, q))
    accepted = candidates
    if index is not None and candidates:
        vectors = index.vectors([q.question for _, q in candidates])
        accepted, kept_vecs = [], []
        for (number, q), vec in zip(candidates, vectors):
            hit = index.nearest(vec)
            best = hit if hit and hit[1] >= threshold else None
            for (_, other), other_vec in zip(accepted, kept_vecs):
                sim = _cos(vec, other_vec)
                if sim >= threshold and (best is None or sim > best[1]):
                    best = (other.uuid, sim)
            if best:
                report.duplicates.append({"record": number, "kind": "near", "of": best[0], "similarity": best[1]})
                continue
            accepted.append((number, q))
            kept_vecs.append(vec)
        index.add([q.uuid for _, q in accepted], [q.question for _, q in accepted], kept_vecs)
    to_add = [q for _, q in accepted]
    variants: list[Question] = []
    if augment:
        for q in to_add:
            if q.qtype == "mcq":
                split = expand_mcq(q)
                dropped = {v.uuid for v in redundant_variants(split)}
                variants += [v for v in split if v.uuid not in dropped and not bank.has_uuid(v.uuid)]
    bank.add_questions(to_add + variants)
    if augment:  # the true/false variants replace their multiple-choice parent in sampling (appendix A.1)
        bank.set_active({v.parent_uuid for v in variants if v.parent_uuid}, False)
    report.imported = len(to_add)
    report.augmented = len(variants)
    report.imported_ids = [q.uuid for q in to_add + variants]
    return report


def export_bank(bank: QuestionBank, path: Path, *, layout: str = "native") -> int:
    """Write every question to JSONL (``native`` or ``llmeval`` layout) or CSV (native columns)."""
    rows = []
    for q in bank.iter_export():
        if layout == "llmeval":
            rows.append({"category": q.discipline, "sub_category": q.sub_discipline, "question_uuid": q.uuid,
                         "dialog": [{"role": "user", "content": q.question}], "hint": q.answer,
                         "qtype": q.qtype, "options": q.options or None, "explanation": q.explanation})
        else:
            rows.append({"uuid": q.uuid, "discipline": q.discipline, "sub_discipline": q.sub_discipline,
                         "qtype": q.qtype, "question": q.question, "options": q.options or None, "answer": q.answer,
                         "explanation": q.explanation, "source": q.source, "created_at": q.created_at,
                         "parent_uuid": q.parent_uuid})
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["uuid"])
            writer.writeheader()
            for r in rows:
                writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else
                                 ("" if v is None else v) for k, v in r.items()})
    else:
        with path.open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(rows)
