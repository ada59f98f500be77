"""What a run's sessions did on its agent threads, read from its ``events.jsonl``: which agent thread each of our
threads last used, which agent had it, what it was last delivered, the turns it replied to there, and whether its
last turn timed out.

A resumed unit needs it (:mod:`runtime.agents.chat`): an agent that kept its thread gets only what is new
(``continued``), one that lost it gets the conversation so far again (``restarted``), and a thread whose turn timed
out is not sent another (its turn may still have been running, or left its message on the thread without a reply):
the unit goes on on a fresh one; a turn the log holds but the unit's checkpoint does not (a stop between the reply
and the graph step's checkpoint) is taken from the log, not sent again. Its record needs it too
(:meth:`runtime.services.Services.agent_states`): the threads its earlier sessions had turns on are its threads as
much as those of this process.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dyneval.stores.files import parse_record

#: How the agent thread that follows a timed-out one is named: ``RUN_ID/UNIT_ID/restart1``.
RESTART = "/restart"
_RESTARTED = re.compile(re.escape(RESTART) + r"(\d+)$")


@dataclass(frozen=True)
class LoggedTurn:
    """A turn the agent replied to: its request (:func:`request_key`) and the reply's text."""

    request: str
    reply: str


@dataclass(frozen=True)
class PastThread:
    """Our thread's agent thread at the end of the turns logged so far, the agent (its reference) that had them,
    the user messages of the last request delivered on it (None: its last turn timed out), and the turns it
    replied to on that agent thread, in order."""

    agent_thread: str
    agent: str
    delivered: list[str] | None
    turns: tuple[LoggedTurn, ...] = ()


def request_key(humans: list[str], structured: bool) -> str:
    """What identifies a request to an agent thread: its user messages, and whether it asked for a JSON object."""
    return hashlib.sha256(json.dumps([humans, structured], ensure_ascii=False).encode()).hexdigest()


def ours(agent_thread: str) -> str:
    """Our thread id of an agent thread (without its ``/restartN``)."""
    return _RESTARTED.sub("", agent_thread)


def restart_of(agent_thread: str) -> str:
    """The agent thread that follows ``agent_thread`` once a turn on it timed out."""
    found = _RESTARTED.search(agent_thread)
    number = int(found.group(1)) + 1 if found else 1
    return f"{ours(agent_thread)}{RESTART}{number}"


class ThreadHistory:
    """The :class:`PastThread` of every thread of the run ``prefix`` names (``RUN_ID/``) that had an agent turn in
    ``events``, by our thread id and by unit. Each look-up first reads the lines appended since the last one (a
    line still being written is left for the next), so a unit continued in this process, or on another Ray
    runner, finds the turns logged before it, whichever session made them."""

    def __init__(self, events: Path, prefix: str) -> None:
        self.events, self.prefix = events, prefix
        self._read_upto = 0
        self._threads: dict[str, PastThread] = {}
        self._units: dict[str, dict[str, PastThread]] = {}
        self._lock = threading.Lock()

    def thread(self, our_thread: str) -> PastThread | None:
        """Our thread's :class:`PastThread` (None: no agent turn on it is logged)."""
        with self._lock:
            self._read()
            return self._threads.get(our_thread)

    def of_unit(self, unit: str) -> dict[str, PastThread]:
        """Our thread id -> :class:`PastThread` of ``unit``'s threads."""
        with self._lock:
            self._read()
            return dict(self._units.get(unit, {}))

    def _read(self) -> None:
        if not self.events.exists():
            return
        with self.events.open("rb") as fh:
            fh.seek(self._read_upto)
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # still being written: read whole next time
                self._read_upto += len(line)
                if b'"agent"' in line and (event := parse_record(line)) is not None:
                    self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        turn = event.get("agent")
        thread = turn.get("thread_id") if isinstance(turn, dict) else None
        if not isinstance(thread, str) or not thread.startswith(self.prefix):
            return
        agent, error = str(event.get("model")), event.get("error")
        if error is None:
            humans = [m["content"] for m in event.get("messages") or [] if m.get("role") == "human"]
            delivered = [h for h in humans if isinstance(h, str)]
            before = self._threads.get(ours(thread))
            turns = before.turns if before is not None and before.agent_thread == thread else ()
            logged = LoggedTurn(request_key(delivered, isinstance(event.get("output"), dict)), _reply(event["agent"]))
            past = PastThread(thread, agent, delivered, (*turns, logged))
        elif str(error).startswith("AgentTimeout"):
            past = PastThread(thread, agent, None)
        else:
            return
        self._threads[ours(thread)] = past
        self._units.setdefault(str(event.get("unit")), {})[ours(thread)] = past


def _reply(turn: dict[str, Any]) -> str:
    """The reply of a logged turn: the text of the last AI message it emitted with text (as the turn took it)."""
    texts = [m.get("text") or "" for m in turn.get("emitted") or [] if m.get("type") == "ai"]
    return next((t for t in reversed(texts) if t.strip()), "")
