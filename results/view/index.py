"""``<out>/index.html``: every run under a folder on one page, opened from disk (no server, no network).

One row per run (a folder holding a ``config.json``, read through :class:`stores.rundir.RunDir`), newest first:
its start time (from the run id), protocol, models, status (finished, interrupted, or no summary yet: running or
stopped before its end), the headline metrics with their 95 % intervals and n, the LLM calls and cost, and links
to its ``view.html`` and report. Above them, the leaderboards (:mod:`results.leaderboard`): per protocol and
set-up, the models' latest finished values of each headline metric, ranked, with the probability each is best.
Ticking two or more runs of one protocol shows the ``dyneval --compare`` command
that writes their comparison page; the comparison pages already in the folder are listed with links. The runner
rewrites the page when a run ends; ``dyneval --index DIR`` rewrites it by hand.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from dyneval.results import leaderboard
from dyneval.results.view.adapters import adapter
from dyneval.results.view.data import headline_metrics
from dyneval.results.view.page import VIEW_FILE, write_page
from dyneval.results.view.paths import Relative
from dyneval.runtime.events import usd
from dyneval.state.errors import InputError
from dyneval.stores.rundir import RESULTS, DamagedRun, RunDir, runs_under
from dyneval.stores.runfiles import SummaryFile

INDEX_FILE = "index.html"
_TITLE = re.compile(rb"<title>(.*?)</title>", re.S)


def _status(run: RunDir, summary: SummaryFile | None) -> str:
    if summary is None:
        plan = sum(1 for _ in run.plan())
        done = len({r["unit_id"] for r in run.file(RESULTS)})
        return f"no summary: running, or stopped before its end ({done} of {plan} units have a record)"
    counts = ", ".join(f"{k}={v}" for k, v in sorted(summary.status_counts.items()))
    if summary.interrupted:
        return f"interrupted (partial): {counts}"
    return f"finished: {counts}" if counts else "finished"


def _cost(usage: dict[str, Any]) -> str:
    """USD (or unknown, for models without a price), calls and tokens."""
    if not usage:
        return ""
    cost = "unknown USD (no price)" if usage.get("cost_usd") is None else usd(usage)
    tokens = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
    return f"{cost}; {usage.get('calls', 0)} calls, {tokens} tokens"


def _row(run: RunDir) -> dict[str, Any]:
    """The run's row; a folder that is not what a run writes (:class:`DamagedRun`) is a row saying what is wrong."""
    row: dict[str, Any] = {
        "run_id": run.name,
        "started": run.started,
        "protocol": "",
        "models": [],
        "headline": [],
        "cost": "",
        "view": None,
        "report": None,
    }
    try:
        config, summary = run.config(), run.summary()
        status = _status(run, summary)
    except DamagedRun as exc:
        return row | {"status": f"not readable as a run: {exc}"}
    models = summary.models if summary and summary.models else config.roles
    head = headline_metrics(adapter(config.protocol), summary.metrics) if summary else []
    return row | {
        "protocol": config.protocol,
        "models": [f"{role}: {model}" for role, model in models.items()],
        "status": status,
        "headline": [
            {
                "name": m["name"],
                "value": m["value"],
                "denominator": m["denominator"],
                **{k: (m.get("interval") or {}).get(k) for k in ("low", "high", "n")},
            }
            for m in head
        ],
        "cost": _cost(summary.usage) if summary else "",
        "view": f"{run.name}/{VIEW_FILE}" if (run.path / VIEW_FILE).is_file() else None,
        "report": f"{run.name}/report.html" if (run.path / "report.html").is_file() else None,
    }


def _comparisons(folder: Path) -> list[dict[str, Any]]:
    """The comparison pages in ``folder`` (``compare-*.html``), newest first, each with its title and the runs it
    compares (its title is ``protocol: RUN vs RUN ...``, :func:`results.view.compare.compare_payload`)."""
    out = []
    for page in sorted(folder.glob("compare-*.html"), reverse=True):
        with page.open("rb") as fh:
            found = _TITLE.search(fh.read(4096))
        title = html.unescape(found.group(1).decode("utf-8", "replace")) if found else page.name
        runs = title.partition(": ")[2].split(" vs ")
        out.append({"href": page.name, "title": title, "runs": sorted(runs)})
    return out


def index_payload(out_dir: Path) -> dict[str, Any]:
    folder = Path(out_dir)
    found = runs_under(folder)
    runs = [_row(r) for r in reversed(found)]
    payload = {
        "kind": "index",
        "title": f"Runs in {folder.name or folder}",
        "notes": [],
        "runs": runs,
        "leaderboards": [leaderboard.payload(b) for b in leaderboard.boards(found)],
        "comparisons": _comparisons(folder),
    }
    return Relative(folder, out=folder)(payload)


def write_index(out_dir: Path) -> Path:
    """Write ``<out_dir>/index.html`` listing every run under ``out_dir``; its path."""
    folder = Path(out_dir)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder of runs", setting="--index")
    return write_page(folder / INDEX_FILE, index_payload(folder))
