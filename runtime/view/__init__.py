"""The single-file viewer of a run (``view.html``) and the comparison page of several runs (``--compare``).

``data`` reads a run directory into one JSON payload (metrics with definitions and denominators, a unit table,
every LLM exchange per unit), ``adapters`` holds each protocol's choices (headline metrics, per-unit numeric
outcomes, detail sections), ``compare`` pairs several runs over their shared units, and ``page`` renders
``runtime/templates/view.html.j2`` with the payload inline, so the page opens from disk with no server and no
network. Model text reaches the page only as JSON data rendered with ``textContent``: it never becomes markup.
"""

from dyneval.runtime.view.compare import write_compare
from dyneval.runtime.view.page import write_view

__all__ = ["write_compare", "write_view"]
