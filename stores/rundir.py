"""The one reader of run directories: a finished (or partial) run's configuration, plan, records, events and summary.

A run folder (``<out>/<run-id>/``, written by :mod:`runtime.runner`) holds ``config.json`` (the resolved
configuration, no secrets), ``units.jsonl`` (the plan: one line per unit with its id, input and meta),
``results.jsonl`` (a record per unit as it ends; a resumed unit's newer record comes after its older one),
``events.jsonl`` (every LLM exchange) and, once the run ended or was interrupted, ``summary.json``; an LLMEval-3
run also ``judged_answers.jsonl`` (:data:`JUDGED`: its sessions' judged answers, copied from its question bank).
The viewer, the run index, ``--compare``, ``--export``, ``--rescore``, ``--detect`` and JudgeAgent's IRT
calibration read runs only through :class:`RunDir`.

Every file is checked as it is read against what a run writes (:mod:`stores.runfiles`): a file that is not JSON,
not an object, or holds a field the readers use with another type raises :class:`DamagedRun`, one line naming the
file, the line and the field; a reader never crashes on a foreign or damaged folder. A last line of a JSONL file
that is not a whole record and has no newline was cut by a kill and is skipped, as the runner's resume drops it
(:func:`stores.files.drop_torn_tail`); any other line that is not a record is damage. Reading is bounded:
``config.json`` and ``summary.json`` are read only up to :data:`MAX_JSON_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.runfiles import (
    ConfigFile,
    Exchange,
    JudgedSession,
    Read,
    SummaryFile,
    plan_model,
    record_model,
)

CONFIG, PLAN, RESULTS, EVENTS, SUMMARY = "config.json", "units.jsonl", "results.jsonl", "events.jsonl", "summary.json"
#: An LLMEval-3 run's sessions' judged answers (question, reference, answer, stars, reason), one line per session,
#: so its answers can be reviewed and its stars calibrated from the run folder alone.
JUDGED = "judged_answers.jsonl"
#: The status of a planned unit without a record (a partial run).
NOT_FINISHED = "not finished"
#: The largest ``config.json`` or ``summary.json`` read: a run writes a few kB (a summary grows with the units
#: only through the ids it lists), so a bigger file is no run's and is refused without being parsed.
MAX_JSON_BYTES = 16 << 20

M = TypeVar("M", bound=BaseModel)


class DamagedRun(InputError):
    """A file of a run folder that is not what a run writes: names the file, and the line and field that are
    wrong (the run index notes it on the run's row; every other reader stops with it, exit code 2)."""

    def __init__(
        self, path: Path, problem: str, *, line: int | None = None, field: str | None = None, flag: str | None = None
    ) -> None:
        super().__init__(problem, file=str(path), record=line, field=field, setting=flag)


def _kind(value: Any) -> str:
    """A JSON value's kind, as a person names it."""
    kinds = {list: "list", str: "string", dict: "object", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


#: What a field of a pydantic error type should have been, as a person names it.
_EXPECTED = {
    "dict_type": "an object",
    "model_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
}


def _problem(error: ErrorDetails) -> str:
    """What is wrong with a field, said against what a run writes."""
    if error["type"] in _EXPECTED:
        return f"a {_kind(error['input'])} where a run writes {_EXPECTED[error['type']]}"
    if error["type"] == "missing":
        return "missing: every run writes it"
    if error["type"] == "too_long":
        return f"more than the {error.get('ctx', {}).get('max_length')} entries a run writes"
    return error["msg"]


def _parsed(path: Path, data: bytes, line: int | None, flag: str | None) -> Any:
    try:
        return json.loads(data.decode("utf-8"))  # as runs write them (json.loads would guess UTF-16 or 32)
    except UnicodeDecodeError as exc:
        raise DamagedRun(
            path, f"not UTF-8 text (byte {data[exc.start]:#04x} at {exc.start})", line=line, flag=flag
        ) from None
    except RecursionError:
        raise DamagedRun(path, "not JSON a run writes (nested too deep)", line=line, flag=flag) from None
    except ValueError as exc:
        raise DamagedRun(path, f"not JSON ({exc})", line=line, flag=flag) from None


def _checked(model: type[M], value: Any, path: Path, line: int | None, flag: str | None) -> M:
    """``value`` as ``model``; :class:`DamagedRun` naming the first field that is wrong."""
    if not isinstance(value, dict):
        raise DamagedRun(path, f"a JSON {_kind(value)}, not an object", line=line, flag=flag)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise DamagedRun(path, _problem(error), line=line, field=".".join(map(str, error["loc"])), flag=flag) from None


def read_json(path: Path, model: type[M], flag: str | None = None) -> M | None:
    """The JSON object file ``path`` checked against ``model``; None when there is no such file. ``flag`` names
    the option that chose the run, in a :class:`DamagedRun`."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedRun(path, f"cannot be read ({exc.strerror})", flag=flag) from None
    if len(data) > MAX_JSON_BYTES:
        raise DamagedRun(path, f"larger than the {MAX_JSON_BYTES >> 20} MB any run writes; not read", flag=flag)
    return _checked(model, _parsed(path, data, None, flag), path, None, flag)


class Jsonl:
    """A JSONL run file read by byte offsets: :meth:`scan` checks each line against ``model`` and notes where each
    record starts, :meth:`read` reads the records back when they are needed, so a page of any size is written in
    bounded memory."""

    def __init__(self, path: Path, model: type[Read], flag: str | None = None) -> None:
        self.path, self.model, self.flag = path, model, flag

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (record for _, record in self.scan())

    def scan(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(offset, record)`` of every record; a last line without its newline that is not JSON is skipped
        (a kill cut it), any other line that is not a record raises :class:`DamagedRun`."""
        offset = 0
        try:
            with self.path.open("rb") as fh:
                for number, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            record = _parsed(self.path, line, number, self.flag)
                        except DamagedRun:
                            if line.endswith(b"\n"):
                                raise
                            return
                        _checked(self.model, record, self.path, number, self.flag)
                        yield offset, record
                    offset += len(line)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise DamagedRun(self.path, f"cannot be read ({exc.strerror})", flag=self.flag) from None

    def read(self, offsets: Iterable[int | None]) -> Iterator[dict[str, Any]]:
        """The records :meth:`scan` found at ``offsets`` (``{}`` for ``None``)."""
        with self.path.open("rb") if self.path.exists() else contextlib.nullcontext() as fh:
            for offset in offsets:
                if offset is None:
                    yield {}
                    continue
                if fh is None:  # scanned, then removed
                    raise DamagedRun(self.path, "was removed while it was read", flag=self.flag)
                fh.seek(offset)
                yield json.loads(fh.readline())


class Units:
    """A run's units, only their places in the run files in memory: the last record of each unit in plan order,
    then records of units not in the plan (:meth:`done`), then the planned units without a record
    (:meth:`unfinished`)."""

    def __init__(self, run: RunDir) -> None:
        self.results, self.plan = run.file(RESULTS), run.file(PLAN)
        self.latest = {r["unit_id"]: offset for offset, r in self.results.scan()}
        self.planned = {u["id"]: offset for offset, u in self.plan.scan()}
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
    """One run folder, read (never written): see the module docstring for its files. ``flag`` names the option
    that chose the run (``--compare``), in a :class:`DamagedRun`."""

    def __init__(self, path: Path | str, flag: str | None = None) -> None:
        self.path, self.flag = Path(path), flag

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
        once when it starts, ``config.json`` again on each resume; 0 when neither can be read."""
        times = []
        for name in (PLAN, CONFIG):
            try:
                times.append((self.path / name).stat().st_mtime_ns)
            except OSError:
                continue
        return min(times, default=0)

    def file(self, name: str) -> Jsonl:
        """``units.jsonl``, ``results.jsonl``, ``events.jsonl`` or ``judged_answers.jsonl``, checked against its model
        (a plan line's and a record's are the run's protocol's)."""
        models = {PLAN: plan_model, RESULTS: record_model}
        model = models[name](self.protocol) if name in models else JudgedSession if name == JUDGED else Exchange
        return Jsonl(self.path / name, model, self.flag)

    def has(self, *names: str) -> bool:
        return all((self.path / n).is_file() for n in names)

    def summary(self) -> SummaryFile | None:
        """``summary.json`` (None while the run has none: running, or killed before its end)."""
        return self._summary

    @cached_property
    def _summary(self) -> SummaryFile | None:
        summary = read_json(self.path / SUMMARY, SummaryFile, self.flag)
        if summary is not None and summary.protocol is not None and summary.protocol != self.protocol:
            raise DamagedRun(
                self.path / SUMMARY,
                f"a summary of {summary.protocol}, but config.json is of a {self.protocol} run",
                field="protocol",
                flag=self.flag,
            )
        return summary

    @cached_property
    def _config(self) -> ConfigFile:
        config = read_json(self.path / CONFIG, ConfigFile, self.flag)
        if config is None:
            raise DamagedRun(self.path / CONFIG, "missing: every run writes it before any unit runs", flag=self.flag)
        return config

    def config(self) -> ConfigFile:
        """``config.json`` as written."""
        return self._config

    def run_config(self) -> RunConfig:
        """``config.json`` as the whole configuration a re-score or JudgeAgent's calibration starts from, every
        field checked (:class:`state.config.RunConfig`)."""
        return _checked(RunConfig, self.config().model_dump(exclude_unset=True), self.path / CONFIG, None, self.flag)

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
        return self.config().protocol


def is_run(path: Path) -> bool:
    """A folder holding a run (its ``config.json``: written before any unit runs); a folder that cannot be looked
    into is listed too, so that its reader says why."""
    try:
        return (path / CONFIG).is_file()
    except OSError:
        return True


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
    """The finished run ``ref`` names (a run folder, or a run id under ``out``), its ``config.json`` and
    ``summary.json`` read; ``InputError`` naming ``flag`` when it holds no ``summary.json``, :class:`DamagedRun`
    when either file is not what a run writes."""
    path = Path(ref) if Path(ref).is_dir() else Path(out) / ref
    run = RunDir(path, flag)
    if run.summary() is None:
        raise InputError(f"no finished run {ref!r} (no summary.json in {path})", setting=flag)
    run.config()  # checked too, before the reader writes anything
    return run
