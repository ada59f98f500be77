"""Per-unit results of a run (``results.jsonl``), appended as units finish.

A line is written only when a unit is final (ok, failed or errored), so a
killed run resumes by skipping exactly the unit ids found here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator


class ResultStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill; that unit is simply redone

    def latest(self) -> dict[str, dict[str, Any]]:
        """The last record of each unit id."""
        return {r["unit_id"]: r for r in self}
