"""A run's summary (``summary.json``) and the report's header blocks, built from the unit records and the event
log: generic run figures (statuses, usage per role, wall times) plus the protocol's metrics."""

from __future__ import annotations

from typing import Any

from dyneval.results.headline import declared_intervals
from dyneval.results.rescore import report_text as rescore_text
from dyneval.results.rescore import summary_fields as rescore_fields
from dyneval.results.state_checks import state_check_metrics
from dyneval.results.trials import trial_metrics
from dyneval.runtime.events import Usage, usd
from dyneval.runtime.protocol import Protocol, Run
from dyneval.runtime.trials import first_trials
from dyneval.state.blocks import Heading, Table, Text
from dyneval.state.config import ROLES

#: The status counted for a planned unit that has no record when its run ended (not stopped).
MISSING = "missing"


def _models_called(protocol: Protocol, run: Run) -> dict[str, str]:
    """Role -> model: the protocol's roles as configured, then every other role the run called (e.g. the models
    ATAD's evaluation answers with, logged as ``student``); several models of one role are listed by name."""
    called_roles = protocol.roles_in(run)
    models: dict[str, str] = {role: run.services.model_label(role) for role in ROLES if role in called_roles}
    for role, called in run.services.events.models_by_role().items():
        if role not in models:
            models[role] = ", ".join(sorted(called))
    return models


def build_summary(
    protocol: Protocol,
    run: Run,
    records: list[dict[str, Any]],
    *,
    wall_s: float,
    warning: str | None,
    interrupted: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    missing: list[str] | None = None,
) -> dict[str, Any]:
    """Generic run figures plus the protocol's metrics.

    ``usage`` counts every call of the run (pre-flight and preparation included,
    earlier sessions of a resumed run too); ``per_unit`` averages the units' own.
    ``interrupted`` (Ctrl-C: unfinished units, resume command) marks a partial
    summary; ``notes`` lists repaired run files (torn lines dropped). ``missing``: planned units of a run that
    ended without a record (the executor lost them), counted under the status ``missing`` and in ``units``, so
    the exit code and every reader see them.
    """
    counts: dict[str, int] = {MISSING: len(missing)} if missing else {}
    units = Usage()
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        units.add(Usage.from_dict(r.get("usage") or {}))
    n = max(1, len(records))
    unit_wall = sum(r.get("wall_s", 0.0) for r in records)
    first = first_trials(records)  # the protocol's own metrics: as a run without --trials gives them
    metrics = protocol.summarize(run, first)  # first: its own calls (interview's summary) count in usage
    metrics = declared_intervals(protocol.viewer, metrics, first)
    extra = [
        trial_metrics(protocol, records, run.config.trials) if run.config.trials > 1 else {},
        state_check_metrics(records, run.config.state_check) if run.config.state_check else {},
    ]
    for found in extra:
        for key, value in found.items():
            if key in ("intervals", "separable"):
                metrics.setdefault(key, {}).update(value)
            else:
                metrics[key] = value
    return {
        "run_id": run.run_dir.name,
        "protocol": protocol.name,
        "models": _models_called(protocol, run),
        "smoke_test_warning": warning,
        "units": len(records) + len(missing or []),
        **({"missing_units": missing} if missing else {}),
        "status_counts": counts,
        "ungraded_verdicts": sum(r.get("ungraded_verdicts") or 0 for r in records),
        "interrupted": interrupted,
        "file_notes": notes or [],
        "usage": run.services.events.total().as_dict(),
        "usage_by_role": {role: u.as_dict() for role, u in run.services.events.by_role().items()},
        "unit_usage": units.as_dict(),
        "unit_wall_s_total": round(unit_wall, 3),
        "session_wall_s": round(wall_s, 3),
        "per_unit": {
            "calls": round(units.calls / n, 3),
            "tokens": round((units.prompt_tokens + units.completion_tokens) / n, 1),
            "wall_s": round(unit_wall / n, 3),
        },
        "metrics": metrics,
        **rescore_fields(protocol, run.config, records),
    }


def header_blocks(
    protocol: Protocol, run: Run, summary: dict[str, Any], warning: str | None, records: list[dict[str, Any]]
) -> list:
    blocks: list = []
    if warning:
        blocks.append(Text("WARNING: " + warning))
    if summary.get("interrupted"):
        stopped = summary["interrupted"]
        cause = f"the budget is spent: {stopped['budget']}" if stopped.get("budget") else "Ctrl-C"
        head = "TERMINATED (SIGTERM)" if stopped.get("signal") == "SIGTERM" else f"INTERRUPTED ({cause})"
        blocks.append(
            Text(
                f"{head}: a partial report; {stopped['unfinished_units']} units are not "
                f"finished. Continue with: {stopped['resume']}"
            )
        )
    if rescored := rescore_text(summary):
        blocks.append(Text(rescored))
    if run.config.trials > 1:
        blocks.append(
            Text(
                f"--trials {run.config.trials}: every planned unit ran {run.config.trials} times, each trial a "
                "unit of its own on fresh threads. The protocol's metrics are those of the first trials (what a run "
                "without --trials gives); pass^k and the flip rate, among the headline metrics, count every trial."
            )
        )
    for note in summary.get("file_notes") or []:
        blocks.append(Text("Repaired run file: " + note))
    blocks.append(Table(["role", "model"], [[k, v] for k, v in summary["models"].items()], caption="Models"))
    usage = summary["usage"]
    blocks.append(
        Table(
            [
                "units",
                "statuses",
                "LLM calls",
                "prompt tokens",
                "completion tokens",
                "cost",
                "LLM seconds",
                "wall s / unit",
            ],
            [
                [
                    summary["units"],
                    ", ".join(f"{k}={v}" for k, v in sorted(summary["status_counts"].items())),
                    usage["calls"],
                    usage["prompt_tokens"],
                    usage["completion_tokens"],
                    usd(usage),
                    usage["llm_seconds"],
                    summary["per_unit"]["wall_s"],
                ]
            ],
            caption="Run",
        )
    )
    if usage["cache_hits"]:
        blocks.append(
            Text(
                f"Response cache: {usage['cache_hits']} replies reused, {usage['tokens_saved_by_cache']} "
                f"tokens and {usd(usage, 'cost_saved_by_cache_usd')} saved."
            )
        )
    blocks.append(
        Table(
            [
                "role",
                "calls",
                "failed attempts",
                "retries",
                "retry tokens",
                "retry cost",
                "prompt tokens",
                "completion tokens",
                "cost",
                "cache hits",
            ],
            [
                [
                    role,
                    u["calls"],
                    u["failed_calls"],
                    u["retries"],
                    u["retry_tokens"],
                    usd(u, "retry_cost_usd"),
                    u["prompt_tokens"],
                    u["completion_tokens"],
                    usd(u),
                    u["cache_hits"],
                ]
                for role, u in (summary.get("usage_by_role") or {}).items()
            ],
            caption="Calls per role. Failed attempts: requests the endpoint failed (errors, timeouts; retried or not), "
            "which report no tokens. Retries: requests sent only because an earlier one failed (a retry after "
            "a failed attempt, or a repair of a malformed structured reply), with their tokens and cost; all "
            "are included in calls, tokens and cost",
        )
    )
    failed = [
        [r["unit_id"], r["status"], (r.get("error") or "")[:300]]
        for r in records
        if r["status"] not in ("ok", "ungraded")
    ]
    if failed:
        blocks.append(Table(["unit", "status", "reason"], failed, caption="Units that did not finish"))
    ungraded = [[r["unit_id"], r["ungraded_verdicts"]] for r in records if r["status"] == "ungraded"]
    if ungraded:
        blocks.append(
            Table(
                ["unit", "ungraded verdicts"],
                ungraded,
                caption="Units with ungraded verdicts (a judge failed); resume re-judges them",
            )
        )
    blocks.append(Heading(protocol.description))
    return blocks
