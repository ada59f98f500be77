"""The blocks a report is made of (headings, text, tables, figures, code, collapsible sections).

A protocol describes its report as a list of blocks (``Protocol.report``); :mod:`results.report` renders them to
``report.md`` and ``report.html``. Plain data, so the engine's protocol interface can name them without importing
the results package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class Heading:
    kind: ClassVar[str] = "heading"
    text: str
    level: int = 2


@dataclass
class Text:
    """A paragraph (plain text; rendered escaped in HTML)."""

    kind: ClassVar[str] = "text"
    text: str


@dataclass
class Table:
    kind: ClassVar[str] = "table"
    headers: list[str]
    rows: list[list[Any]]
    caption: str = ""


@dataclass
class Figure:
    kind: ClassVar[str] = "figure"
    path: Path
    caption: str


@dataclass
class Code:
    """Preformatted text (transcripts, raw feedback)."""

    kind: ClassVar[str] = "code"
    text: str


@dataclass
class Details:
    """A collapsible section in HTML (plain section in Markdown)."""

    kind: ClassVar[str] = "details"
    summary: str
    blocks: list[Block] = field(default_factory=list)


Block = Heading | Text | Table | Figure | Code | Details
