"""Speed benchmark (issue 14): one entry point, tables of figures and ratios all measured in this one run.

    python -m bench.speed [--latency 0.2] [--large 700] [--kg 1000,10000,100000] [--skip PART ...]

Every run is ``python run.py`` in a subprocess against the content-deterministic stand-in endpoint
(``tests/standin_endpoint.py`` with the golden runs' replies) served by another process with ``--latency`` seconds
per request. Parts (``--skip`` any of them):

* ``startup``: wall seconds of ``run.py --help``, ``--protocol atad --help`` and an ATAD ``--dry-run`` (best of 3).
* ``protocols``: each protocol at ``--concurrency 1`` and ``16``: whole-process wall, start-up share (process
  start to its first request), units phase (first to last request of any unit) and its ratio to the chain floor
  = latency x max(longest chain of dependent calls in one unit, sum of chains / concurrency), a chain being the
  most calls of a unit whose request-to-reply intervals do not overlap. Speed-ups c=1 -> c=16 of the units
  phase and of the whole process. JudgeAgent runs twice: with the offline embedding model (its import, 3-4.5 s of
  CPU here, is on the way to the context graph its units wait for) and with its embeddings served by an
  OpenAI-compatible endpoint in this process (hash vectors, same latency), as ``--embedding-model MODEL@URL`` does
  with a GPU server.
* ``atad``: ATAD at 24 problems (and ``--large`` problems, ``--concurrency 64``) against a one-call-at-a-time
  baseline: the very requests ATAD sent (logged by the stand-in), replayed in order by a bare OpenAI client, one
  in flight, as the official generator makes its teacher, orchestrator, student and escalation calls. At the
  large size only the first 150 requests are replayed and the baseline wall is their mean time x all requests
  (marked "est."). Rate = problems attempted per minute.
* ``calls``: calls/s of one process at zero endpoint latency (ATAD, ``--concurrency 16``; a row per run, three
  runs): unit calls over the units phase; CPU milliseconds per call in the units phase (the process's user +
  system time sampled from /proc every 20 ms, so other jobs on the machine do not count) and that CPU over the
  phase's wall (100 % = one core busy); and the whole process's CPU milliseconds per call (start-up and report
  included).
* ``kg``: context-graph build ms per chunk and path-sampling ms per hop at each ``--kg`` entity count, with a
  fake fast embedding (``tests/fake_embedding.py``) and no LLM (entities drawn per chunk), right after the
  build and after reopening the cached graph.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tables import table  # noqa: E402

ROLES = ("target", "evaluator", "teacher", "orchestrator", "student", "grader")
#: label -> (protocol, arguments); {URL} = the stand-in, {EMBED} = the embeddings endpoint
PROTOCOL_ARGS: dict[str, tuple[str, list[str]]] = {
    "atad": ("atad", ["--per-task", "2"]),
    "interview": ("interview", ["--limit", "8"]),
    "judgeagent": ("judgeagent", ["--limit", "2"]),
    "judgeagent, embeddings served": ("judgeagent", ["--limit", "2", "--embedding-model", "hash@{EMBED}"]),
    "llmeval": ("llmeval", ["--questions", "8", "--paradigm", "all", "--reference-model", "reference@{URL}"]),
}


# -- the stand-in in its own process ------------------------------------------------------------


def serve(latency: float, log: str | None) -> None:
    """``--serve``: the stand-in with the golden runs' replies; every request body appended to ``log``."""
    from tests.golden_runs import respond
    from tests.standin_endpoint import StandIn

    def logged(body: dict[str, Any]) -> dict[str, Any] | None:
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(body) + "\n")
        return respond(body)

    standin = StandIn(respond=logged, latency_s=latency)
    print(standin.url, flush=True)
    while True:
        time.sleep(3600)


@contextlib.contextmanager
def embeddings_endpoint(latency: float) -> Iterator[str]:
    """An OpenAI-compatible ``/v1/embeddings`` server in this process (hash vectors, ``latency`` s per request):
    what a GPU server does for ``--embedding-model MODEL@BASE_URL``."""
    from tests.fake_embedding import HashEmbedding, embeddings_reply
    from tests.fake_endpoint import serve, stop, url_of

    fake = HashEmbedding()

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        time.sleep(latency)
        return embeddings_reply(fake, body)

    server = serve(respond)
    try:
        yield url_of(server)
    finally:
        stop(server)


@contextlib.contextmanager
def standin(latency: float, log: Path | None = None) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.speed", "--serve", str(latency), str(log or "")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


# -- one CLI run ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")}


def run_cli(
    protocol: str, args: list[str], url: str, concurrency: int, out: Path, embed_url: str = ""
) -> dict[str, Any]:
    """Run one protocol; its wall, CPU seconds and the events of its run directory."""
    argv = [
        sys.executable,
        "run.py",
        "--protocol",
        protocol,
        *[a.replace("{URL}", url).replace("{EMBED}", embed_url) for a in args],
        "--concurrency",
        str(concurrency),
        "--out",
        str(out),
        *[x for role in ROLES for x in (f"--{role}", f"{role}@{url}")],
    ]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=stdout, stderr=stderr, text=True)
        trace = _cpu_trace(proc)
        wall = time.time() - started
        stderr.seek(0)
        errors = stderr.read()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{protocol} exited {proc.returncode}: {errors[-2000:]}")
    run_dir = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_"))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    return {
        "wall": wall,
        "started": started,
        "events": events,
        "run_dir": run_dir,
        "cpu_trace": trace,
        "cpu": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
    }


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_trace(proc: subprocess.Popen, every: float = 0.02) -> list[tuple[float, float]]:
    """``(wall clock, CPU seconds so far)`` of ``proc`` every ``every`` s until it exits, from /proc/PID/stat
    (user + system time of all its threads), so a phase's CPU can be told apart from start-up and exit."""
    trace: list[tuple[float, float]] = []
    while proc.poll() is None:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()
            trace.append((time.time(), (int(fields[11]) + int(fields[12])) / _TICK))
        except (OSError, IndexError, ValueError):  # the process ended between poll() and the read
            break
        time.sleep(every)
    return trace


def cpu_between(trace: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds ``proc`` spent between two wall-clock times (the trace's nearest samples inside them)."""
    inside = [cpu for ts, cpu in trace if start <= ts <= end]
    return inside[-1] - inside[0] if len(inside) > 1 else float("nan")


def _interval(e: dict[str, Any]) -> tuple[float, float]:
    end = e["ts"]
    return end - e["latency_s"], end


def chain(events: list[dict[str, Any]]) -> int:
    """The most calls with pairwise disjoint request-to-reply intervals (earliest-end greedy)."""
    count, free = 0, float("-inf")
    for start, end in sorted((_interval(e) for e in events), key=lambda se: se[1]):
        if start >= free - 1e-3:  # ts and latency are rounded to the millisecond
            count, free = count + 1, end
    return count


def phases(run: dict[str, Any], latency: float, concurrency: int) -> dict[str, float]:
    events = run["events"]
    units = [e for e in events if e["unit"] != "-"]
    first = min(_interval(e)[0] - e.get("queue_s", 0.0) for e in events)
    unit_start = min(_interval(e)[0] - e.get("queue_s", 0.0) for e in units)
    unit_end = max(e["ts"] for e in units)
    chains = [chain([e for e in units if e["unit"] == u]) for u in {e["unit"] for e in units}]
    floor = latency * max(max(chains), sum(chains) / concurrency)
    return {
        "wall": run["wall"],
        "startup": first - run["started"],
        "units": unit_end - unit_start,
        "floor": floor,
        "calls": len(events),
        "unit_calls": len(units),
    }


# -- parts ---------------------------------------------------------------------------------------


def part_startup() -> list[list[Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for label, argv in (
            ("run.py --help", ["--help"]),
            ("run.py --protocol atad --help", ["--protocol", "atad", "--help"]),
            ("atad --dry-run", ["--protocol", "atad", "--dry-run", "--out", out]),
        ):
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                subprocess.run([sys.executable, "run.py", *argv], cwd=REPO, env=_env(), capture_output=True, check=True)
                best = min(best, time.perf_counter() - started)
            rows.append([label, f"{best:.2f}"])
    return rows


def part_protocols(latency: float) -> list[list[Any]]:
    rows = []
    with standin(latency) as url, embeddings_endpoint(latency) as embed_url:
        for label, (protocol, args) in PROTOCOL_ARGS.items():
            got = {}
            for c in (1, 16):
                with tempfile.TemporaryDirectory() as out:
                    got[c] = phases(run_cli(protocol, args, url, c, Path(out), embed_url), latency, c)
            one, many = got[1], got[16]
            rows.append(
                [
                    label,
                    one["unit_calls"],
                    f"{one['wall']:.1f}",
                    f"{many['wall']:.1f}",
                    f"{many['startup'] / many['wall']:.0%}",
                    f"{one['units'] / many['units']:.1f}x",
                    f"{one['wall'] / many['wall']:.1f}x",
                    f"{(one['wall'] / many['wall']) / (one['units'] / many['units']):.2f}",
                    f"{many['units'] / many['floor']:.2f}",
                ]
            )
    return rows


def replay(bodies: list[dict[str, Any]], url: str) -> float:
    """Send ``bodies`` one at a time with a bare OpenAI client; the wall seconds."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="sk-none", max_retries=0)
    started = time.perf_counter()
    for body in bodies:
        client.chat.completions.create(**body)
    return time.perf_counter() - started


def part_atad(latency: float, sizes: list[tuple[int, int]]) -> list[list[Any]]:
    rows = []
    for problems, concurrency in sizes:
        with tempfile.TemporaryDirectory() as out:
            log = Path(out) / "requests.jsonl"
            with standin(latency, log) as url:
                per_task = -(-problems // 7)
                run = run_cli(
                    "atad",
                    ["--per-task", str(per_task), "--limit", str(problems)],
                    url,
                    concurrency,
                    Path(out) / "runs",
                )
                bodies = [json.loads(line) for line in log.read_text().splitlines()]
                sample = bodies if len(bodies) <= 300 else bodies[:150]
                base = replay(sample, url) * len(bodies) / len(sample)
        ours = run["wall"]
        p = phases(run, latency, concurrency)
        rows.append(
            [
                problems,
                concurrency,
                len(bodies),
                f"{base:.1f}{'' if sample is bodies else ' (est.)'}",
                f"{ours:.1f}",
                f"{problems / base * 60:.0f}",
                f"{problems / ours * 60:.0f}",
                f"{base / ours:.1f}x",
                f"{p['floor']:.1f}",
                f"{ours / (1.3 * p['floor'] + 1):.2f}",
            ]
        )
    return rows


def units_phase_cpu(run: dict[str, Any], concurrency: int) -> dict[str, float]:
    """A zero-latency run's units phase: its calls, seconds, calls/s, CPU ms per call (the CPU between the phase's
    first and last /proc samples over the calls that ended between them) and CPU use (1 = one core busy)."""
    p = phases(run, 0.0, concurrency)
    units = [e for e in run["events"] if e["unit"] != "-"]
    unit_start = min(_interval(e)[0] - e.get("queue_s", 0.0) for e in units)
    inside = [ts for ts, _ in run["cpu_trace"] if unit_start <= ts <= unit_start + p["units"]]
    calls_inside = sum(1 for e in units if inside and inside[0] <= e["ts"] <= inside[-1])
    cpu = cpu_between(run["cpu_trace"], unit_start, unit_start + p["units"])
    return {
        "calls": p["unit_calls"],
        "seconds": p["units"],
        "calls_per_s": p["unit_calls"] / p["units"],
        "cpu_ms_per_call": cpu / max(1, calls_inside) * 1000,
        "cpu_use": cpu / (inside[-1] - inside[0]),
        "process_cpu_ms_per_call": run["cpu"] / p["calls"] * 1000,
    }


def part_calls(per_task: int, repeats: int) -> list[list[Any]]:
    """A row per run (``repeats`` runs, one stand-in): the figure varies by +-15 % between runs on a shared VM."""
    rows = []
    with standin(0.0) as url:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as out:
                run = run_cli("atad", ["--per-task", str(per_task)], url, 16, Path(out))
            u = units_phase_cpu(run, 16)
            rows.append(
                [
                    u["calls"],
                    f"{u['seconds']:.1f}",
                    f"{u['calls_per_s']:.0f}",
                    f"{u['cpu_ms_per_call']:.1f}",
                    f"{u['cpu_use']:.0%}",
                    f"{u['process_cpu_ms_per_call']:.1f}",
                    f"{run['wall']:.1f}",
                ]
            )
    return rows


def part_kg(sizes: list[int]) -> list[list[Any]]:
    from dyneval.stores.context_graph_build import open_context_graph
    from dyneval.stores.knowledge_base import Document
    from dyneval.stores.vectors import chroma_client
    from tests.fake_embedding import HashEmbedding

    rows = []
    for n in sizes:
        rng = random.Random(n)
        per_chunk, chunks_per_doc = 4, 2
        n_chunks = n // 2  # each entity in about two chunks
        names = [f"entity {i} {rng.choice('abcdefghij')}" for i in range(n)]
        labels = {}
        docs = []
        for d in range(n_chunks // chunks_per_doc):
            chunks = []
            for c in range(chunks_per_doc):
                ents = rng.sample(names, per_chunk)
                text = f"Chunk {d}.{c} on " + ", ".join(ents) + " and their " + rng.choice(["history", "use"])
                labels[text] = ents
                chunks.append(text)
            docs.append(Document(id=f"d{d}", title=f"doc {d}", chunks=chunks))

        def extract(texts: list[str], labels: dict[str, list[str]] = labels) -> list[tuple[list[str], str]]:
            return [(labels[t], "llm") for t in texts]

        with tempfile.TemporaryDirectory() as cache:
            started = time.perf_counter()
            graph = open_context_graph(
                docs,
                cache_dir=Path(cache),
                extractor_label="bench",
                extract=extract,
                chroma=chroma_client,
                embed=HashEmbedding(),
            )
            build = time.perf_counter() - started
            fresh = _hop_ms(graph)
            reopened = open_context_graph(
                docs,
                cache_dir=Path(cache),
                extractor_label="bench",
                extract=extract,
                chroma=chroma_client,
                embed=HashEmbedding(),
            )
            again = _hop_ms(reopened)
        rows.append(
            [
                len(graph.keys),
                len(graph.chunks),
                graph.stats()["mentions"],
                f"{build * 1000 / len(graph.chunks):.2f}",
                f"{fresh:.2f}",
                f"{again:.2f}",
            ]
        )
    return rows


def _hop_ms(graph: Any, paths: int = 200) -> float:
    rng = random.Random(0)
    nodes = sorted(graph.keys)
    hops = 0
    started = time.perf_counter()
    for i in range(paths):
        seed = nodes[rng.randrange(len(nodes))]
        path = graph.sample_path([(seed, f"question {i % 20}")], 3, random.Random(i))
        hops += len(path["steps"])
    return (time.perf_counter() - started) * 1000 / hops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request at the stand-in")
    parser.add_argument("--large", type=int, default=700, help="ATAD problems of the large run (0 = skip)")
    parser.add_argument("--kg", default="1000,10000,100000", help="entity counts of the context-graph part")
    parser.add_argument("--calls-per-task", type=int, default=30, help="ATAD problems per task, calls part")
    parser.add_argument("--calls-repeats", type=int, default=3, help="runs of the calls part (a row each)")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["startup", "protocols", "atad", "calls", "kg", "bank"]
    )
    parser.add_argument("--serve", nargs=2, metavar=("LATENCY", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(float(args.serve[0]), args.serve[1] or None)
        return
    print(f"machine: {os.cpu_count()} cores; stand-in latency {args.latency}s per request")
    if "startup" not in args.skip:
        table("start-up (best of 3)", ["command", "wall s"], part_startup())
    if "protocols" not in args.skip:
        table(
            f"protocols at --concurrency 1 vs 16 (latency {args.latency}s)",
            [
                "protocol",
                "unit calls",
                "wall c=1",
                "wall c=16",
                "start-up share c=16",
                "units speed-up",
                "process speed-up",
                "process/units",
                "units / chain floor c=16",
            ],
            part_protocols(args.latency),
        )
    if "atad" not in args.skip:
        sizes = [(24, 16)] + ([(args.large, 64)] if args.large else [])
        table(
            f"ATAD vs one call at a time (latency {args.latency}s)",
            [
                "problems",
                "concurrency",
                "requests",
                "baseline wall s",
                "atad wall s",
                "baseline /min",
                "atad /min",
                "atad rate ratio",
                "chain floor s",
                "wall / (1.3 floor + 1s)",
            ],
            part_atad(args.latency, sizes),
        )
    if "calls" not in args.skip:
        table(
            "calls per second at zero endpoint latency (ATAD, --concurrency 16)",
            [
                "unit calls",
                "units phase s",
                "calls/s",
                "units-phase CPU ms/call",
                "units-phase CPU use",
                "process CPU ms/call",
                "wall s",
            ],
            part_calls(args.calls_per_task, args.calls_repeats),
        )
    if "kg" not in args.skip:
        table(
            "context graph with a fake fast embedding (no LLM)",
            ["entities", "chunks", "mentions", "build ms/chunk", "hop ms (after build)", "hop ms (reopened)"],
            part_kg([int(x) for x in args.kg.split(",") if x]),
        )
    if "bank" not in args.skip:  # bench/bank_scale.py: llmeval's bank import rate and session sampling at 220k
        from bench.bank_scale import HEADERS, TITLE, part_bank

        table(TITLE, HEADERS, part_bank())


if __name__ == "__main__":
    main()
