"""Re-scoring a finished run with another judge: ``dyneval --protocol P --rescore RUN_ID --evaluator MODEL``.

The re-score is a new run linked to its source (``rescored_from`` in config.json and summary.json). Every unit is
run again through the protocol's graph; the judging roles (``Protocol.judge_roles``) call their (new) models, and
every other role (the target, ATAD's teacher and student, llmeval's reference model) is served only from the
source run's event log by :class:`runtime.replay.ReplayChat`: a request is answered with the source's recorded
reply to the very same messages, so no target request is sent.

Where a protocol's later steps depend on the verdicts (JudgeAgent's difficulty, the interviewer's retries and
follow-ups, ATAD's escalation), a new verdict can lead a unit to a request the source never made. That unit is
not scored on invented answers: the replay raises :class:`ReplayMissing` and the unit ends ``diverged`` (final
for this run, listed in the summary and report as needing a full re-run with the new judge).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dyneval.runtime.protocol import DIVERGED, Protocol
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.rundir import CONFIG, EVENTS, RunDir


def source_dir(protocol: type[Protocol], out: str, run_id: str) -> Path:
    """The source run's folder; ``InputError`` naming ``--rescore`` when the protocol has no judging role to ask
    again or there is no run there, :class:`stores.rundir.DamagedRun` when its ``config.json`` is not a run's."""
    if not protocol.judge_roles:
        raise InputError(
            f"{protocol.name} has no stored target answers to re-judge (every role judges); start a new run instead",
            field="--rescore",
        )
    source = RunDir(Path(out) / run_id, "--rescore")
    if not source.has(CONFIG, EVENTS):
        raise InputError(f"no run {run_id!r} with a config.json and events.jsonl under {out}", field="--rescore")
    source.run_config()  # refused here when damaged; its events when they are read (runtime.replay)
    return source.path


def check_rescore(protocol: type[Protocol], source: RunConfig, config: RunConfig) -> None:
    """A re-score changes a judging role's model or a protocol parameter (e.g. ``--judge-jury``), and nothing that
    changes the replayed answers.

    Replayed roles keep their source models (their answers come from the log); the seed stays (it chooses the
    units and their questions), and so do ``--trials`` (a trial the source did not run has no answers to replay)
    and ``--state-check`` (its verdicts on the agent's final states are the source's, carried over).
    A changed parameter that leads to a request the source never made diverges.
    """
    if source.protocol != config.protocol:
        raise InputError(f"run was made with --protocol {source.protocol}, not {config.protocol}", field="--rescore")
    changed = source.model_changes(config)
    if not any(r in changed for r in protocol.judge_roles) and source.params == config.params:
        flags = " or ".join(f"--{r}" for r in protocol.judge_roles)
        raise InputError(
            f"a re-score needs another judge: give {flags} a model other than the source run's, "
            "or change a judging parameter such as a jury",
            field="--rescore",
        )
    for role in protocol.roles:
        if role not in protocol.judge_roles and role in changed:
            flag = f"--{role}"
            raise InputError(
                f"the {role} answers are replayed from run {config.rescored_from}; its model cannot "
                "change in a re-score (--rescore); start a new run",
                setting=config.sources.get(flag, flag),
            )
    if source.seed != config.seed:
        raise InputError(
            f"run {config.rescored_from} was made with seed {source.seed}, not {config.seed}; a re-score keeps it",
            setting=config.sources.get("--seed", "--seed"),
        )
    if source.state_check != config.state_check:  # its verdicts are carried: the agent's state is not read again
        raise InputError(
            f"run {config.rescored_from} was made with --state-check {source.state_check or '(none)'}; a re-score "
            "(--rescore) carries its state checks over (the agent's turns are replayed, its state is not read "
            "again), so it keeps it",
            setting=config.sources.get("--state-check", "--state-check"),
        )
    if source.trials != config.trials:  # its units are the source's trials, each replayed from its own log
        raise InputError(
            f"run {config.rescored_from} was made with --trials {source.trials}, not {config.trials}; a re-score "
            "(--rescore) re-judges the trials it ran, so it keeps them",
            setting=config.sources.get("--trials", "--trials"),
        )


def summary_fields(protocol: Protocol, config: RunConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a re-scored run's summary says about its source and its diverged units (nothing for other runs)."""
    if not config.rescored_from:
        return {}
    return {
        "rescored_from": config.rescored_from,
        "judge_roles": list(protocol.judge_roles),
        "diverged_units": [r["unit_id"] for r in records if r["status"] == DIVERGED],
        "rescore_note": protocol.rescore_note,
    }


def report_text(summary: dict[str, Any]) -> str | None:
    """The report's paragraph on a re-score: source, what is re-scored as-is, which units need a full re-run."""
    if not summary.get("rescored_from"):
        return None
    diverged = summary["diverged_units"]
    text = (
        f"RE-SCORED from run {summary['rescored_from']}: the judging roles ({', '.join(summary['judge_roles'])}) "
        "were asked again; every other role's replies were replayed from that run's event log (no request "
        f"sent). {summary['rescore_note']} "
    )
    if diverged:
        text += (
            f"{len(diverged)} unit(s) diverged: the new judge led them to a request the source run never made, "
            f"so they are not scored and need a full re-run with the new judge: {', '.join(diverged)}. The "
            "metrics cover the other units only."
        )
    else:
        text += "No unit diverged: every unit followed its source path, so all metrics are re-scored."
    return text
