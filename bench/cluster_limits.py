"""What the cluster-wide limits cost per LLM call: the coordinator actor's ``acquire`` + ``release``
(``runtime.cluster``) against the in-process ``InFlight`` slot, measured in this one run.

Starts a local Ray (one node, this machine), creates a run's coordinator with an endpoint limit, and times
``acquire`` + ``release`` pairs from 1 and from 8 threads of one process (no request in between: the figure is
the limit's own cost, which a real call adds to its latency). Prints microseconds per call and the ratio to the
in-process slot, and the CPU time the calling process spends per call (what a worker's throughput pays;
the rest of the wall time is the round trip, which a real call adds to its latency).

    python bench/cluster_limits.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dyneval.runtime.concurrency import InFlight  # noqa: E402
from dyneval.state.config import ModelSpec  # noqa: E402


def per_call(slots: object, calls: int, threads: int) -> tuple[float, float]:
    """Seconds of wall time and of this process's CPU time per acquire + release pair, ``calls`` pairs spread
    over ``threads`` threads."""

    def work(n: int) -> None:
        for _ in range(n):
            slots.release(slots.acquire())  # type: ignore[attr-defined]

    pool = [threading.Thread(target=work, args=(calls // threads,)) for _ in range(threads)]
    started, cpu = time.perf_counter(), time.process_time()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    n = calls // threads * threads
    return (time.perf_counter() - started) / n, (time.process_time() - cpu) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # a local ray.init() turns token authentication on and leaves a token in ~/.ray, which other clusters of
    # this machine then trip over
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from dyneval.runtime.executors.ray_address import keep_on_loopback

    keep_on_loopback(None)  # the local Ray listens on 127.0.0.1 only
    import ray

    from dyneval.runtime.cluster import ClusterLimits, start_coordinator

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    run_id = f"bench-{os.getpid()}"
    try:
        coordinator = start_coordinator(run_id)  # this handle keeps it
        spec = ModelSpec(model="m", base_url="http://127.0.0.1:9/v1", concurrency=8)
        cluster = ClusterLimits(run_id).slots(spec.model_dump_json(), spec)
        per_call(cluster, 200, 1)  # warm-up: the actor's first calls
        print(
            f"{'threads':>8} {'in-process us/call':>19} {'cluster us/call':>16} {'ratio':>7} "
            f"{'cluster CPU us/call (caller)':>29}"
        )
        for threads in (1, 8):
            local, _ = per_call(InFlight(8), args.calls, threads)
            remote, cpu = per_call(cluster, args.calls, threads)
            print(f"{threads:>8} {local * 1e6:>19.1f} {remote * 1e6:>16.1f} {remote / local:>7.0f} {cpu * 1e6:>29.1f}")
        ray.get(coordinator.stats.remote())  # the releases sent without waiting are all in
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
