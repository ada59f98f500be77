"""``view.html``: one self-contained page (data and script inline, no network) rendered from a payload.

The payload goes into a ``<script type="application/json">`` element with ``<``, ``>`` and ``&`` written as JSON
escapes, so no text from a model can close the element or start markup; the page's script reads it with
``JSON.parse`` and puts every value on the page with ``textContent``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.results.view.data import run_parts
from dyneval.stores.files import write_atomic

if TYPE_CHECKING:
    import jinja2

VIEW_FILE = "view.html"


def embed(value: Any) -> str:
    """A value as JSON safe inside a script element (no ``</script>``, ``<!--`` or entity can form); NaN and
    infinities (not JSON) as null."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere; walking every value only then (0.2 s at 700 units)
        text = json.dumps(_finite(value), ensure_ascii=False, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _data(payload: dict[str, Any]) -> Iterator[str]:
    """``embed(payload)`` a piece at a time; a value given as an iterator is a list, embedded an item at a time."""
    yield "{"
    for i, (key, value) in enumerate(payload.items()):
        yield f"{', ' if i else ''}{embed(key)}: "
        if isinstance(value, Iterator):
            yield "["
            for j, item in enumerate(value):
                yield f"{', ' if j else ''}{embed(item)}"
            yield "]"
        else:
            yield embed(value)
    yield "}"


@cache
def _template() -> jinja2.Template:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parents[1] / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("view.html.j2")


#: What stands for the data while the template renders (neither the template nor a title holds a NUL).
_DATA = "\0"


def _pieces(payload: dict[str, Any]) -> Iterator[str]:
    head, _, tail = _template().render(title=payload["title"], data=_DATA).partition(_DATA)
    yield head
    yield from _data(payload)
    yield tail


def render(payload: dict[str, Any]) -> str:
    return "".join(_pieces(payload))


def _finite(value: Any) -> Any:
    """NaN and infinities (not JSON) as None: the page shows them as empty, never as a number."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_page(path: Path, payload: dict[str, Any]) -> Path:
    """Write the page as it is rendered, the payload's iterators (lists) an item at a time."""
    write_atomic(path, _pieces(payload))
    return path


def write_view(run_dir: Path, extra_sections: dict[str, Any] | None = None) -> Path:
    """Write ``<run_dir>/view.html`` from the run's files (also for a partial run), a unit at a time."""
    run_dir = Path(run_dir)
    return write_page(run_dir / VIEW_FILE, run_parts(run_dir, extra_sections))
