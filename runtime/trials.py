"""``--trials K``: every planned unit run K times, each trial a unit of its own on fresh threads, so that pass^k
(τ-bench, Yao et al. 2024: the chance that k independent trials of a task all succeed) and the flip rate can be
counted (:mod:`results.trials`).

Trial ``t`` of unit ``ID`` is the unit ``ID~tT`` (its ``meta`` names ``trial`` and ``trial_of``): its graph thread
``RUN_ID/ID~tT`` and its agent threads are its own, so no trial sees another's conversation, and a killed run
resumes trial by trial like any other units (the expanded plan is what ``units.jsonl`` holds). The plan lists every
unit's first trial, then every unit's second, and so on: a run stopped early has whole rounds of trials.
"""

from __future__ import annotations

from typing import Any

from dyneval.runtime.protocol import Unit

#: What separates a unit's id from its trial number (``fact-seasons~t2``).
SEP = "~t"


def with_trials(units: list[Unit], trials: int) -> list[Unit]:
    """``units`` as ``trials`` rounds of trials (unchanged for one trial: the ids of a run without ``--trials``)."""
    if trials == 1:
        return units
    return [
        Unit(id=f"{u.id}{SEP}{t}", input=u.input, meta={**u.meta, "trial": t, "trial_of": u.id})
        for t in range(1, trials + 1)
        for u in units
    ]


def trial_of(record: dict[str, Any]) -> tuple[str, int]:
    """The planned unit a record is a trial of, and its trial number (a unit of a run without trials: 1)."""
    meta = record.get("meta") or {}
    return str(meta.get("trial_of") or record["unit_id"]), int(meta.get("trial") or 1)


def first_trials(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the first trial of each unit: what a run without ``--trials`` holds, which the protocol's own
    metrics are computed on (all trials go to pass^k and the flip rate)."""
    return [r for r in records if trial_of(r)[1] == 1]
