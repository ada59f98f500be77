"""Three verdict outcomes, shared by every protocol: correct, wrong, ungraded.

``ungraded`` means the judge or grader gave no usable verdict after the call layer's retries and its one
repair. It never counts for or against the target: rates are taken over graded verdicts only, and each
rate carries its denominator and its ungraded count (:func:`rate`). A unit holding an ungraded verdict is
recorded with status ``ungraded`` and re-judged on resume (``runtime.protocol.Protocol.ungraded``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

Outcome = Literal["correct", "wrong", "ungraded"]


def outcome(correct: bool | None) -> Outcome:
    """``correct`` / ``wrong`` for a graded verdict, ``ungraded`` for ``None``."""
    if correct is None:
        return "ungraded"
    return "correct" if correct else "wrong"


def is_ungraded(item: dict[str, Any] | None) -> bool:
    return item is not None and item.get("verdict") == "ungraded"


def graded_correct(item: dict[str, Any]) -> bool | None:
    """A graded answer's ``correct``, None for an ungraded one."""
    return None if is_ungraded(item) else bool(item.get("correct"))


def rate(values: Iterable[float | bool | None]) -> dict[str, Any]:
    """Mean of the graded values (``None`` = ungraded) with its denominator ``n`` and the ``ungraded`` count.

    ``value`` is ``None`` when nothing was graded: no number is shown that was not computed.
    """
    graded, ungraded = [], 0
    for v in values:
        if v is None:
            ungraded += 1
        else:
            graded.append(float(v))
    return {"value": sum(graded) / len(graded) if graded else None, "n": len(graded), "ungraded": ungraded}


def show(r: dict[str, Any] | None, fmt: str = "{:.3f}") -> str:
    """A rate for a report cell: ``0.667 (n=3, 1 ungraded)``; ``n/a`` when nothing was graded."""
    if not r:
        return ""
    value = "n/a" if r.get("value") is None else fmt.format(r["value"])
    extra = f", {r['ungraded']} ungraded" if r.get("ungraded") else ""
    return f"{value} (n={r.get('n', 0)}{extra})"
