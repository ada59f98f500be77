"""``view.html``: one self-contained page (data and script inline, no network) rendered from a payload.

The payload goes into a ``<script type="application/json">`` element with ``<``, ``>`` and ``&`` written as JSON
escapes, so no text from a model can close the element or start markup; the page's script reads it with
``JSON.parse`` and puts every value on the page with ``textContent``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.runtime.view.data import run_payload
from dyneval.stores.files import write_atomic

if TYPE_CHECKING:
    import jinja2

VIEW_FILE = "view.html"


def embed(payload: dict[str, Any]) -> str:
    """The payload as JSON safe inside a script element (no ``</script>``, ``<!--`` or entity can form)."""
    text = json.dumps(payload, ensure_ascii=False, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@cache
def _template() -> jinja2.Template:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parents[1] / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("view.html.j2")


def render(payload: dict[str, Any]) -> str:
    try:
        data = embed(payload)
    except ValueError:  # a NaN or an infinity somewhere; walking every value only then (0.2 s at 700 units)
        data = embed(_finite(payload))
    return _template().render(title=payload["title"], data=data)


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
    write_atomic(path, render(payload))
    return path


def write_view(run_dir: Path, extra_sections: dict[str, Any] | None = None) -> Path:
    """Write ``<run_dir>/view.html`` from the run's files (also for a partial run)."""
    run_dir = Path(run_dir)
    return write_page(run_dir / VIEW_FILE, run_payload(run_dir, extra_sections))
