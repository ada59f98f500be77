"""The one reader of run directories: a finished (or partial) run's configuration, plan, records, events and summary.

A run folder (``<out>/<run-id>/``, written by :mod:`runtime.runner`) holds ``config.json`` (the resolved
configuration, no secrets), ``units.jsonl`` (the plan: one line per unit with its id, input and meta),
``results.jsonl`` (a record per unit as it ends; a resumed unit's newer record comes after its older one),
``events.jsonl`` (every LLM exchange) and, once the run ended or was interrupted, ``summary.json``. The viewer, the
run index, ``--compare``, ``--export``, ``--rescore`` and JudgeAgent's IRT calibration read runs only through
:class:`RunDir`; a line of a JSONL file that is not a whole record (cut by a kill) is skipped, as the runner's
resume skips it (:func:`stores.files.read_records`).
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

from dyneval.state.errors import InputError
from dyneval.stores.files import parse_record, read_records

CONFIG, PLAN, RESULTS, EVENTS, SUMMARY = "config.json", "units.jsonl", "results.jsonl", "events.jsonl", "summary.json"
#: The status of a planned unit without a record (a partial run).
NOT_FINISHED = "not finished"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; ``{}`` when there is none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


class Jsonl:
    """A JSONL run file read by byte offsets: :meth:`scan` notes where each record starts, :meth:`read` reads
    records back when they are needed, so a page of any size is written in bounded memory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return read_records(self.path, [])

    def scan(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if not self.path.exists():
            return
        offset = 0
        with self.path.open("rb") as fh:
            for line in fh:
                if line.strip() and (record := parse_record(line)) is not None:
                    yield offset, record
                offset += len(line)

    def read(self, offsets: Iterable[int | None]) -> Iterator[dict[str, Any]]:
        """The records at ``offsets`` (``{}`` for ``None``)."""
        with (self.path.open("rb") if self.path.exists() else contextlib.nullcontext()) as fh:
            for offset in offsets:
                if offset is None:
                    yield {}
                    continue
                fh.seek(offset)
                yield json.loads(fh.readline())


class Units:
    """A run's units, only their places in the run files in memory: the last record of each unit in plan order,
    then records of units not in the plan (:meth:`done`), then the planned units without a record
    (:meth:`unfinished`)."""

    def __init__(self, run: RunDir) -> None:
        self.results, self.plan = run.file(RESULTS), run.file(PLAN)
        self.latest = {r["unit_id"]: offset for offset, r in self.results.scan() if "unit_id" in r}
        self.planned = {u["id"]: offset for offset, u in self.plan.scan() if "id" in u}
        self.ids = [i for i in self.planned if i in self.latest] + [i for i in self.latest if i not in self.planned]
        self.left = [i for i in self.planned if i not in self.latest]

    def done(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(record, plan line)`` of every unit with a record (``{}`` as plan line for a unit not planned)."""
        plan = self.plan.read(self.planned.get(i) for i in self.ids)
        yield from zip(self.results.read(self.latest[i] for i in self.ids), plan)

    def unfinished(self) -> Iterator[dict[str, Any]]:
        """The plan line of every planned unit without a record."""
        return self.plan.read(self.planned[i] for i in self.left)


class RunDir:
    """One run folder, read (never written): see the module docstring for its files."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @property
    def name(self) -> str:
        """The run id."""
        return self.path.name

    @property
    def started(self) -> str | None:
        """The start time the run id begins with (``YYYYmmdd-HHMMSS``, UTC) as ``YYYY-mm-dd HH:MM UTC``; None for a
        folder named otherwise."""
        try:
            return datetime.strptime(self.name[:15], "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            return None

    def written_from(self) -> int:
        """When the run's first file still present was written (ns since the epoch): ``units.jsonl`` is written
        once when it starts, ``config.json`` again on each resume."""
        times = [(self.path / n).stat().st_mtime_ns for n in (PLAN, CONFIG) if (self.path / n).is_file()]
        return min(times, default=0)

    def file(self, name: str) -> Jsonl:
        return Jsonl(self.path / name)

    def has(self, *names: str) -> bool:
        return all((self.path / n).is_file() for n in names)

    def summary(self) -> dict[str, Any]:
        """``summary.json`` (``{}`` while the run has none: running, or killed before its end)."""
        return read_json(self.path / SUMMARY)

    def config(self) -> dict[str, Any]:
        """``config.json`` as written (``{}`` without one)."""
        return read_json(self.path / CONFIG)

    def plan(self) -> Iterator[dict[str, Any]]:
        """The plan's lines (``units.jsonl``)."""
        return iter(self.file(PLAN))

    def records(self) -> list[dict[str, Any]]:
        """The last record of each unit (a resumed run appends a unit's newer record), in plan order, then the
        records of units not in the plan."""
        return [record for record, _ in Units(self).done()]

    def units(self) -> Units:
        return Units(self)

    def events(self) -> Iterator[dict[str, Any]]:
        """Every LLM exchange of the run (``events.jsonl``), in the order logged."""
        return iter(self.file(EVENTS))

    @property
    def protocol(self) -> str:
        return self.summary().get("protocol") or self.config().get("protocol") or ""


def is_run(path: Path) -> bool:
    """A folder holding a run (its ``config.json``: written before any unit runs)."""
    return (path / CONFIG).is_file()


def runs_under(folder: Path) -> list[RunDir]:
    """Every run right under ``folder`` (e.g. ``--out``), oldest first: by the start time its id begins with (to the
    second), then, for runs started in the same second, by when its first file was written (the id's random tail
    says nothing of order)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    runs = [RunDir(p) for p in folder.iterdir() if p.is_dir() and is_run(p)]
    return sorted(runs, key=lambda r: (r.name[:15], r.written_from(), r.name))


def finished_run(ref: str, out: str, flag: str) -> RunDir:
    """The finished run ``ref`` names (a run folder, or a run id under ``out``); ``InputError`` naming ``flag``
    when it holds no ``summary.json``."""
    path = Path(ref) if Path(ref).is_dir() else Path(out) / ref
    run = RunDir(path)
    if not run.has(SUMMARY):
        raise InputError(f"no finished run {ref!r} (no summary.json in {path})", setting=flag)
    return run
