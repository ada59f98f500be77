"""An agent target's reference: ``graph:MODULE:ATTR``, ``graph:path/to/app.py:ATTR`` (the two forms
``langgraph.json`` accepts), ``langgraph:URL[#ASSISTANT]`` (a deployed graph: LangGraph Server, ``langgraph dev``)
or ``app:NAME`` (an app handed to the Python API), with per-agent options after ``?`` (for a URL, before its
``#ASSISTANT``).

Only the form is checked here; :mod:`runtime.agents.reference` imports what a reference names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast
from urllib.parse import parse_qsl, urlsplit

AGENT_PREFIXES = ("graph:", "langgraph:", "app:")
SYSTEM_CHOICES = ("preamble", "none")


@dataclass(frozen=True)
class AgentRef:
    """What a reference names and how the agent is driven.

    ``system``: our interviewee/examinee system prompt goes as a preamble of the thread's first user message
    (``preamble``, the default) or is not sent (``none``); ``timeout_s`` bounds one turn; ``recursion_limit`` is
    the LangGraph step limit of one turn of a graph.
    """

    ref: str
    kind: Literal["graph", "langgraph", "app"]
    #: The module or file (``graph``), the server's URL (``langgraph``), the registered name (``app``).
    target: str
    #: The graph's attribute (``graph``), the assistant or graph id, ``""`` = the server's one graph (``langgraph``).
    attr: str
    system: Literal["preamble", "none"] = "preamble"
    timeout_s: float = 300.0
    recursion_limit: int = 25


def is_agent_ref(ref: str) -> bool:
    return ref.startswith(AGENT_PREFIXES)


def parse_agent_ref(ref: str) -> AgentRef:
    """The parts of ``ref``; ``ValueError`` naming what is malformed."""
    kind, _, rest = ref.partition(":")
    body, _, query = rest.partition("?")
    if kind == "langgraph":
        body, _, attr = body.partition("#")
        query, _, fragment = query.partition("#")
        attr = attr or fragment
        url = urlsplit(body)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ValueError(f"malformed agent reference {ref!r}: use langgraph:http(s)://HOST[:PORT][#ASSISTANT]")
        target = body.rstrip("/")
    elif kind == "graph":
        target, colon, attr = body.rpartition(":")
        if not colon or not target or not attr:
            raise ValueError(f"malformed agent reference {ref!r}: use graph:MODULE:ATTR or graph:path/to/app.py:ATTR")
    else:
        target, attr = body, ""
        if not target:
            raise ValueError(f"malformed agent reference {ref!r}: app:NAME needs a NAME")
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key not in ("system", "timeout_s", "recursion_limit"):
            raise ValueError(f"agent reference {ref!r}: unknown option {key!r} (system, timeout_s, recursion_limit)")
        options[key] = value
    system = options.get("system", "preamble")
    if system not in SYSTEM_CHOICES:
        raise ValueError(f"agent reference {ref!r}: system must be preamble or none, not {system!r}")
    try:
        timeout_s = float(options.get("timeout_s", 300.0))
        recursion_limit = int(options.get("recursion_limit", 25))
    except ValueError as exc:
        raise ValueError(f"agent reference {ref!r}: {exc}") from None
    if not timeout_s > 0 or recursion_limit < 1:
        raise ValueError(f"agent reference {ref!r}: timeout_s must be > 0 and recursion_limit >= 1")
    return AgentRef(
        ref=ref,
        kind=cast(Literal["graph", "langgraph", "app"], kind),
        target=target,
        attr=attr,
        system=cast(Literal["preamble", "none"], system),
        timeout_s=timeout_s,
        recursion_limit=recursion_limit,
    )
