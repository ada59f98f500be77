"""``--state-check MODULE:FN`` (or ``path/to/file.py:FN``): a user's check of an agent target's final state, run on
each of a unit's agent threads when the unit ends with results, and recorded beside the protocol's own verdicts.

The contract: ``FN(state, item)``, where ``state`` is the agent's checkpoint values on the thread after its last turn
(a dict: the ``messages`` channel as LangChain messages, in-process or served) and ``item`` the unit's input as its
plan line holds it (``units.jsonl``). It returns the verdict: ``True``/``False``; or ``(passed, reason)``; or a
dict ``{"correct": passed, "reason": text}``. A check that raises, or returns anything else, is ``ungraded`` with
the reason: never a failed check, and never a verdict of the protocol's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dyneval.runtime.agents.history import PastThread, ours
from dyneval.runtime.agents.record import bounded_state
from dyneval.runtime.agents.reference import attribute, load_agent
from dyneval.state.errors import one_line

Check = Callable[[dict[str, Any], dict[str, Any]], Any]
#: What a unit's record holds of an agent target's threads (:func:`agent_fields`).
AGENT_FIELDS = ("agent_threads", "state_checks")


@functools.cache
def load_check(ref: str) -> Check:
    """The function ``ref`` names, imported once per process (a Ray worker imports it by the same reference);
    ``ValueError`` naming what is wrong."""
    named = f"--state-check {ref!r}"
    target, colon, attr = ref.rpartition(":")
    if not colon or not target or not attr:
        raise ValueError(f"{named}: use MODULE:FN or path/to/file.py:FN")
    found = attribute(target, attr, named)
    if not callable(found):
        raise ValueError(f"{named} is a {type(found).__name__}, not a function of (state, item)")
    return found


def verdict(check: Check, state: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """``{"verdict": "correct" | "wrong" | "ungraded", "reason": ...}`` of ``check`` on one thread's state."""
    try:
        result = check(state, item)
    except Exception as exc:  # noqa: BLE001 - the user's check failed: ungraded with its reason, never a verdict
        return {"verdict": "ungraded", "reason": f"the check raised {one_line(exc)}"}
    passed, reason = _parts(result)
    if not isinstance(passed, bool):
        return {
            "verdict": "ungraded",
            "reason": f"the check returned {' '.join(repr(result).split())[:200]}: not a bool, (bool, reason) "
            "or {'correct': bool, 'reason': ...}",
        }
    return {"verdict": "correct" if passed else "wrong", "reason": str(reason or "")}


def _parts(result: Any) -> tuple[Any, Any]:
    if isinstance(result, tuple) and len(result) == 2:
        return result[0], result[1]
    if isinstance(result, dict):
        return result.get("correct"), result.get("reason")
    return result, ""


def earlier_states(past: dict[str, PastThread], states: dict[str, Any]) -> dict[str, Any]:
    """``{agent thread: its state now}`` of the threads in ``past`` (our thread -> what the log says of it) that
    ``states`` (this process's turns, by agent thread) does not cover, read from the agent that had them (``None``:
    it keeps no state we can read, or lost the thread). A thread whose last turn timed out is left out, as in a run
    that was not stopped: the unit went on on a fresh one, or failed."""
    covered = {ours(thread) for thread in states}
    return {p.agent_thread: _state_now(p) for our, p in past.items() if our not in covered and p.delivered is not None}


def _state_now(past: PastThread) -> dict[str, Any] | None:
    try:
        return load_agent(past.agent).state(past.agent_thread)
    except ValueError:  # an app:NAME of an earlier process, which this one cannot load: none we can read
        return None


def agent_fields(states: dict[str, Any], item: dict[str, Any], check: str | None) -> dict[str, Any]:
    """What a unit's record holds of its agent threads: ``agent_threads`` (each thread's final state, bounded)
    and, with a ``check`` (for a unit that ended with results), ``state_checks`` (each thread's verdict)."""
    out: dict[str, Any] = {"agent_threads": {t: bounded_state(s) for t, s in states.items()}}
    if check:
        fn = load_check(check)
        out["state_checks"] = {
            t: verdict(fn, s, item)
            if s is not None
            else {"verdict": "ungraded", "reason": "the agent's state cannot be read"}
            for t, s in states.items()
        }
    return out
