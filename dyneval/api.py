"""The Python API: :func:`evaluate` runs a protocol as the ``dyneval`` command does and returns a :class:`RunResult`.

from dyneval import evaluate
result = evaluate("atad", evaluate_models=["local"], benchmark="...")
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from dyneval.cli import build_parser, start
from dyneval.protocols import protocol_class
from dyneval.runtime.stop import RunInterrupted
from dyneval.state.errors import InputError

if typing.TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class RunResult:
    """What :func:`evaluate` returns: the run's folder, its summary (``summary.json``) and its unit records
    (``results.jsonl``, one per unit in plan order)."""

    run_dir: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def metrics(self) -> dict[str, Any]:
        """The protocol's metrics (``summary["metrics"]``; a mode without units, such as llmeval's
        ``leaderboard=True``, has its figures in ``summary`` itself)."""
        return self.summary.get("metrics", {})

    @property
    def stopped(self) -> dict[str, Any] | None:
        """Why the run stopped before its end (``budget``: what was spent) and how to resume it; ``None`` if it
        ended."""
        return self.summary.get("interrupted")

    def to_pandas(self, table: typing.Literal["units", "items"] = "units") -> pandas.DataFrame:
        """The run's ``units`` (one row per unit) or ``items`` (one row per per-item result, with its ``unit_id``)
        as a DataFrame, flattened as ``dyneval --export`` writes them (:func:`results.export.tables`).
        Needs pandas (the ``[pandas]`` extra)."""
        try:
            import pandas
        except ImportError:
            raise InputError("RunResult.to_pandas() needs pandas: pip install 'dyneval[pandas]'") from None
        from dyneval.results.export import tables
        from dyneval.stores.rundir import RunDir

        if table not in ("units", "items"):
            raise InputError(f"table {table!r} is not one of units, items", setting="table")
        return pandas.DataFrame(tables(RunDir(self.run_dir).protocol, self.records)[table])

    @classmethod
    def read(cls, run_dir: Path) -> RunResult:
        """The results in ``run_dir`` (no records for a mode without units)."""
        from dyneval.stores.rundir import RunDir

        run = RunDir(run_dir)
        summary = run.summary()
        return cls(run_dir, summary.model_dump(exclude_unset=True) if summary else {}, run.records())


def evaluate(protocol: str, *, quiet: bool = True, **options: Any) -> RunResult:
    """Run ``protocol`` from Python, as ``run.py --protocol PROTOCOL`` with the same options, and return its results.

    ``options`` are the command-line options by their Python names: the roles (``target=``, ``evaluator=`` ...,
    each ``local``, a config name, ``MODEL@BASE_URL``, ``graph:MODULE:ATTR``, or an agent object: a compiled graph
    or an app ``app(message, *, thread_id) -> dict | list[dict]``, sync or async, docs/agents.md), ``config=``,
    ``out=``, ``limit=``, ``concurrency=``,
    ``seed=``, ``max_calls=``, ``max_tokens=``, ``max_cost=``, ``max_tokens_per_role="evaluator=1000"``,
    ``pricing=``, ``cache=``, ``resume=RUN_ID``, ``rescore=RUN_ID``, ``skip_preflight=``, ``executor="ray"`` with
    ``postgres_dsn=`` and ``ray_address=`` ..., and the protocol's own parameters (``repeats=2``,
    ``data="seeds.jsonl"``). Bad input raises ``state.errors.InputError`` before anything
    is spent; a run its budget stopped is returned (``result.stopped``); Ctrl-C raises ``KeyboardInterrupt`` after
    the partial report. ``quiet=False`` prints the progress and summary as the command line does.
    """
    parser, dests = build_parser(protocol)
    known = {
        k: v for k, v in vars(parser.parse_args(["--protocol", protocol])).items() if k not in ("protocol", "dry_run")
    }  # every option by name, with its "not given" default
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(unknown)} of {protocol}; options: {', '.join(sorted(known))}")
    lists = {o.name for o in protocol_class(protocol).options() if typing.get_origin(o.type) is list}
    options = {k: [v] if k in lists and isinstance(v, str) else v for k, v in options.items()}  # one file: a list
    options = {k: _agents_named(v) for k, v in options.items()}
    args = argparse.Namespace(**{**known, **options, "protocol": protocol, "dry_run": False})
    chosen, _, run = start(args, dests, Console(quiet=quiet))
    from dyneval.runtime.runner import execute

    try:
        execute(chosen, run, skip_preflight=args.skip_preflight)
    except RunInterrupted as exc:
        if not exc.budget:
            raise
    return RunResult.read(run.run_dir)


def _agents_named(value: Any) -> Any:
    """An agent object given for a model (a graph, an app) as its ``app:NAME`` reference; lists item by item."""
    from dyneval.runtime.agents.reference import register_app

    if isinstance(value, list):
        return [_agents_named(v) for v in value]
    if callable(value) or hasattr(value, "invoke"):
        return register_app(value)
    return value
