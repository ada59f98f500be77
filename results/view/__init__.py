"""The single-file viewer of a run (``view.html``), the comparison page of several runs (``--compare``) and the
run index of a folder (``index.html``).

``data`` reads a run directory (through :class:`stores.rundir.RunDir`) into one JSON payload (headline metrics
with their intervals, definitions and denominators, a unit table with the outcome first, every LLM exchange per
unit), ``adapters`` holds each protocol's choices (headline metrics, per-unit numeric outcomes, outcome columns,
detail sections), ``compare`` pairs several runs over their shared units, ``index`` lists the runs of a folder,
``paths`` keeps absolute paths of the machine off the pages, and ``page`` renders
``results/templates/view.html.j2`` with the payload inline, so every page opens from disk with no server and no
network. Model text reaches the page only as JSON data rendered with ``textContent``: it never becomes markup.
"""
