"""The batch runner: pre-flight, concurrent units (one graph thread each), resume,
results, summary and report.

Resume: a unit whose last record in ``results.jsonl`` is final (``ok`` or
``model_error``) is skipped; any other unit continues from its last checkpoint
(or starts, if it never checkpointed). Infrastructure errors are not final: a
resumed run tries those units again.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langgraph.types import Command
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from prompts import load_prompt
from runtime.errors import InfraError, InputError, ModelError
from runtime.events import EventLog, Usage
from runtime.llm import is_endpoint_fault
from runtime.protocol import FINAL_STATUSES, Protocol, Run, Unit
from runtime.report import Heading, Table, Text, write_report
from runtime.services import Services
from state.config import ROLES, RunConfig
from stores.checkpoints import open_checkpointer
from stores.results import ResultStore

SMOKE_TEST_WARNING = (
    "The embedded SmolLM2-135M model is acting as {roles}. It is far too weak to judge other models: "
    "these results only show that the pipeline runs (a smoke test), not how good the target is."
)


def new_run_id(protocol: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{protocol}-{secrets.token_hex(2)}"


def open_run(protocol: Protocol, config: RunConfig, *, run_id: str | None, console: Console,
             chat_overrides: dict[str, Any] | None = None, retry_sleep: Any = None) -> Run:
    """Create (or reopen, for resume) the run directory and its services."""
    resumed = run_id is not None
    run_dir = Path(config.out) / (run_id or new_run_id(protocol.name))
    if resumed and not run_dir.is_dir():
        raise InputError(f"no run directory {run_dir} to resume", field="--resume")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config.masked(), indent=2), encoding="utf-8")
    events = EventLog(run_dir / "events.jsonl")
    events.load_existing()
    services = Services(config=config, run_dir=run_dir, events=events, chat_overrides=chat_overrides or {},
                        retry_sleep=retry_sleep)
    return Run(config=config, run_dir=run_dir, services=services, console=console, resumed=resumed)


def plan_units(protocol: Protocol, run: Run) -> list[Unit]:
    """Units of the run; a resumed run reuses the list written when it started."""
    path = run.run_dir / "units.jsonl"
    if run.resumed and path.exists():
        with path.open(encoding="utf-8") as fh:
            return [Unit(**json.loads(line)) for line in fh if line.strip()]
    units = protocol.plan(run)
    if run.config.limit is not None:
        units = units[: run.config.limit]
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"{protocol.name}: plan produced duplicate unit ids")
    with path.open("w", encoding="utf-8") as fh:
        for u in units:
            fh.write(json.dumps({"id": u.id, "input": u.input, "meta": u.meta}, ensure_ascii=False) + "\n")
    return units


def print_plan(protocol: Protocol, run: Run, units: list[Unit]) -> None:
    table = RichTable(title=f"{protocol.name}: plan")
    table.add_column("role")
    table.add_column("model")
    for role in protocol.roles:
        table.add_row(role, run.services.model_label(role))
    run.console.print(table)
    run.console.print(f"units: {len(units)}   concurrency: {run.config.concurrency}   "
                      f"expected LLM calls per unit: {protocol.expected_calls(run)}")
    for unit in units[:10]:
        run.console.print(f"  {unit.id}  {json.dumps(unit.meta, ensure_ascii=False)[:100]}")
    if len(units) > 10:
        run.console.print(f"  ... and {len(units) - 10} more")


def preflight(protocol: Protocol, run: Run) -> None:
    """One cheap request per distinct model before any real tokens are spent."""
    checked: set[str] = set()
    for role in protocol.roles:
        label = run.services.model_label(role)
        if label in checked:
            continue
        checked.add(label)
        try:
            run.services.llm(role).text(load_prompt("common/ping").render(), step="preflight", max_retries=1)
        except (InfraError, InputError) as exc:
            raise InputError(f"endpoint for role {role} ({label}) does not answer: {exc}") from None


def warn_if_smoke_test(protocol: Protocol, run: Run) -> str | None:
    roles = [r for r in run.config.embedded_judges() if r in protocol.roles and r not in run.services.chat_overrides]
    if not roles:
        return None
    text = SMOKE_TEST_WARNING.format(roles=", ".join(roles))
    run.console.print(Panel(text, title="smoke test only", style="bold yellow"))
    return text


def run_unit(protocol: Protocol, run: Run, graph: Any, unit: Unit, context: Any) -> dict[str, Any]:
    """Run (or continue) one unit to its end and return its result record."""
    config = {"configurable": {"thread_id": unit.id}, "recursion_limit": 200}
    started = time.perf_counter()
    record: dict[str, Any] = {"unit_id": unit.id, "meta": unit.meta}
    try:
        snapshot = graph.get_state(config)
        if snapshot.next:
            payload: Any = None  # continue from the last checkpoint
        elif snapshot.values:
            payload = "done"  # finished earlier; only its record was missing
        else:
            payload = unit.input
        while payload != "done":
            graph.invoke(payload, config, context=context)
            snapshot = graph.get_state(config)
            pending = [i for task in snapshot.tasks for i in task.interrupts]
            if not pending:
                break
            payload = Command(resume=protocol.on_interrupt(run, unit, pending[0].value))
        record.update(status="ok", **protocol.result(unit, dict(graph.get_state(config).values)))
    except ModelError as exc:
        record.update(status="model_error", error=str(exc))
    except InfraError as exc:
        record.update(status="infra_error", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a failed unit is recorded and the run goes on
        status = "infra_error" if is_endpoint_fault(exc) else "error"
        record.update(status=status, error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc(limit=6))
    record["wall_s"] = round(time.perf_counter() - started, 3)
    record["usage"] = run.services.events.usage(unit.id).as_dict()
    return record


def execute(protocol: Protocol, run: Run, *, dry_run: bool = False, skip_preflight: bool = False) -> dict[str, Any]:
    """Run every unfinished unit concurrently, then write summary.json and the report."""
    if protocol.custom_run(run):
        return {}
    units = plan_units(protocol, run)
    if dry_run:
        print_plan(protocol, run, units)
        return {}
    warning = warn_if_smoke_test(protocol, run)
    if not skip_preflight:
        preflight(protocol, run)
    protocol.prepare(run, units)
    results = ResultStore(run.run_dir / "results.jsonl")
    finished = {uid for uid, r in results.latest().items() if r.get("status") in FINAL_STATUSES}
    todo = [u for u in units if u.id not in finished]
    context = protocol.context(run)
    wall_started = time.perf_counter()
    with open_checkpointer(run.run_dir, run.config.stores.postgres_dsn) as saver:
        graph = protocol.builder().compile(checkpointer=saver, name=protocol.name)
        _run_all(protocol, run, graph, todo, context, results, already=len(units) - len(todo))
    records = [r for uid, r in results.latest().items() if uid in {u.id for u in units}]
    summary = build_summary(protocol, run, records, wall_s=time.perf_counter() - wall_started, warning=warning)
    (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    blocks = [*header_blocks(protocol, run, summary, warning, records), *protocol.report(run, summary, records)]
    write_report(run.run_dir, f"{protocol.name} run {run.run_dir.name}", blocks)
    print_summary(run, summary)
    return summary


def _run_all(protocol: Protocol, run: Run, graph: Any, todo: list[Unit], context: Any, results: ResultStore,
             already: int) -> None:
    lock = threading.Lock()
    cost = Usage()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=run.console,
                  transient=False) as progress:
        task = progress.add_task(protocol.name, total=len(todo) + already, completed=already, status="")
        with ThreadPoolExecutor(max_workers=run.config.concurrency, thread_name_prefix="unit") as pool:
            futures = {pool.submit(run_unit, protocol, run, graph, u, context): u for u in todo}
            for fut in as_completed(futures):
                record = fut.result()
                results.append(record)
                with lock:
                    u = record["usage"]
                    cost.add(Usage(u["calls"], u["failed_calls"], u["prompt_tokens"], u["completion_tokens"]))
                    status = (f"{record['unit_id']}: {record['status']}  "
                              f"calls {cost.calls}  tokens {cost.prompt_tokens + cost.completion_tokens}")
                progress.update(task, advance=1, status=status)
                if record["status"] not in FINAL_STATUSES:
                    run.console.print(f"[red]{record['unit_id']} {record['status']}: {record.get('error')}")


def build_summary(protocol: Protocol, run: Run, records: list[dict[str, Any]], *, wall_s: float,
                  warning: str | None) -> dict[str, Any]:
    """Generic run figures plus the protocol's metrics.

    ``usage`` counts every call of the run (pre-flight and preparation included,
    earlier sessions of a resumed run too); ``per_unit`` averages the units' own.
    """
    counts: dict[str, int] = {}
    units = Usage()
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        u = r.get("usage") or {}
        units.add(Usage(u.get("calls", 0), u.get("failed_calls", 0), u.get("prompt_tokens", 0),
                        u.get("completion_tokens", 0), u.get("llm_seconds", 0.0)))
    n = max(1, len(records))
    unit_wall = sum(r.get("wall_s", 0.0) for r in records)
    return {
        "run_id": run.run_dir.name,
        "protocol": protocol.name,
        "models": {role: run.services.model_label(role) for role in ROLES if role in protocol.roles},
        "smoke_test_warning": warning,
        "units": len(records),
        "status_counts": counts,
        "usage": run.services.events.total().as_dict(),
        "unit_usage": units.as_dict(),
        "unit_wall_s_total": round(unit_wall, 3),
        "session_wall_s": round(wall_s, 3),
        "per_unit": {
            "calls": round(units.calls / n, 3),
            "tokens": round((units.prompt_tokens + units.completion_tokens) / n, 1),
            "wall_s": round(unit_wall / n, 3),
        },
        "metrics": protocol.summarize(run, records),
    }


def header_blocks(protocol: Protocol, run: Run, summary: dict[str, Any], warning: str | None,
                  records: list[dict[str, Any]]) -> list:
    blocks: list = []
    if warning:
        blocks.append(Text("WARNING: " + warning))
    blocks.append(Table(["role", "model"], [[k, v] for k, v in summary["models"].items()], caption="Models"))
    usage = summary["usage"]
    blocks.append(Table(
        ["units", "statuses", "LLM calls", "prompt tokens", "completion tokens", "LLM seconds", "wall s / unit"],
        [[summary["units"], ", ".join(f"{k}={v}" for k, v in sorted(summary["status_counts"].items())),
          usage["calls"], usage["prompt_tokens"], usage["completion_tokens"], usage["llm_seconds"],
          summary["per_unit"]["wall_s"]]],
        caption="Run"))
    failed = [[r["unit_id"], r["status"], (r.get("error") or "")[:300]] for r in records if r["status"] != "ok"]
    if failed:
        blocks.append(Table(["unit", "status", "reason"], failed, caption="Units that did not finish"))
    blocks.append(Heading(protocol.description))
    return blocks


def print_summary(run: Run, summary: dict[str, Any]) -> None:
    table = RichTable(title=f"{summary['protocol']} summary")
    table.add_column("metric")
    table.add_column("value")
    table.add_row("units", str(summary["units"]))
    table.add_row("statuses", ", ".join(f"{k}={v}" for k, v in sorted(summary["status_counts"].items())))
    table.add_row("LLM calls", str(summary["usage"]["calls"]))
    table.add_row("tokens", str(summary["usage"]["prompt_tokens"] + summary["usage"]["completion_tokens"]))
    rows = _flat(summary["metrics"])
    for key, value in rows[:_CONSOLE_METRICS]:
        table.add_row(key, value)
    if len(rows) > _CONSOLE_METRICS:
        table.add_row("...", f"{len(rows) - _CONSOLE_METRICS} more in summary.json and the report")
    run.console.print(table)
    run.console.print(f"run directory: [bold]{run.run_dir}[/]  (report: {run.run_dir / 'report.md'})")


_CONSOLE_METRICS = 24  # rows of flattened metrics printed on the console


def _flat(metrics: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(_flat(value, name + "."))
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            rows.append((name, f"{value:.4g}" if isinstance(value, float) else str(value)))
    return rows
