"""kill -9 at random moments and resume: every unit ends exactly as in an uninterrupted run."""

from __future__ import annotations

import pytest

from bench.kill_resume import run_trials


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_thirty_random_kills_and_resumes_end_every_unit_like_an_uninterrupted_run(tmp_path):
    outcome = run_trials(trials=30, budget_s=360, work=tmp_path, seed=11)
    print(outcome.line())
    assert outcome.kills >= 30, outcome.line()
    assert outcome.wrong_units == [], outcome.line()  # one final record each, equal record and calls
    assert outcome.metric_mismatches == 0, outcome.line()
    assert outcome.unknown_requests == 0, outcome.line()
