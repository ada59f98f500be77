"""Import, validation, near-duplicate detection and export of the llmeval question bank.

Question files are read by the one data layer (:mod:`stores.inputs`: JSONL, JSON, CSV, TSV; quoted
multi-line fields and every character of a question or reference answer are stored as written). Canonical
fields, renamed with ``--fields question=Q,answer=A,...``:

* ``discipline``, ``question``, ``answer`` (required), ``sub_discipline``, ``qtype``, ``options``,
  ``uuid``, ``explanation``, ``source``; ``--discipline NAME`` gives a record without a discipline that one
  (a file with no discipline column, as AGIEval's and MMLU-Redux's);
* a multiple-choice answer may be option letters (``C``, or a key ``A, C``), a 0-based index or an option's text,
  read as :func:`stores.choices.option_letters` reads it (a JSON integer is an index; a CSV cell is text, read every
  way, and refused as ambiguous when two readings name different options, unless ``--answer-form`` names the one
  way); one option is stored as its letter;
* the LLMEval record layout of appendix A.2 / Figure 8 (``category``, ``sub_category``,
  ``question_uuid``, a ``dialog`` whose user turn holds the question, ``hint`` holding the reference
  answer) is recognised from a file's first record and mapped the same way (:data:`LLMEVAL_LAYOUT`).

Every record is validated (types, appendix A.2 format checks, UUID conflicts with the bank) before
anything is written. An invalid record stops the import with one line naming file, record and field,
unless ``skip_invalid`` (``--skip-invalid``): then it is rejected with its reason and the others are
imported. Exact duplicates (normalised-text hash) and near duplicates (cosine similarity of sentence
embeddings in this bank's own Chroma collection, section 2.1 "redundancy") are skipped and reported with
the record or bank question they repeat. The report counts records: read = imported + duplicates +
rejected. Multiple-choice questions can be expanded into true/false variants (appendix A.2,
:mod:`nodes.llmeval.augment`).
"""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError

from dyneval.nodes.llmeval.augment import BLANK_RE, check_format, expand_mcq, redundant_variants, tf_value
from dyneval.state.errors import InputError
from dyneval.state.llmeval import QTYPES
from dyneval.stores.choices import AnswerForm, option_letters
from dyneval.stores.inputs import FieldMap, Record, Scalar, Text, Texts, hf_records, read_records
from dyneval.stores.question_bank import Question, QuestionBank, content_hash, content_uuid

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from dyneval.runtime.services import Services
    from dyneval.runtime.spread import Spread

FLAG = "--bank"
CANONICAL = ("uuid", "discipline", "sub_discipline", "qtype", "question", "options", "answer", "explanation", "source")
#: Fields that may join several columns with ``+`` (``question=passage+question``: a reading passage and its
#: question become one question text, paragraphs apart).
JOINABLE = ("question",)
#: The LLMEval record layout (appendix A.2 / Figure 8) as a ``--fields`` mapping.
LLMEVAL_LAYOUT = "uuid=question_uuid,discipline=category,sub_discipline=sub_category,question=dialog,answer=hint"
QTYPE_ALIASES = {
    "multiple_choice": "mcq",
    "multiple-choice": "mcq",
    "choice": "mcq",
    "mc": "mcq",
    "tf": "true_false",
    "true/false": "true_false",
    "true-false": "true_false",
    "judgement": "true_false",
    "fill_in_the_blank": "fill_blank",
    "fill-in-the-blank": "fill_blank",
    "blank": "fill_blank",
    "short": "short_answer",
    "short-answer": "short_answer",
    "term_explanation": "term",
    "material_analysis": "material",
    "analysis": "material",
}


def dialog_question(dialog: Any) -> str | None:
    """The first non-empty user turn of an LLMEval ``dialog`` (a list of turns or one turn), else ``None``."""
    turns = dialog if isinstance(dialog, list) else [dialog]
    for turn in turns:
        if (
            isinstance(turn, dict)
            and turn.get("role") == "user"
            and isinstance(turn.get("content"), str)
            and turn["content"].strip()
        ):
            return turn["content"]
    return None


class RawQuestion(BaseModel):
    """One record's canonical fields, typed (:mod:`stores.inputs` value types)."""

    uuid: Scalar | None = None
    discipline: Text
    sub_discipline: Text = ""
    qtype: Text = ""
    question: Text
    options: Texts = []
    answer: Scalar
    explanation: Text = ""
    source: Text = ""

    @field_validator("question", mode="before")
    @classmethod
    def _dialog(cls, value: Any) -> Any:
        if isinstance(value, list) and all(v is None or isinstance(v, (str, int, float)) for v in value):
            return "\n\n".join(str(v).strip() for v in value if v is not None and str(v).strip())  # joined columns
        if isinstance(value, list) or (isinstance(value, dict) and "role" in value):  # an LLMEval dialog
            found = dialog_question(value)
            if found is None:
                raise PydanticCustomError("dialog", "a dialog without a user turn holding the question")
            return found
        return value

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, value: Any) -> Any:
        if isinstance(value, dict):  # {"A": ..., "B": ...}: in letter order
            return [value[k] for k in sorted(value)]
        if isinstance(value, str):  # CSV: a JSON list, a Python list literal (a pandas export), or "a||b||c"
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    listed = _python_list(text)
                    if listed is None:
                        raise PydanticCustomError(
                            "options", "not a valid JSON list ({msg})", {"msg": exc.msg}
                        ) from None
                    return listed
            return [o.strip() for o in text.split("||")]
        return value


def _python_list(text: str) -> list[Any] | None:
    """``text`` read as a Python list of texts and numbers (``['a', 'b']``, as pandas writes a list column to CSV),
    exactly as written (:func:`ast.literal_eval`, no code run); None for anything else."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return value
    return None


def field_map(spec: str | None, first: Record) -> FieldMap:
    """The ``--fields`` mapping; without one, a file in the LLMEval layout is mapped by :data:`LLMEVAL_LAYOUT`."""
    if spec is None and "question" not in first.data and {"dialog", "hint"} & set(first.data):
        spec = LLMEVAL_LAYOUT
    return FieldMap.parse(spec, CANONICAL, joinable=JOINABLE)


def question_type(given: str, options: list[str], answer: str, question: str) -> str:
    """The question type: ``given`` (an alias resolved), else inferred: options -> mcq, a true/false answer,
    a blank slot, else short answer."""
    qtype = QTYPE_ALIASES.get(given.strip().lower(), given.strip().lower())
    if qtype:
        return qtype
    return (
        "mcq"
        if options
        else "true_false"
        if tf_value(answer) is not None
        else "fill_blank"
        if BLANK_RE.search(question)
        else "short_answer"
    )


def to_question(
    rec: Record, fields: FieldMap, source: str, discipline: str | None = None, form: AnswerForm = "any"
) -> Question:
    """A :class:`Question` from one record, or :class:`InputError` naming file, record and field.

    ``discipline`` (``--discipline``) is the discipline of a record without one (none mapped, or blank); a
    record's own wins. A multiple-choice answer is read against the options (:func:`stores.choices.option_letters`:
    option letters, a 0-based index or an option's text, or only the ``form`` of ``--answer-form``) and stored as
    its letter; a key of several letters (``A, C``) is stored as written."""
    values = fields.values(rec)
    if "discipline" not in values:
        if discipline is None:
            raise fields.missing(rec, "discipline", "give records without one a discipline with --discipline NAME")
        values["discipline"] = discipline
    raw = fields.validate(RawQuestion, rec, values)
    qtype = question_type(raw.qtype, raw.options, raw.answer, raw.question)
    if qtype not in QTYPES:
        raise fields.error(rec, "qtype", f"unknown question type {qtype!r} (one of {', '.join(QTYPES)})")
    answer = raw.answer
    if qtype == "mcq" and raw.options:
        try:
            letters = option_letters(values["answer"], raw.options, several=True, form=form)
        except ValueError as exc:
            raise fields.error(rec, "answer", str(exc)) from None
        answer = letters[0] if len(letters) == 1 else raw.answer
    q = Question(
        uuid=raw.uuid.strip() if raw.uuid and raw.uuid.strip() else content_uuid(raw.question, raw.options),
        discipline=raw.discipline.strip(),
        sub_discipline=raw.sub_discipline.strip(),
        qtype=qtype,
        question=raw.question,
        answer=answer,
        explanation=raw.explanation,
        source=raw.source or source,
        options=raw.options or None,
    )
    problems = check_format(q)
    if problems:
        raise fields.error(rec, *problems[0])
    return q


@dataclass
class Duplicate:
    record: int | str
    kind: str  # "exact" or "near"
    of: str  # "record N" of the same file, or "bank question UUID"
    similarity: float | None = None


@dataclass
class ImportReport:
    """What happened to every record of one file (read = imported + duplicates + rejected)."""

    file: str
    read: int = 0
    imported: int = 0
    augmented: int = 0
    duplicates: list[Duplicate] = field(default_factory=list)
    rejected: list[tuple[int | str, str]] = field(default_factory=list)  # (record, the reason as one line)
    imported_ids: list[str] = field(default_factory=list)
    unused: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [reason for _, reason in self.rejected]
        if self.unused:
            out.append(
                f"{self.file}: columns not imported (no --fields name maps them; join one into the question "
                "with --fields question=PASSAGE+QUESTION): "
                + ", ".join(f"{c} ({n} records)" for c, n in sorted(self.unused.items()))
            )
        out += [
            f"{self.file}, record {d.record}: skipped, {d.kind} duplicate of {d.of}"
            + (f" (cosine {d.similarity:.3f})" if d.similarity is not None else "")
            for d in self.duplicates
        ]
        out.append(self.summary())
        return out

    def summary(self) -> str:
        return (
            f"{self.file}: {self.read} records: {self.imported} imported, {len(self.duplicates)} duplicates "
            f"skipped, {len(self.rejected)} rejected; {self.augmented} true/false variants added"
        )


@dataclass
class LoadedFile:
    """The validated questions of one file (nothing written yet) and the records rejected on the way."""

    file: str
    read: int
    questions: list[tuple[Record, Question]]
    rejected: list[tuple[int | str, str]]
    skip_invalid: bool
    unused: dict[str, int] = field(default_factory=dict)  # column no field maps -> records with a value in it

    def reject(self, rec: Record, error: InputError) -> None:
        """Count ``rec`` as rejected, or stop with ``error`` unless invalid records are skipped."""
        if not self.skip_invalid:
            raise error
        self.rejected.append((rec.n, str(error)))


def unmapped_columns(records: list[Record], fmap: FieldMap) -> dict[str, int]:
    """Columns that no field maps and that hold a value, with how many records hold one: they are not imported,
    and the import report says so (a reading passage left out would leave its question without its text)."""
    mapped = {c for cols in fmap.sources.values() for c in cols}
    counts: dict[str, int] = {}
    for rec in records:
        for col, value in rec.data.items():
            if col not in mapped and value not in (None, "", [], {}):
                counts[col] = counts.get(col, 0) + 1
    return counts


def load_file(
    path: Path | None,
    *,
    fields: str | None = None,
    skip_invalid: bool = False,
    discipline: str | None = None,
    form: AnswerForm = "any",
    hf_dataset: str | None = None,
    hf_split: str = "test",
) -> LoadedFile:
    """Read and validate every record of ``path``, or of the Hugging Face dataset ``hf_dataset`` (split
    ``hf_split``), with no bank access: file-level faults always stop. ``discipline``: that of every record without
    one; ``form``: how multiple-choice answers are read (:func:`to_question`)."""
    if hf_dataset:
        records, name = hf_records(hf_dataset, hf_split), f"hf:{hf_dataset}"
    elif path is not None:
        records, name = read_records(path, flag=FLAG), str(path)
    else:
        raise ValueError("load_file needs a path or a dataset")
    fmap = field_map(fields, records[0])
    loaded = LoadedFile(
        file=name,
        read=len(records),
        questions=[],
        rejected=[],
        skip_invalid=skip_invalid,
        unused=unmapped_columns(records, fmap),
    )
    for rec in records:
        try:
            loaded.questions.append(
                (rec, to_question(rec, fmap, source=Path(name).name, discipline=discipline, form=form))
            )
        except InputError as exc:
            loaded.reject(rec, exc)
    return loaded


class NearDuplicateIndex:
    """Sentence embeddings of one bank's questions in a Chroma collection (cosine space): ids and vectors (the
    question text stays in the bank). ``embed`` makes the vectors of a list of texts (the run's embedding
    function, or a :class:`SpreadEmbedding` over its workers); the collection is queried and filled with them.

    ``name`` must be the bank's own (:func:`index_name`): two banks in one folder share a Chroma folder,
    and a question must only ever be a near duplicate of a question its own bank holds.
    """

    def __init__(self, client: Any, embed: Callable[[list[str]], Any], name: str) -> None:
        self.embed = embed
        # a new collection indexes in larger batches (brute force over the rest): ~1.5x faster bulk import
        self.collection = client.get_or_create_collection(
            name, metadata={"hnsw:space": "cosine", "hnsw:batch_size": 2000, "hnsw:sync_threshold": 20000}
        )

    def vectors(self, texts: list[str]) -> np.ndarray:
        """The embeddings of ``texts`` (one call to the embedding function) as rows of a float64 matrix."""
        return _matrix(self.embed(texts), len(texts))

    def nearest(self, vectors: np.ndarray) -> list[tuple[str, float] | None]:
        """For each row: the most similar indexed question and its cosine similarity (one query for all)."""
        import numpy as np

        if len(vectors) == 0 or self.collection.count() == 0:
            return [None] * len(vectors)
        found = self.collection.query(query_embeddings=vectors.astype(np.float32), n_results=1, include=["distances"])
        return [(ids[0], 1.0 - float(dist[0])) if ids else None for ids, dist in zip(found["ids"], found["distances"])]

    def add(self, ids: list[str], vectors: np.ndarray) -> None:
        if ids:
            self.collection.upsert(ids=ids, embeddings=vectors.astype("float32"))


#: Question texts per item when the embedding leaves this process (``--executor ray``): one embedding call each.
EMBED_BATCH = 128


def _matrix(vectors: Any, n: int) -> np.ndarray:
    """``n`` embeddings as the rows of a float64 matrix."""
    import numpy as np

    return np.asarray(vectors, dtype=np.float64).reshape(n, -1)


def embed_batch(services: Services, texts: list[str]) -> np.ndarray:
    """One item of a spread import (:mod:`runtime.spread`) for the near-duplicate check (seed 002, section 2.1
    "redundancy"): the run's embeddings of ``texts`` (one call) as the rows of a float64 matrix."""
    return _matrix(services.embeddings()(texts), len(texts))


class SpreadEmbedding:
    """The embedding function of a :class:`NearDuplicateIndex` whose texts are embedded where the run's
    ``spread`` works (its Ray workers with ``--executor ray``): in items of :data:`EMBED_BATCH` texts when they
    leave this process, else in one call as the run's own embedding function would be called. Rows are placed by
    item index, so the matrix (and every near-duplicate decision taken from it) does not depend on the order the
    items end in; each text is embedded once."""

    def __init__(self, spread: Spread, batch: int = EMBED_BATCH) -> None:
        self.spread, self.batch = spread, batch

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        size = self.batch if self.spread.remote else max(len(texts), 1)
        items = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
        parts = dict(self.spread.map(embed_batch, items))
        return np.concatenate([parts[i] for i in range(len(items))])


def index_name(bank: QuestionBank) -> str:
    """The Chroma collection of ``bank``'s near-duplicate index (named after the bank's id)."""
    return f"llmeval_q_{bank.bank_id()}"


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero: similar to nothing)."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


@dataclass
class _Seen:
    """What earlier records of the file being imported settled, across its batches."""

    first_with: dict[str, Record] = field(default_factory=dict)  # content hash -> first record holding it
    by_uuid: dict[str, tuple[Record, str]] = field(default_factory=dict)  # uuid -> (record, content hash)
    imported: dict[str, Record] = field(default_factory=dict)  # uuid -> record, of the questions it imported


def _exact_checks(
    bank: QuestionBank, batch: list[tuple[Record, Question]], seen: _Seen, loaded: LoadedFile, report: ImportReport
) -> list[tuple[Record, Question]]:
    """UUID conflicts (rejected) and exact duplicates (skipped) of one batch, with two bank queries."""
    digests = [content_hash(q.question, q.options or []) for _, q in batch]
    held = bank.hashes_of(q.uuid for _, q in batch)
    in_bank = bank.uuids_with_hashes(digests)
    candidates = []
    for (rec, q), digest in zip(batch, digests):
        if q.uuid in seen.by_uuid and seen.by_uuid[q.uuid][1] != digest:
            loaded.reject(
                rec,
                rec.error(
                    f"UUID {q.uuid} is already used by record {seen.by_uuid[q.uuid][0].n} for another question",
                    field="uuid",
                ),
            )
            continue
        if q.uuid in held and held[q.uuid] != digest:
            loaded.reject(rec, rec.error(f"UUID {q.uuid} already names another question in the bank", field="uuid"))
            continue
        earlier = seen.first_with.get(digest)
        if earlier is not None or digest in in_bank:
            of = f"record {earlier.n}" if earlier is not None else f"bank question {in_bank[digest]}"
            report.duplicates.append(Duplicate(rec.n, "exact", of))
            continue
        seen.first_with[digest] = rec
        seen.by_uuid[q.uuid] = (rec, digest)
        candidates.append((rec, q))
    return candidates


def _near_checks(
    index: NearDuplicateIndex,
    candidates: list[tuple[Record, Question]],
    seen: _Seen,
    threshold: float,
    near: list[Duplicate],
) -> tuple[list[tuple[Record, Question]], np.ndarray]:
    """Near duplicates of one batch (skipped): one embedding call and one index query for the batch, then each
    record in file order against the index (the bank and the file's earlier batches) and against the records
    of this batch accepted before it; the most similar wins, the index on a tie, the earlier record among
    records. Returns the accepted records and their vectors."""
    import numpy as np

    vectors = index.vectors([q.question for _, q in candidates])
    hits = index.nearest(vectors)
    unit = _unit_rows(vectors)
    similar = unit @ unit.T
    close = np.tril(similar >= threshold, -1).any(axis=1)  # some earlier record of the batch is that similar
    kept: list[int] = []
    for i, ((rec, _), hit) in enumerate(zip(candidates, hits)):
        best = None
        if hit is not None and hit[1] >= threshold:
            earlier = seen.imported.get(hit[0])
            best = (f"record {earlier.n}" if earlier is not None else f"bank question {hit[0]}", hit[1])
        if close[i] and kept:
            row = similar[i, kept]
            j = int(np.argmax(row))
            if row[j] >= threshold and (best is None or row[j] > best[1]):
                best = (f"record {candidates[kept[j]][0].n}", float(row[j]))
        if best:
            near.append(Duplicate(rec.n, "near", best[0], best[1]))
            continue
        kept.append(i)
    return [candidates[i] for i in kept], vectors[kept]


#: Records per import batch: one embedding call, one index query and one bank transaction each.
BATCH = 1000


def import_file(
    bank: QuestionBank,
    path: Path | LoadedFile,
    *,
    fields: str | None = None,
    skip_invalid: bool = False,
    discipline: str | None = None,
    form: AnswerForm = "any",
    index: NearDuplicateIndex | None = None,
    threshold: float = 0.95,
    augment: bool = False,
    batch: int = BATCH,
    progress: Callable[[int], None] | None = None,
    defer_index: bool = False,
) -> ImportReport:
    """Validate one file (or take an already :func:`load_file`-ed one) and import it into ``bank``.

    Batches of ``batch`` records in file order; each is checked against the bank, the file's earlier batches and
    itself, then written in one transaction (its true/false variants and their parents' deactivation included)
    and its vectors added to the index; ``progress`` gets the number of records each batch settled. A killed
    import leaves whole batches: their records are exact duplicates of bank questions on the next import, and
    a batch written but not yet indexed is indexed first (:meth:`QuestionBank.index_pending`). ``defer_index``
    (without ``index``): no near-duplicate check now, and the questions wait as pending for the next import's
    index, so a file known to hold no near duplicates (the shipped sample) imports without the embedding model.
    """
    loaded = (
        path
        if isinstance(path, LoadedFile)
        else load_file(path, fields=fields, skip_invalid=skip_invalid, discipline=discipline, form=form)
    )
    report = ImportReport(file=loaded.file, read=loaded.read, unused=loaded.unused)
    stray = bank.index_pending() if index is not None else []
    if stray and index is not None:
        index.add([q.uuid for q in stray], index.vectors([q.question for q in stray]))
        bank.index_done()
    seen = _Seen()
    near: list[Duplicate] = []  # reported after the exact duplicates, as a whole-file check lists them
    for start in range(0, len(loaded.questions), batch):
        part = loaded.questions[start : start + batch]
        accepted = _exact_checks(bank, part, seen, loaded, report)
        vectors = None
        if index is not None and accepted:
            accepted, vectors = _near_checks(index, accepted, seen, threshold, near)
        to_add = [q for _, q in accepted]
        variants: list[Question] = []
        if augment:  # the true/false variants replace their multiple-choice parent in sampling (appendix A.1)
            for q in to_add:
                if q.qtype == "mcq":
                    split = expand_mcq(q)
                    dropped = {v.uuid for v in redundant_variants(split)}
                    variants += [v for v in split if v.uuid not in dropped]
            held = bank.existing_uuids(v.uuid for v in variants)
            variants = [v for v in variants if v.uuid not in held]
        pending = bool(to_add) and (defer_index if index is None else vectors is not None)
        bank.add_questions(
            to_add + variants, deactivate={v.parent_uuid for v in variants if v.parent_uuid}, index_pending=pending
        )
        # after the bank write: the index never names a question the bank lacks
        if pending and index is not None and vectors is not None:
            index.add([q.uuid for q in to_add], vectors)
            bank.index_done()
        seen.imported.update((q.uuid, rec) for rec, q in accepted)
        report.imported += len(to_add)
        report.augmented += len(variants)
        report.imported_ids += [q.uuid for q in to_add + variants]
        if progress is not None:
            progress(len(part))
    report.duplicates += near
    report.rejected = loaded.rejected
    bank.refresh_ranks()
    return report


def export_bank(bank: QuestionBank, path: Path, *, layout: str = "native") -> int:
    """Write every question to JSONL (``native`` or ``llmeval`` layout) or CSV (native columns)."""
    rows = []
    for q in bank.iter_export():
        if layout == "llmeval":
            rows.append(
                {
                    "category": q.discipline,
                    "sub_category": q.sub_discipline,
                    "question_uuid": q.uuid,
                    "dialog": [{"role": "user", "content": q.question}],
                    "hint": q.answer,
                    "qtype": q.qtype,
                    "options": q.options or None,
                    "explanation": q.explanation,
                }
            )
        else:
            rows.append(
                {
                    "uuid": q.uuid,
                    "discipline": q.discipline,
                    "sub_discipline": q.sub_discipline,
                    "qtype": q.qtype,
                    "question": q.question,
                    "options": q.options or None,
                    "answer": q.answer,
                    "explanation": q.explanation,
                    "source": q.source,
                    "created_at": q.created_at,
                    "parent_uuid": q.parent_uuid,
                }
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["uuid"])
            writer.writeheader()
            for r in rows:
                writer.writerow(
                    {
                        k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else ("" if v is None else v)
                        for k, v in r.items()
                    }
                )
    else:
        with path.open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(rows)
