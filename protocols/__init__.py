"""Protocol registry: name -> the :class:`runtime.protocol.Protocol` subclass that runs it.

Each protocol keeps its batch logic (units, metrics, report) in its module here;
its graph lives in ``graphs/<name>.py``.
"""

from __future__ import annotations

import importlib
import os

from dyneval.runtime.protocol import Protocol
from dyneval.state.errors import InputError

#: name -> "module:Class". A user's own protocols join through
#: ``DYNEVAL_PROTOCOLS="name=package.module:Class,other=..."``.
REGISTRY: dict[str, str] = {
    "atad": "dyneval.protocols.atad:AtadProtocol",
    "judgeagent": "dyneval.protocols.judgeagent:JudgeAgentProtocol",
    "interview": "dyneval.protocols.interview:InterviewProtocol",
    "llmeval": "dyneval.protocols.llmeval.protocol:LLMEvalProtocol",
    "judgecheck": "dyneval.protocols.judgecheck:JudgeCheckProtocol",
}
for _entry in filter(None, os.environ.get("DYNEVAL_PROTOCOLS", "").split(",")):
    _name, _, _target = _entry.partition("=")
    REGISTRY[_name.strip()] = _target.strip()


def available() -> dict[str, type[Protocol]]:
    """Protocols whose module exists (others are still being built)."""
    found = {}
    for name in REGISTRY:
        try:
            found[name] = protocol_class(name)
        except InputError:
            continue
    return found


def protocol_class(name: str) -> type[Protocol]:
    if name not in REGISTRY:
        raise InputError(f"unknown protocol {name!r}; choose one of {', '.join(REGISTRY)}", field="--protocol")
    module_name, _, cls_name = REGISTRY[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InputError(f"protocol {name!r} is not implemented yet", field="--protocol") from None
        raise
    return getattr(module, cls_name)
