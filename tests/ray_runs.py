"""Interview runs on a Ray cluster, as the Ray tests and ``bench/ray_faults.py`` start them: the seed questions,
the command line of a driver, and what a run left in its folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def interview_seeds(path: Path, units: int = 40) -> str:
    """``units`` seed questions written to ``path``: the sample's seven, repeated with ids of their own (the
    questions differ only by a numbered prefix, so every unit's requests differ); the file's name."""
    seeds = [json.loads(line) for line in (REPO / "samples/interview/seeds.jsonl").read_text().splitlines()]
    with path.open("w") as fh:
        for i in range(units):
            seed = dict(seeds[i % len(seeds)])
            seed["id"], seed["question"] = f"{seed['id']}-{i}", f"({i}) {seed['question']}"
            fh.write(json.dumps(seed) + "\n")
    return str(path)


def driver_command(url: str, dsn: str, out: Path, *extra: str) -> list[str]:
    """``run.py`` for an interview run with every role on the endpoint at ``url`` and ``--executor ray``."""
    return [
        sys.executable,
        "run.py",
        "--protocol",
        "interview",
        "--target",
        f"target@{url}",
        "--evaluator",
        f"evaluator@{url}",
        "--postgres-dsn",
        dsn,
        "--out",
        str(out),
        "--executor",
        "ray",
        *extra,
    ]


def planned(run_dir: Path) -> list[str]:
    """The run's unit ids, as planned when it started."""
    return [json.loads(line)["id"] for line in (run_dir / "units.jsonl").read_text().splitlines()]


def records(run_dir: Path) -> list[dict[str, Any]]:
    """Every whole line of ``results.jsonl`` (none before the first unit ended)."""
    return whole_lines(run_dir / "results.jsonl")


def whole_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` written so far, without a last one still being written."""
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]] if path.exists() else []
