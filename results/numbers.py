"""How a figure reads wherever a person reads it (console summary, reports, leaderboard): a number to three
significant digits and a 95 % interval as ``[low, high]`` or why there is none. A leaf module: the protocols'
declarations (:mod:`results.view.adapters`) and the headline metrics (:mod:`results.headline`) both format with it.
"""

from __future__ import annotations

from typing import Any


def number(x: Any) -> str:
    """Three significant digits for floats (``0.917``, ``14.3``, ``50``); anything else as it is."""
    if isinstance(x, bool) or not isinstance(x, float):
        return str(x)
    return f"{x:.3g}"


def cell(x: Any) -> str:
    """A table cell: ``-`` for no value, a number as :func:`number`, text as it is."""
    return "-" if x is None else number(x)


def interval_text(interval: dict[str, Any] | None) -> str:
    """``[low, high]``, or why there is none."""
    if not interval:
        return "(no interval)"
    if interval.get("low") is None or interval.get("high") is None:
        return f"(no interval: {interval.get('note') or 'too few units'})"
    return f"[{number(interval['low'])}, {number(interval['high'])}]"
