"""The run report: Markdown built in code, HTML rendered by the Jinja2 template with autoescaping."""

from __future__ import annotations

import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dyneval.results import report
from dyneval.results.report import render_html, render_markdown, write_report
from dyneval.state.blocks import Code, Details, Figure, Heading, Table, Text

REPO = Path(__file__).resolve().parents[1]
HOSTILE = "<script>alert('x')</script> & \"quoted\""


class _Events(HTMLParser):
    """Start tags (with attributes), end tags and non-blank text of a page, entities decoded."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.events.append(("<", tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.events.append((">", tag))

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.events.append(("text", data))


def events(page: str) -> list[tuple]:
    parser = _Events()
    parser.feed(page)
    return parser.events


def body(page: str) -> list[tuple]:
    ev = events(page)
    return ev[ev.index(("<", "body", {})) + 1 : ev.index((">", "body"))]


def test_html_shows_hostile_text_as_text_everywhere(tmp_path: Path):
    """A model's answer such as "<script>..." must never become markup in the report."""
    blocks = [
        Heading(HOSTILE),
        Text(HOSTILE),
        Code(HOSTILE),
        Table([HOSTILE], [[HOSTILE]], caption=HOSTILE),
        Figure(tmp_path / "figures" / "f.png", HOSTILE),
        Details(HOSTILE, [Text(HOSTILE)]),
    ]
    page = render_html(HOSTILE, blocks, tmp_path)
    assert "<script>" not in page
    texts = [e[1] for e in events(page) if e[0] == "text"]
    assert texts.count(HOSTILE) == 11  # title, h1, heading, p, pre, caption, th, td, figcaption, summary, inner p
    assert ("<", "script", {}) not in events(page)
    img = next(e for e in events(page) if e[:2] == ("<", "img"))
    assert img[2] == {"src": "figures/f.png", "alt": HOSTILE}


def test_html_has_every_block_of_the_markdown_report_in_order(tmp_path: Path):
    blocks = [
        Heading("Scores", level=3),
        Text("two\nlines"),
        Table(["model", "S", "missing"], [["m1", 0.123456789, None], ["m2", 123456.0, True]], caption="cap"),
        Figure(tmp_path / "figures" / "a b.png", "fig"),
        Figure(Path("/elsewhere/f.png"), "outside"),
        Code("def f():\n    return 1\n"),
        Details("more", [Text("inner"), Details("nested", [Code("c")])]),
    ]
    assert body(render_html("T", blocks, tmp_path)) == [
        ("<", "h1", {}),
        ("text", "T"),
        (">", "h1"),
        ("<", "h3", {}),
        ("text", "Scores"),
        (">", "h3"),
        ("<", "p", {}),
        ("text", "two\nlines"),
        (">", "p"),
        ("<", "table", {}),
        ("<", "caption", {}),
        ("text", "cap"),
        (">", "caption"),
        ("<", "thead", {}),
        ("<", "tr", {}),
        ("<", "th", {}),
        ("text", "model"),
        (">", "th"),
        ("<", "th", {}),
        ("text", "S"),
        (">", "th"),
        ("<", "th", {}),
        ("text", "missing"),
        (">", "th"),
        (">", "tr"),
        (">", "thead"),
        ("<", "tbody", {}),
        ("<", "tr", {}),
        ("<", "td", {}),
        ("text", "m1"),
        (">", "td"),
        ("<", "td", {}),
        ("text", "0.1235"),
        (">", "td"),
        ("<", "td", {}),
        (">", "td"),
        (">", "tr"),
        ("<", "tr", {}),
        ("<", "td", {}),
        ("text", "m2"),
        (">", "td"),
        ("<", "td", {}),
        ("text", "1.235e+05"),
        (">", "td"),
        ("<", "td", {}),
        ("text", "True"),
        (">", "td"),
        (">", "tr"),
        (">", "tbody"),
        (">", "table"),
        ("<", "figure", {}),
        ("<", "img", {"src": "figures/a b.png", "alt": "fig"}),
        ("<", "figcaption", {}),
        ("text", "fig"),
        (">", "figcaption"),
        (">", "figure"),
        ("<", "figure", {}),
        ("<", "img", {"src": "/elsewhere/f.png", "alt": "outside"}),
        ("<", "figcaption", {}),
        ("text", "outside"),
        (">", "figcaption"),
        (">", "figure"),
        ("<", "pre", {}),
        ("text", "def f():\n    return 1\n"),
        (">", "pre"),
        ("<", "details", {}),
        ("<", "summary", {}),
        ("text", "more"),
        (">", "summary"),
        ("<", "p", {}),
        ("text", "inner"),
        (">", "p"),
        ("<", "details", {}),
        ("<", "summary", {}),
        ("text", "nested"),
        (">", "summary"),
        ("<", "pre", {}),
        ("text", "c"),
        (">", "pre"),
        (">", "details"),
        (">", "details"),
    ]


def test_markdown_report_keeps_its_layout(tmp_path: Path):
    blocks = [
        Heading("Scores"),
        Text("a | b"),
        Table(["m", "S|x"], [["m1", 0.5], ["line\nbreak", None]], caption="cap"),
        Figure(tmp_path / "figures" / "f.png", "fig"),
        Code("x = 1"),
        Details("more", [Text("inner")]),
    ]
    assert render_markdown("Title", blocks, tmp_path) == (
        "# Title\n\n## Scores\n\na | b\n\n*cap*\n\n| m | S\\|x |\n|---|---|\n| m1 | 0.5 |\n| line break |  |\n\n"
        "![fig](figures/f.png)\n*fig*\n\n```\nx = 1\n```\n\n**more**\n\ninner\n"
    )


def test_an_unknown_block_is_refused_by_both_renderers_even_when_nested(tmp_path: Path):
    for blocks in ([object()], [Details("d", [object()])]):
        with pytest.raises(TypeError, match="unknown report block"):
            render_html("T", blocks, tmp_path)
        with pytest.raises(TypeError, match="unknown report block"):
            render_markdown("T", blocks, tmp_path)


def test_write_report_writes_both_files_from_the_same_blocks(tmp_path: Path):
    md, page = write_report(tmp_path, "Run <1>", [Text("score & rank")])
    assert md.read_text(encoding="utf-8") == "# Run <1>\n\nscore & rank\n"
    assert body(page.read_text(encoding="utf-8")) == [
        ("<", "h1", {}),
        ("text", "Run <1>"),
        (">", "h1"),
        ("<", "p", {}),
        ("text", "score & rank"),
        (">", "p"),
    ]


def test_the_report_template_is_package_data():
    """An installed (non-editable) dyneval must ship the template the renderer loads."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    shipped = {p for pattern in data["dyneval.results"] for p in (REPO / "results").glob(pattern)}
    assert Path(report.__file__).resolve().parent / "templates" / "report.html.j2" in shipped
