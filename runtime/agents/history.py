"""What earlier sessions of a run did on its agent threads, read from its ``events.jsonl``: which agent thread each
of our threads last used, what it was last delivered, and whether its last turn timed out.

A resumed unit needs it (:mod:`runtime.agents.chat`): an agent that kept its thread gets only what is new
(``continued``), one that lost it gets the conversation so far again (``restarted``), and a thread whose turn timed
out is not sent another (its turn may still have been running, or left its message on the thread without a reply):
the unit goes on on a fresh one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dyneval.stores.files import parse_record

#: How the agent thread that follows a timed-out one is named: ``RUN_ID/UNIT_ID/restart1``.
RESTART = "/restart"
_RESTARTED = re.compile(re.escape(RESTART) + r"(\d+)$")


@dataclass(frozen=True)
class PastThread:
    """Our thread's agent thread at the end of the earlier sessions, with the user messages of the last request
    delivered on it (None: its last turn timed out)."""

    agent_thread: str
    delivered: list[str] | None


def ours(agent_thread: str) -> str:
    """Our thread id of an agent thread (without its ``/restartN``)."""
    return _RESTARTED.sub("", agent_thread)


def restart_of(agent_thread: str) -> str:
    """The agent thread that follows ``agent_thread`` once a turn on it timed out."""
    found = _RESTARTED.search(agent_thread)
    number = int(found.group(1)) + 1 if found else 1
    return f"{ours(agent_thread)}{RESTART}{number}"


def past_threads(events: Path, prefix: str) -> dict[str, PastThread]:
    """Our thread id -> its :class:`PastThread`, for the threads of the run ``prefix`` names (``RUN_ID/``) that had
    an agent turn in ``events`` (missing: none)."""
    found: dict[str, PastThread] = {}
    if not events.exists():
        return found
    with events.open("rb") as fh:
        for line in fh:
            if b'"agent"' not in line or (event := parse_record(line)) is None:
                continue
            turn = event.get("agent")
            thread = turn.get("thread_id") if isinstance(turn, dict) else None
            if not isinstance(thread, str) or not thread.startswith(prefix):
                continue
            if event.get("error") is None:
                humans = [m["content"] for m in event.get("messages") or [] if m.get("role") == "human"]
                found[ours(thread)] = PastThread(thread, [h for h in humans if isinstance(h, str)])
            elif str(event["error"]).startswith("AgentTimeout"):
                found[ours(thread)] = PastThread(thread, None)
    return found
