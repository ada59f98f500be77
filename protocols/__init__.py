"""The protocols: each keeps its batch logic (units, metrics, report) in its module here, its graph in
``graphs/<name>.py``, and declares what the readers of its runs show as its class's ``viewer``.

The registry of names (``REGISTRY``, with a user's own from ``DYNEVAL_PROTOCOLS``) and :func:`protocol_class` live in
:mod:`runtime.protocol` beside the base class, so that the readers of a run (``results``) find any protocol's
declarations by name; this module lists the protocols that can be loaded.
"""

from __future__ import annotations

from dyneval.runtime.protocol import REGISTRY, Protocol, protocol_class
from dyneval.state.errors import InputError


def available() -> dict[str, type[Protocol]]:
    """Protocols whose module exists (others are still being built)."""
    found = {}
    for name in REGISTRY:
        try:
            found[name] = protocol_class(name)
        except InputError:
            continue
    return found
