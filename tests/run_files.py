"""Reading a finished run's files in tests: unit records without the fields that vary between runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Timings, clock readings and usage: they differ between two runs that did the same work.
VOLATILE = frozenset({"wall_s", "usage", "llm_seconds", "latency_s", "queue_s", "ts"})


def stripped(value: Any, volatile: frozenset[str] = VOLATILE) -> Any:
    """``value`` without the ``volatile`` keys, at any depth."""
    if isinstance(value, dict):
        return {k: stripped(v, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [stripped(v, volatile) for v in value]
    return value


def unit_records(run_dir: Path, volatile: frozenset[str] = VOLATILE) -> dict[str, dict[str, Any]]:
    """``results.jsonl`` by unit id, without the ``volatile`` keys."""
    lines = (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["unit_id"]: stripped(r, volatile) for r in map(json.loads, lines)}
