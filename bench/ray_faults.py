"""A worker node's raylet killed mid-run on a loaded machine, repeated: does every planned unit end with its one
final record, and does the run exit 0 only when all of them are ``ok``?

    python -m bench.ray_faults [--repetitions 10] [--units 24] [--concurrency 4] [--burners 2] [--latency 0.05]
                               [--slow-setup SECONDS]

Each repetition starts a fresh loopback cluster (``tests/ray_cluster.py``: a head and two worker nodes with one
CPU each, so every unit runner is fresh) and a fresh database on one throw-away PostgreSQL server, and runs an
interview batch through ``run.py --executor ray`` (the real command, its own process) against the stand-in
endpoint in its own process (``bench.speed --serve``, ``--latency`` seconds per request). While the run goes,
``--burners`` Python loops keep the 2 cores busy (each ended with the run, and in any case after 15 minutes). Once
a third of the units ended, worker node 1's raylet is killed (SIGKILL), which ends its unit runners. With
``--slow-setup S`` every unit runner (the replacement of the killed node's too) takes S more seconds to build its
graph (``tests/slow_setup.py``): more than ``LEASE_S`` is how long a fresh runner took on a loaded node when the
lease was taken before the graph was built.

Per repetition it prints: units planned, units with a record in ``results.jsonl`` (and how many ``ok``), final
records in the claims table, the exit code, and whether the outcome holds: every planned unit recorded once and
final once, and exit 0 exactly when all are ``ok``. The last line sums the units lost.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ray_scaling import fresh_db, postgres, standin  # noqa: E402
from dyneval.stores.unit_claims import UnitClaims  # noqa: E402
from tests.ray_cluster import ray_cluster  # noqa: E402
from tests.ray_runs import driver_command, interview_seeds, planned, records  # noqa: E402
from tests.slow_setup import SLOW_SETUP  # noqa: E402

#: Seconds a CPU burner runs at most, should its run hang.
BURN_S = 900


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    """``count`` busy Python loops, each its own process, ended on exit (and by themselves after ``BURN_S``)."""
    loop = f"import time\nend = time.monotonic() + {BURN_S}\nwhile time.monotonic() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def repetition(n: int, args: argparse.Namespace, url: str, admin_dsn: str, work: Path) -> dict[str, object]:
    """One run with a raylet killed a third of the way through; what it left."""
    dsn, out = fresh_db(admin_dsn, f"faults_{n}"), work / f"out{n}"
    data = interview_seeds(work / f"seeds{n}.jsonl", args.units)
    slow = {SLOW_SETUP: str(args.slow_setup)} if args.slow_setup else {}
    with ray_cluster(workers=2, cpus_per_worker=1, env=slow) as cluster, burners(args.burners):
        env = {k: v for k, v in cluster.env.items() if k != SLOW_SETUP}  # the driver sets up at once
        if slow:
            env["DYNEVAL_PROTOCOLS"] = "interview=tests.slow_setup:SlowSetupInterview"
        driver = subprocess.Popen(
            driver_command(
                url,
                dsn,
                out,
                "--data",
                data,
                "--concurrency",
                str(args.concurrency),
                "--ray-address",
                cluster.address,
                "--skip-preflight",
            ),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        killed = False
        while driver.poll() is None:
            run_dirs = list(out.glob("*/units.jsonl"))
            if not killed and run_dirs and len(records(run_dirs[0].parent)) >= args.units // 3:
                cluster.kill_raylet("worker1")
                killed = True
            time.sleep(0.1)
    run_dir = next(out.glob("*/units.jsonl")).parent
    units, lines = planned(run_dir), records(run_dir)
    with UnitClaims(dsn) as claims:
        finals = claims.final_records(run_dir.name)
    statuses = Counter(r["status"] for r in lines)
    recorded = {r["unit_id"] for r in lines}
    once = len(lines) == len(recorded) == len(units) and recorded == set(units) == set(finals)
    exit_right = (driver.returncode == 0) == (statuses.get("ok", 0) == len(units))
    return {
        "planned": len(units),
        "recorded": len(recorded),
        "ok": statuses.get("ok", 0),
        "finals": len(finals),
        "exit": driver.returncode,
        "killed": killed,
        "holds": once and exit_right,
        "lost": len(set(units) - recorded),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--units", type=int, default=24, help="interview units per run (default 24)")
    parser.add_argument("--concurrency", type=int, default=4, help="units in flight (default 4)")
    parser.add_argument("--burners", type=int, default=2, help="busy Python loops during each run (default 2)")
    parser.add_argument("--latency", type=float, default=0.05, help="stand-in seconds per request (default 0.05)")
    parser.add_argument(
        "--slow-setup",
        type=float,
        default=0.0,
        help="seconds each unit runner's graph takes longer to build (default 0)",
    )
    args = parser.parse_args()
    print(
        f"{'rep':>3} {'planned':>7} {'recorded':>8} {'ok':>4} {'finals':>6} {'exit':>4} {'killed':>6}  holds",
        flush=True,
    )
    rows = []
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ray-faults-")))
        admin_dsn, _ = stack.enter_context(postgres())
        url, _ = stack.enter_context(standin(args.latency))
        for n in range(1, args.repetitions + 1):
            row = repetition(n, args, url, admin_dsn, work)
            rows.append(row)
            print(
                f"{n:>3} {row['planned']:>7} {row['recorded']:>8} {row['ok']:>4} {row['finals']:>6} "
                f"{row['exit']:>4} {str(row['killed']):>6}  {'yes' if row['holds'] else 'NO'}",
                flush=True,
            )
    lost = sum(int(r["lost"]) for r in rows)
    print(
        f"{sum(bool(r['holds']) for r in rows)} of {len(rows)} repetitions hold; units lost: {lost} of "
        f"{sum(int(r['planned']) for r in rows)}"
    )


if __name__ == "__main__":
    main()
