"""Judge-calibrated results: the statistics (:mod:`.estimates`), a run's judged answers against human labels
(:mod:`.run`) and what ``--calibration`` writes (:mod:`.write`)."""
