"""``dyneval --export RUN --format csv|jsonl|parquet``: a finished run's units (one row each, flattened) and its
per-item results (an interview's answers: one row each) as files a spreadsheet or pandas reads."""

from __future__ import annotations

import csv
import json
import sys

import pytest

from dyneval.cli import main
from dyneval.stores.rundir import RunDir
from tests.standin_runs import two_unit_interview


@pytest.fixture(scope="module")
def interview_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert two_unit_interview(out) == 0
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return out, run_dir


def _answers(run_dir) -> list[tuple[str, int, int]]:
    """(unit, question, attempt) of every graded answer, as the records hold them."""
    return [
        (r["unit_id"], a["q"], a["attempt"])
        for r in RunDir(run_dir).records()
        for a in [*r["seed_interactions"], *r["followup_results"]]
    ]


def test_csv_export_has_a_row_per_unit_and_a_row_per_answer(interview_run):
    out, run_dir = interview_run
    assert main(["--export", run_dir.name, "--out", str(out)]) == 0
    with (run_dir / "export" / "units.csv").open(encoding="utf-8") as f:
        units = list(csv.DictReader(f))
    with (run_dir / "export" / "items.csv").open(encoding="utf-8") as f:
        items = list(csv.DictReader(f))
    assert [u["unit_id"] for u in units] == [r["unit_id"] for r in RunDir(run_dir).records()]
    assert {"status", "meta.seed_id", "usage.calls"} <= set(units[0])  # nested fields become dotted columns
    assert json.loads(units[0]["seed_correct"]) == RunDir(run_dir).records()[0]["seed_correct"]  # lists: JSON text
    assert [(i["unit_id"], int(i["q"]), int(i["attempt"])) for i in items] == _answers(run_dir)
    assert {i["step"] for i in items} <= {"seed", "followup"} and all(i["verdict"] for i in items)


def test_jsonl_and_parquet_exports_keep_the_same_rows_with_their_types(interview_run):
    import pyarrow.parquet as pq

    out, run_dir = interview_run
    assert main(["--export", str(run_dir), "--format", "jsonl"]) == 0  # a run folder works as well as an id
    assert main(["--export", run_dir.name, "--out", str(out), "--format", "parquet"]) == 0
    rows = [json.loads(line) for line in (run_dir / "export" / "items.jsonl").read_text().splitlines()]
    table = pq.read_table(run_dir / "export" / "items.parquet").to_pylist()
    assert [(r["unit_id"], r["q"], r["attempt"]) for r in rows] == _answers(run_dir)
    assert [(r["unit_id"], r["q"], r["attempt"]) for r in table] == _answers(run_dir)  # numbers stay numbers
    units = pq.read_table(run_dir / "export" / "units.parquet").to_pylist()
    assert [u["usage.calls"] for u in units] == [r["usage"]["calls"] for r in RunDir(run_dir).records()]


def test_parquet_without_pyarrow_and_an_unknown_run_are_one_line_and_exit_2(interview_run, monkeypatch, capsys):
    out, run_dir = interview_run
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(["--export", run_dir.name, "--out", str(out), "--format", "parquet"]) == 2
    assert "parquet needs pyarrow: pip install 'dyneval[parquet]'" in capsys.readouterr().err
    assert main(["--export", "no-such-run", "--out", str(out)]) == 2
    assert main(["--export", run_dir.name, "--out", str(out), "--format", "xlsx"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "no finished run 'no-such-run'" in errors[0] and "'xlsx' is not one of" in errors[1]
