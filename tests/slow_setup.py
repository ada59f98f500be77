"""A protocol whose unit runners are slow to start, for the Ray lease tests (``tests/test_ray_leases.py``): as a
fresh runner on a loaded node was. Imported by the tests' drivers before they connect to Ray, so it does not
import Ray itself (Ray reads its loopback switch when first imported: ``runtime/executors/ray_address.py``)."""

from __future__ import annotations

import os
import time
from typing import Any

from dyneval.protocols.interview import InterviewProtocol

#: Seconds a unit runner's graph takes to build, where set (on the test cluster's nodes only).
SLOW_SETUP = "DYNEVAL_TEST_SLOW_SETUP_S"


class SlowSetupInterview(InterviewProtocol):
    """The interview protocol, its graph built :data:`SLOW_SETUP` seconds late where that variable is set."""

    def builder(self) -> Any:
        time.sleep(float(os.environ.get(SLOW_SETUP, "0")))
        return super().builder()
