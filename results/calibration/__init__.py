"""Judge-calibrated results: the statistics (:mod:`.estimates`), how each protocol's judge-based metrics follow
from its verdicts (:mod:`.metrics`), a run's judged answers against human labels (:mod:`.run`) and what
``--calibration`` writes (:mod:`.write`)."""
