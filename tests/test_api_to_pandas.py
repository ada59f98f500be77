"""``RunResult.to_pandas()``: a run's units and items as DataFrames, the rows and columns ``--export`` writes."""

from __future__ import annotations

import json

import pytest

from dyneval import RunResult
from dyneval.results.export import export_run
from dyneval.state.errors import InputError
from tests.standin_runs import two_unit_interview


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_units_and_items_are_the_exported_tables_as_dataframes(tmp_path):
    out = tmp_path / "runs"
    assert two_unit_interview(out) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    result = RunResult.read(run_dir)
    export_run(str(run_dir), str(out), "jsonl")
    for table in ("units", "items"):
        frame = result.to_pandas(table)
        exported = _jsonl(run_dir / "export" / f"{table}.jsonl")
        assert list(frame.columns) == list(dict.fromkeys(k for row in exported for k in row)), table
        assert len(frame) == len(exported) > 0, table
        # every cell is the exported value (a missing one is NaN in the frame, absent in the JSON line)
        for row, want in zip(frame.to_dict("records"), exported):
            assert {k: v for k, v in row.items() if k in want} == want, table
    units = result.to_pandas()
    assert sorted(units["unit_id"]) == sorted(r["unit_id"] for r in result.records)
    assert set(result.to_pandas("items")["unit_id"]) == set(units["unit_id"])
    with pytest.raises(InputError, match="'answers' is not one of units, items"):
        result.to_pandas("answers")  # type: ignore[arg-type]  # a wrong name on purpose
