"""Per-unit results of a run (``results.jsonl``), appended as units end.

One line per unit end (final, ungraded or failed); the last line of a unit id
is its current record. Opening the store drops a last line a kill cut short
(listed in ``notes``): that unit simply has no record and is run again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dyneval.stores.files import append_line, drop_torn_tail, read_records


class ResultStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.notes: list[str] = [note] if (note := drop_torn_tail(path)) else []

    def append(self, record: dict[str, Any]) -> None:
        with self._lock:
            append_line(self.path, record)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return read_records(self.path, self.notes)

    def latest(self) -> dict[str, dict[str, Any]]:
        """The last record of each unit id, a string repeated in them (keys, statuses ...) one object, and equal
        ``usage`` mappings one mapping (most units make the same calls: 398 distinct in 5,000 ATAD answers), which
        no reader changes: the summary holds every record (2,100 ATAD records at the stand-in: 11 MB, not 26 MB;
        20,000: 31 MB, not 41 MB)."""
        strings: dict[str, str] = {}
        usages: dict[tuple[Any, ...], dict[str, Any]] = {}
        out: dict[str, dict[str, Any]] = {}
        for record in self:
            r = _shared(record, strings)
            usage = r.get("usage")
            if isinstance(usage, dict) and all(not isinstance(v, (dict, list)) for v in usage.values()):
                r["usage"] = usages.setdefault(tuple(usage.items()), usage)
            out[r["unit_id"]] = r
        return out


def _shared(value: Any, strings: dict[str, str]) -> Any:
    """``value`` rebuilt with each of its strings taken from (or added to) ``strings``."""
    if isinstance(value, str):
        return strings.setdefault(value, value)
    if isinstance(value, list):
        return [_shared(v, strings) for v in value]
    if isinstance(value, dict):
        return {strings.setdefault(k, k): _shared(v, strings) for k, v in value.items()}
    return value
