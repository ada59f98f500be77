"""Behaviour unchanged (issue 12): every protocol run through the CLI against the stand-in endpoint gives the
results, the requests per unit and per model, and the summary recorded in ``tests/golden/`` from the code
before the refactor (commit e4cfa3d). See :mod:`tests.golden_runs` for what is compared and when re-recording
is legitimate (an intended behaviour change only, with its reason in the commit).
"""

from __future__ import annotations

import json

import pytest

from tests.golden_runs import CASES, explain, golden_path, run_case


@pytest.mark.parametrize("case", list(CASES))
def test_protocol_run_matches_its_golden_record(case, tmp_path):
    golden = json.loads(golden_path(case).read_text(encoding="utf-8"))
    actual = run_case(case, tmp_path)
    assert actual == golden, explain(case, golden, actual)
