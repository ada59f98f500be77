"""What the benches share that is not a measurement: printing a result table."""

from __future__ import annotations

from typing import Any


def table(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    """``rows`` under ``headers``, each column right-aligned to its widest cell, after ``title``."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))
