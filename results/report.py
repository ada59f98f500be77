"""Report rendering shared by all protocols: blocks -> ``report.md`` and ``report.html``.

Protocols return a list of blocks (headings, text, tables, figures); plots are
drawn with matplotlib (Agg) into ``<run_dir>/figures`` and referenced from both files.
The HTML page is the Jinja2 template ``results/templates/report.html.j2`` (autoescaped).
matplotlib and Jinja2 are imported on first use, so a process that writes no report never loads them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.state.blocks import Block, Code, Details, Figure, Heading, Table, Text

if TYPE_CHECKING:
    import jinja2


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"
    return "" if value is None else str(value)


def _md_cell(value: Any) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(title: str, blocks: Sequence[Block], base: Path) -> str:
    out = [f"# {title}", ""]
    for block in blocks:
        out.extend(_md_block(block, base))
    return "\n".join(out).rstrip() + "\n"


def _md_block(block: Block, base: Path) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Text):
        return [block.text, ""]
    if isinstance(block, Code):
        return ["```", block.text, "```", ""]
    if isinstance(block, Table):
        lines = [f"*{block.caption}*", ""] if block.caption else []
        lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
        lines.append("|" + "---|" * len(block.headers))
        lines.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows)
        return lines + [""]
    if isinstance(block, Figure):
        return [f"![{block.caption}]({_rel(block.path, base)})", f"*{block.caption}*", ""]
    if isinstance(block, Details):
        lines = [f"**{block.summary}**", ""]
        for inner in block.blocks:
            lines.extend(_md_block(inner, base))
        return lines
    raise TypeError(f"unknown report block {block!r}")


@cache
def _template() -> jinja2.Template:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = fmt
    env.filters["rel"] = _rel
    return env.get_template("report.html.j2")


def render_html(title: str, blocks: Sequence[Block], base: Path) -> str:
    _check_blocks(blocks)
    return _template().render(title=title, blocks=blocks, base=base)


def _check_blocks(blocks: Sequence[Block]) -> None:
    for block in blocks:
        if not isinstance(block, (Heading, Text, Table, Figure, Code, Details)):
            raise TypeError(f"unknown report block {block!r}")
        if isinstance(block, Details):
            _check_blocks(block.blocks)


def _rel(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def write_report(run_dir: Path, title: str, blocks: Sequence[Block], *, name: str = "report") -> tuple[Path, Path]:
    """Write ``NAME.md`` and ``NAME.html`` (``report``; ``--calibration``'s ``calibration``) into ``run_dir``; the
    HTML page (made to be shared) names no absolute path of this machine (:mod:`results.view.paths`)."""
    from dyneval.results.view.paths import Relative

    md, page = run_dir / f"{name}.md", run_dir / f"{name}.html"
    md.write_text(render_markdown(title, blocks, run_dir), encoding="utf-8")
    page.write_text(Relative(run_dir).text(render_html(title, blocks, run_dir)), encoding="utf-8")
    return md, page


# -- plots ----------------------------------------------------------------------------------------

_pyplot_lock = threading.Lock()


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported when the first figure is drawn (or preloaded)."""
    with _pyplot_lock:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt


def _preload() -> None:
    _pyplot()
    import scipy.stats  # noqa: F401  # the summary's intervals (results.stats): seconds to import on a loaded machine


def preload_plotting() -> None:
    """Import matplotlib and ``scipy.stats`` on a background thread: a run calls this when its units start, so
    the imports overlap their waiting on the endpoint instead of delaying the summary and report after them (at
    700 ATAD answers on a loaded machine, importing ``scipy.stats`` for Table 1's interval was most of the
    report phase; bench/atad_memory.py)."""
    threading.Thread(target=_preload, name="preload-results", daemon=True).start()


def figure_path(run_dir: Path, name: str) -> Path:
    folder = run_dir / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.png"


def bar_chart(path: Path, labels: Sequence[str], values: Sequence[float], *, title: str, ylabel: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(labels) + 2), 3.2))
    ax.bar(list(labels), list(values), color="#4878a8")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def heatmap(
    path: Path, rows: Sequence[str], cols: Sequence[str], values: Sequence[Sequence[float]], *, title: str
) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 0.7 * len(cols) + 2), max(2.5, 0.5 * len(rows) + 1.5)))
    im = ax.imshow([list(r) for r in values], cmap="viridis", vmin=0, aspect="auto")
    ax.set_xticks(range(len(cols)), list(cols), rotation=30)
    ax.set_yticks(range(len(rows)), list(rows))
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, fmt(v), ha="center", va="center", color="w", fontsize=8)
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def line_chart(
    path: Path,
    series: dict[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    x: Sequence[Any] | None = None,
    band: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for name, ys in series.items():
        xs = list(x) if x is not None else list(range(1, len(ys) + 1))
        ax.plot(xs, list(ys), marker="o", label=name)
        if band and name in band:
            lo, hi = band[name]
            ax.fill_between(xs, list(lo), list(hi), alpha=0.2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scatter(
    path: Path,
    points: dict[str, tuple[float, float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    errors: dict[str, tuple[float, float]] | None = None,
) -> Path:
    """One labelled point per name at (x, y); ``errors``: a name's (low, high) y interval, drawn as a bar."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, (x, y) in points.items():
        if errors and name in errors:
            low, high = errors[name]
            ax.errorbar([x], [y], yerr=[[max(0.0, y - low)], [max(0.0, high - y)]], fmt="o", capsize=3)
        else:
            ax.plot([x], [y], "o")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.margins(0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
