"""The ATAD benchmark file: one JSON line per generated item (final and base problems, all metadata).

Every line carries ``item_status`` (finalized / discarded) and, for finalized
items, ``acceptance`` (student_failed / student_loop_cap / escalation_rejected):
consumers filter on them. ``answer`` is the 1-based number of the anomalous
sentence or choice, or the T2 boolean ``coherent``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from dyneval.nodes.atad.problems import gold, problem_key, structure_errors
from dyneval.state.atad import ACCEPTANCE_TEXT, TASK_IDS, TASKS
from dyneval.stores.inputs import FieldMap, Scalar, iter_records

CANONICAL = ("id", "task", "item_status", "problem", "base_problem")


def earlier_copy(kept: dict[str, str], item_id: str, task: str, problem: dict[str, Any]) -> str | None:
    """The id of the problem in ``kept`` (problem key -> id) identical to ``problem`` after normalizing whitespace
    and case (:func:`nodes.atad.problems.problem_key`); ``None`` when there is none, and ``problem`` is then kept
    under ``item_id``. A benchmark holds each problem once: Table 1 (seed 003, section 4) counts distinct problems."""
    first = kept.setdefault(problem_key(task, problem), item_id)
    return None if first == item_id else first


def item_record(
    unit_id: str,
    state: dict[str, Any],
    *,
    levels: list[tuple[str, int]],
    orchestrator: bool,
    generator: dict[str, str],
    duplicate_of: str | None = None,
) -> dict[str, Any]:
    """The benchmark record of one finished generation thread; a final problem that repeats an earlier item's
    (``duplicate_of``) is refused: the item is discarded, says which item it copies, and keeps its history."""
    task = state["task"]
    finalized = state.get("status") == "finalized" and duplicate_of is None
    final, base = state.get("current"), state.get("base")
    level = state.get("current_level", 0) if finalized else None
    history = state.get("history") or []
    difficulty = levels[min(level, len(levels) - 1)][0] if level is not None else None
    return {
        "id": unit_id,
        "task": task,
        "task_name": TASKS[task].name,
        "topic": state.get("topic"),
        "challenge": state.get("challenge"),
        "style": state.get("style"),
        "item_status": state.get("status") if duplicate_of is None else "discarded",
        "acceptance": state.get("acceptance") if finalized else None,
        "acceptance_text": ACCEPTANCE_TEXT.get(state.get("acceptance") or "") if finalized else None,
        "difficulty": difficulty,
        "level": level,
        "student_loops": state.get("student_loops", 0),
        "student_successes": state.get("successes", 0),
        "problem": final if finalized else None,
        "answer": gold(task, final) if finalized and final else None,
        "base_problem": base,
        "base_answer": gold(task, base) if base else None,
        "base_difficulty": levels[0][0] if base else None,
        "problem_meta": {
            "source": state.get("style"),
            "topic": state.get("topic"),
            "anomaly_type": state.get("challenge"),
            "difficulty": difficulty,
        },
        "orchestrator": orchestrator,
        "generator": generator,
        "teacher_attempts": sum(1 for e in history if e.get("step") == "generate"),
        "validations": [e for e in history if e.get("step") == "validate"],
        "discard_reason": state.get("discard_reason")
        if duplicate_of is None
        else f"duplicate: the same problem as {duplicate_of} (whitespace and case aside)",
        **({"duplicate_of": duplicate_of} if duplicate_of else {}),
        "history": history,
    }


def write_benchmark(path: Path, items: list[dict[str, Any]]) -> Path:
    """Write (replace) the benchmark file atomically; items in the given order."""
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)
    return path


class RawItem(BaseModel):
    """The fields of a benchmark record the evaluation reads, typed (``--fields`` renames them)."""

    id: Scalar
    task: Scalar
    item_status: Literal["finalized", "discarded"]
    problem: dict[str, Any] | None = None
    base_problem: dict[str, Any] | None = None


def load_benchmark(path: str | Path, fields: str | None = None) -> list[dict[str, Any]]:
    """Read and check a benchmark file (JSONL, JSON, CSV or TSV through :mod:`stores.inputs`): every item of
    :func:`benchmark_items`."""
    return list(benchmark_items(path, fields))


def benchmark_items(path: str | Path, fields: str | None = None) -> Iterator[dict[str, Any]]:
    """The items of a benchmark file, checked, an item at a time (a caller that keeps part of each never holds the
    file whole).

    ``fields`` (``--fields id=item_id,task=type``) maps the names ``id``, ``task``, ``item_status``, ``problem``
    and ``base_problem``; each item is returned with every field of its record, the mapped ones under their
    canonical names. Bad input raises :class:`InputError` naming file, record and field.
    """
    mapping = FieldMap.parse(fields, CANONICAL)
    seen: set[str] = set()
    for rec in iter_records(path, flag="--benchmark"):
        raw = mapping.validate(RawItem, rec)
        if raw.task not in TASK_IDS:
            raise mapping.error(rec, "task", f"unknown task {raw.task!r}; use one of {', '.join(TASK_IDS)}")
        if raw.id in seen:
            raise mapping.error(rec, "id", f"duplicate id {raw.id!r}")
        seen.add(raw.id)
        if raw.item_status == "finalized":
            for key in ("problem", "base_problem"):
                problem = getattr(raw, key)
                if problem is None:
                    raise mapping.missing(rec, key, "a finalized item needs its problem")
                errors = structure_errors(raw.task, problem)
                if errors:
                    raise mapping.error(rec, key, f"malformed problem: {errors[0]}")
        yield {**rec.data, **raw.model_dump()}
