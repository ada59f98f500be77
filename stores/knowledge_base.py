"""A JudgeAgent knowledge base as documents of chunks (seed 000, Appendix C, "Text chunking"): what the context
graph (:mod:`stores.context_graph`, Algorithm 3) is built from.

A knowledge base is a ``.txt``/``.md`` file, a JSONL/JSON/CSV/TSV file of documents (``{"id", "title", "text"}``),
a folder of such files, or the reference texts of the base questions (one document per question). Paragraphs
(blank-line separated) are chunks; very short paragraphs are merged with the next one and very long ones split at
sentence ends. Chunks are grouped into documents. Files are read strictly through :mod:`stores.inputs`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from dyneval.stores.inputs import FORMATS, TEXT_SUFFIXES, FieldMap, Scalar, Texts, input_error, read_records, read_text

MIN_CHUNK_CHARS = 200
MAX_CHUNK_CHARS = 1200


@dataclass
class Document:
    """One document of the knowledge base: its chunks, in order, are its paragraphs."""

    id: str
    title: str
    chunks: list[str]


def split_paragraphs(text: str, min_chars: int = MIN_CHUNK_CHARS, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """Paragraph-level chunks (Appendix C): several sentences or a paragraph, never single sentences."""
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    paras = [p for p in paras if p and not re.fullmatch(r"#+\s.*", p)]  # drop bare Markdown headings
    merged: list[str] = []
    buf = ""
    for p in paras:
        buf = f"{buf} {p}".strip() if buf else p
        if len(buf) >= min_chars:
            merged.append(buf)
            buf = ""
    if buf:
        if merged and len(merged[-1]) + len(buf) <= max_chars:
            merged[-1] = f"{merged[-1]} {buf}"
        else:
            merged.append(buf)
    out: list[str] = []
    for p in merged:
        while len(p) > max_chars:
            cut = p.rfind(". ", 0, max_chars)
            cut = cut + 1 if cut > min_chars else max_chars
            out.append(p[:cut].strip())
            p = p[cut:].strip()
        if p:
            out.append(p)
    return out


def _title_of(path: Path, text: str) -> str:
    for line in text.splitlines():
        if line.strip().startswith("#"):
            return line.strip().lstrip("#").strip()
    return path.stem.replace("_", " ")


KB_FIELDS = ("id", "title", "text")
KB_FORMATS = (*TEXT_SUFFIXES, *FORMATS)


class _RawDocument(BaseModel):
    """One knowledge-base record (``--kb-fields`` maps these names; ``text`` may join columns with ``+``)."""

    id: Scalar | None = None
    title: Scalar = ""
    text: Texts


def load_knowledge_base(path: str | Path, fields: str | None = None) -> list[Document]:
    """Documents of a knowledge base (``--kb``), read strictly through :mod:`stores.inputs`.

    A ``.txt``/``.md`` file is one document; a JSONL/JSON/CSV/TSV file holds one document per record
    (``text``, optional ``title`` and ``id``; a list of texts is joined by blank lines; ``fields`` maps other
    column names); a folder holds such files (hidden files skipped, linked folders followed, any other file
    refused: :func:`_kb_files`). Binary, non-UTF-8 or empty (even 0-byte) files, records without text and a
    knowledge base without any text are errors.
    """
    p = Path(path)
    if not p.exists():
        raise input_error("knowledge base not found", flag="--kb", file=p)
    fmap = FieldMap.parse(fields, KB_FIELDS, flag="--kb-fields", joinable=("text",))
    if not p.is_dir():
        return _file_documents(p, p.name, fmap, prefix="")
    files = _kb_files(p)
    docs = [d for f in files for d in _file_documents(f, str(f.relative_to(p)), fmap, prefix=f"{f.relative_to(p)}:")]
    if not docs:
        raise input_error(
            f"knowledge base folder holds no documents ({', '.join(KB_FORMATS)} files)", flag="--kb", file=p
        )
    return docs


def _kb_files(folder: Path) -> list[Path]:
    """The files under a knowledge-base folder, hidden names skipped, linked folders followed; a link leading back
    to a folder it is in (a loop), a broken link and an unreadable folder are refused."""
    files: list[Path] = []
    todo: list[tuple[Path, tuple[Path, ...]]] = [(folder, (folder.resolve(),))]
    while todo:
        current, above = todo.pop()
        try:
            entries = sorted(e for e in current.iterdir() if not e.name.startswith("."))
        except OSError as exc:
            raise input_error(f"cannot read folder: {exc.strerror or exc}", flag="--kb", file=current) from None
        for entry in entries:
            if entry.is_dir():
                real = entry.resolve()
                if real in above:
                    raise input_error(f"symbolic link loop: leads back to {real}", flag="--kb", file=entry)
                todo.append((entry, (*above, real)))
            elif entry.is_file():
                files.append(entry)
            else:
                raise input_error(
                    "neither a file nor a folder (a broken or looping symbolic link?)", flag="--kb", file=entry
                )
    return sorted(files)


def _file_documents(f: Path, name: str, fmap: FieldMap, *, prefix: str) -> list[Document]:
    suffix = f.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        text = read_text(f, flag="--kb")
        chunks = split_paragraphs(text)
        if not chunks:
            raise input_error("document holds no text paragraphs (only headings or blank lines)", flag="--kb", file=f)
        return [Document(id=name, title=_title_of(f, text), chunks=chunks)]
    if suffix not in FORMATS:
        raise input_error(
            f"unsupported knowledge-base file type {suffix or '(no suffix)'!r}; use {', '.join(KB_FORMATS)}",
            flag="--kb",
            file=f,
        )
    docs: dict[str, Document] = {}
    for rec in read_records(f, flag="--kb"):
        raw = fmap.validate(_RawDocument, rec)
        chunks = split_paragraphs("\n\n".join(raw.text))
        if not chunks:
            raise fmap.missing(rec, "text", "document has no text")
        doc_id = f"{prefix}{raw.id if raw.id is not None else rec.n}"
        if doc_id in docs:
            raise fmap.error(rec, "id", f"duplicate document id {doc_id!r}")
        docs[doc_id] = Document(id=doc_id, title=raw.title, chunks=chunks)
    return list(docs.values())
