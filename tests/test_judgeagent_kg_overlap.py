"""JudgeAgent's context graph builds on a background thread while the batches run (issue 14): a batch grades its
base questions during the build and waits for the graph at its first knowledge path, with the same results as
after a build that came first; a waiting batch gives its worker slot to the next batch and takes one again when the
graph is ready, so at most --concurrency batches work at once and no thread is made per unit up front; the build's
progress is shown (n/total per stage, plain lines off a terminal, one line for a cache hit); a failed build is the
run's error, as when it blocked ``prepare()``; Ctrl-C ends the batches waiting for it (or for a slot after it) and
the build's chunk embedding; the "w/o context graph" ablation never waits."""

from __future__ import annotations

import io
import json
import re
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import dyneval.runtime.display as display
import dyneval.runtime.executors.threads as threads
import dyneval.runtime.runner as runner
from dyneval.protocols.judgeagent import JudgeAgentProtocol
from dyneval.runtime import stop
from dyneval.runtime.llm import current_unit
from dyneval.runtime.protocol import Unit
from dyneval.runtime.runner import RunInterrupted, execute, open_run
from dyneval.runtime.services import Background, Services
from dyneval.state.config import RunConfig
from dyneval.state.errors import InfraError
from dyneval.stores.results import ResultStore
from tests.fake_embedding import HashEmbedding
from tests.fakes import ScriptedChat, all_text
from tests.test_judgeagent_support import FakeEvaluator, SimulatedTarget

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "judgeagent" / "questions.jsonl"
PATIENCE_S = 30.0  # how long a fake waits for the condition it checks; a pass never waits that long


@pytest.fixture
def hash_embedding(monkeypatch):
    """A fast embedding instead of all-MiniLM (its single-word vectors tie, so Chroma's order among equally near
    entities may differ between two builds: the test comparing two runs' paths uses all-MiniLM)."""
    embed = HashEmbedding()
    monkeypatch.setattr(Services, "embeddings", lambda self: embed)
    return embed


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _gold() -> dict[str, str]:
    return {json.loads(line)["question"]: json.loads(line)["answer"] for line in SAMPLE.read_text().splitlines()}


def _is_build_call(tool: dict[str, Any] | None) -> bool:
    """An entity-labelling call of the graph build (outside any unit), not a batch's question entities."""
    return bool(tool) and tool["function"]["name"] == "EntityLabels" and current_unit() == "-"


class ContentEvaluator(FakeEvaluator):
    """The fake evaluator with its generated questions numbered by their prompt, not by arrival: its answers then
    depend only on the request content, as the stand-in endpoint's, whatever order the batches run in."""

    def __call__(self, messages: list, tool: dict[str, Any] | None) -> Any:
        reply = super().__call__(messages, tool)
        if tool and tool["function"]["name"] == "ExtendedQuestion":
            n = zlib.crc32(all_text(messages).encode())
            reply = {"question": re.sub(r"number \d+", f"number {n}", reply["question"]), "answer": f"ans{n}"}
        return reply


class Run:
    """One JudgeAgent run on the shipped sample with fake models; ``hold(tool)`` runs before each evaluator
    reply (a build call may wait there for a condition)."""

    def __init__(
        self,
        out: Path,
        hold: Callable[[Any], None] = lambda tool: None,
        console: Console | None = None,
        run_id: str | None = None,
        **params: Any,
    ) -> None:
        self.evaluator = ContentEvaluator()
        self.target = SimulatedTarget(0.6, _gold())
        self.base_asked = threading.Event()

        def evaluator(messages: list, tool: dict[str, Any] | None) -> Any:
            hold(tool)
            return self.evaluator(messages, tool)

        def target(messages: list, tool: dict[str, Any] | None) -> Any:
            self.base_asked.set()
            return self.target(messages, tool)

        concurrency, limit = params.pop("c", 1), params.pop("limit", 2)
        # endpoints without an in-flight ceiling (the embedded model's is 1), as a real server's spec
        roles = {role: f"{role}@http://127.0.0.1:9/v1" for role in ("target", "evaluator")}
        config = RunConfig(
            protocol="judgeagent",
            out=str(out),
            params={"rounds": 1, **params},
            roles=roles,
            concurrency=concurrency,
            limit=limit,
        )
        self.run = open_run(
            JudgeAgentProtocol(),
            config,
            run_id=run_id,
            console=console or Console(file=io.StringIO(), width=200),
            chat_overrides={"evaluator": ScriptedChat(evaluator), "target": ScriptedChat(target)},
            retry_sleep=lambda s: None,
        )

    def waiting(self) -> int:
        return sum(job.waiting for job in self.run.services.background())

    def execute(self) -> dict[str, Any]:
        return execute(JudgeAgentProtocol(), self.run, skip_preflight=True)

    def records(self) -> dict[str, dict[str, Any]]:
        path = self.run.run_dir / "results.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        drop = {"wall_s", "usage"}
        return {r["unit_id"]: {k: v for k, v in r.items() if k not in drop} for r in map(json.loads, lines)}


def test_batches_grade_during_the_build_and_wait_for_the_graph_with_the_same_results(tmp_path, monkeypatch):
    monkeypatch.setattr(display, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    held: list[bool] = []
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # released once the batches graded their base questions and the console says
            # both wait: at --concurrency 1 the first gives its slot to the second while it waits
            held.append(
                box["run"].base_asked.wait(PATIENCE_S)
                and _until(lambda: "(2 units waiting for the context graph)" in out.getvalue())
            )

    box["run"] = overlapped = Run(tmp_path / "overlapped", hold, console=Console(file=out, width=200))
    summary = overlapped.execute()
    assert len(held) == 4 and all(held)  # each extraction call (16 chunks, 5 per call) found a batch waiting
    assert summary["status_counts"] == {"ok": 2}

    Run(tmp_path / "first", build_kb_only=True).execute()  # the graph built before any batch starts
    after = Run(tmp_path / "first")
    after.execute()
    assert after.records() == overlapped.records()
    assert (overlapped.run.run_dir / "kb_stats.json").exists()  # the statistics are written when the build ends
    stats = json.loads((overlapped.run.run_dir / "kb_stats.json").read_text())
    assert stats["chunks"] == 16 and stats["entity_sources"].get("llm")


class Working:
    """How many units work at once (started, not ended, not waiting for a build), counted from outside the
    runner: a unit counts from the start of ``run_unit`` to its end, minus while it is inside
    ``Background.result`` on an unfinished build, so the count never exceeds the slots the runner really gives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()
        run_unit, result = threads.run_unit, Background.result

        def counted_unit(*args: Any) -> dict[str, Any]:
            self.change(+1)
            try:
                return run_unit(*args)
            finally:
                self.change(-1)

        def counted_result(job: Background) -> Any:
            waits = not job.future.done()
            if waits:
                self.change(-1)
            try:
                return result(job)
            finally:
                if waits:
                    self.change(+1)

        monkeypatch.setattr(threads, "run_unit", counted_unit)
        monkeypatch.setattr(Background, "result", counted_result)

    def change(self, by: int) -> None:
        with self.lock:
            self.now += by
            self.peak = max(self.peak, self.now)


def test_batches_beyond_concurrency_grade_while_the_build_is_held_and_never_more_than_concurrency_work(
    tmp_path, monkeypatch
):
    working = Working(monkeypatch)
    gold = _gold()
    asked_before_release: list[set[str]] = []
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # each extraction call goes on once all 5 batches wait for the graph
            _until(lambda: box["run"].waiting() == 5)
            asked_before_release.append({q for q in gold for p in box["run"].target.prompts if q in p})

    box["run"] = overlapped = Run(tmp_path / "overlapped", hold, c=2, limit=5)
    assert overlapped.execute()["status_counts"] == {"ok": 5}
    # all 15 base questions (5 batches of 3) were graded while the build was held
    assert asked_before_release and all(asked == set(gold) for asked in asked_before_release)
    assert working.peak == 2

    Run(tmp_path / "first", build_kb_only=True).execute()  # the graph built before any batch starts
    after = Run(tmp_path / "first", c=2, limit=5)
    after.execute()
    assert after.records() == overlapped.records()


def _units(n: int) -> list[Unit]:
    return [Unit(id=f"u{i:03d}", input={}) for i in range(n)]


def _run_all(run: Run, units: list[Unit], tmp_path: Path) -> ResultStore:
    results = ResultStore(tmp_path / "results.jsonl")
    protocol = JudgeAgentProtocol()
    runner._run_all(protocol, run.run, threads.ThreadExecutor(protocol, run.run, None, None, results), units, already=0)
    return results


def _alive_unit_threads() -> int:
    return sum(t.name.startswith("unit-") and t.is_alive() for t in threading.enumerate())


def _build(run: Run) -> tuple[Background, threading.Event]:
    """A background build that ends when the returned event is set."""
    release = threading.Event()
    return run.run.services.start_background("test", "test build", lambda job: release.wait(PATIENCE_S)), release


def _record(unit: Unit, status: str = "ok") -> dict[str, Any]:
    return {"unit_id": unit.id, "meta": {}, "status": status}


def test_units_waiting_for_a_build_hand_their_slots_to_threads_made_on_demand(tmp_path, monkeypatch):
    """The runner's mechanism, whatever the protocol: 40 units at --concurrency 3 all reach the build before it
    ends, each on a thread started when a slot came free (never more threads than 3 + the units waiting);
    afterwards at most 3 work at once again; every record is saved."""
    run = Run(tmp_path, c=3)
    job, release = _build(run)
    samples: list[tuple[int, int]] = []  # (unit threads alive, units waiting) as each unit starts

    def unit_waiting_for_the_build(protocol: Any, run_: Any, graph: Any, unit: Unit, context: Any) -> dict:
        samples.append((_alive_unit_threads(), job.waiting))
        assert job.result() is True
        time.sleep(0.01)  # some work after the wait: units resuming all at once would overlap here
        return _record(unit)

    monkeypatch.setattr(threads, "run_unit", unit_waiting_for_the_build)
    working = Working(monkeypatch)
    at_release: list[int] = []

    def releaser() -> None:
        if _until(lambda: job.waiting == 40):
            at_release.append(_alive_unit_threads())
            release.set()

    thread = threading.Thread(target=releaser)
    thread.start()
    results = _run_all(run, _units(40), tmp_path)
    thread.join()
    assert at_release == [40]  # every unit waited for the build at once, one thread each, none idle
    assert len(samples) == 40 and all(alive <= 3 + waiting for alive, waiting in samples)
    assert working.peak == 3
    assert sorted(r["unit_id"] for r in results) == [u.id for u in _units(40)]


def test_units_that_never_wait_run_on_concurrency_threads(tmp_path, monkeypatch):
    run = Run(tmp_path, c=4)
    alive: list[int] = []

    def unit(protocol: Any, run_: Any, graph: Any, unit: Unit, context: Any) -> dict:
        alive.append(_alive_unit_threads())
        return _record(unit)

    monkeypatch.setattr(threads, "run_unit", unit)
    assert len(list(_run_all(run, _units(200), tmp_path))) == 200
    assert max(alive) == 4


def test_stop_ends_units_waiting_for_a_slot_after_the_build(tmp_path, monkeypatch):
    """At --concurrency 1, 5 units wait for the build; once it is done one works (until Ctrl-C) and the other four
    wait for its slot: Ctrl-C ends them all within the grace period, unsaved (a resume continues them)."""
    run = Run(tmp_path, c=1)
    job, release = _build(run)
    resumed: list[str] = []

    def unit(protocol: Any, run_: Any, graph: Any, unit: Unit, context: Any) -> dict:
        try:
            job.result()
            resumed.append(unit.id)
            _until(stop.stopped)  # the unit with the slot works until Ctrl-C
        except stop.StopRequested:
            return _record(unit, "interrupted")
        return _record(unit)

    def ctrl_c() -> None:
        _until(lambda: job.waiting == 5) and release.set()
        _until(lambda: len(resumed) == 1 and job.waiting == 4)  # four units wait for the one slot
        stop.request_stop()

    monkeypatch.setattr(threads, "run_unit", unit)
    stopper = threading.Thread(target=ctrl_c)
    stopper.start()
    try:
        with pytest.raises(stop.StopRequested):
            _run_all(run, _units(5), tmp_path)
        stopper.join()
        assert _alive_unit_threads() == 0  # none still waiting for a slot after the grace period
        assert [r["unit_id"] for r in ResultStore(tmp_path / "results.jsonl")] == resumed
    finally:
        stop.clear()


def test_no_unit_starts_after_a_stop_while_units_wait_for_the_build(tmp_path, monkeypatch):
    run = Run(tmp_path, c=1)
    job, release = _build(run)
    started: list[str] = []

    def unit(protocol: Any, run_: Any, graph: Any, unit: Unit, context: Any) -> dict:
        started.append(unit.id)
        if len(started) == 3:
            stop.request_stop()  # Ctrl-C as the third unit starts: its slot, given back as it waits, goes to none
        try:
            job.result()
        except stop.StopRequested:
            return _record(unit, "interrupted")
        return _record(unit)

    monkeypatch.setattr(threads, "run_unit", unit)
    try:
        with pytest.raises(stop.StopRequested):
            _run_all(run, _units(10), tmp_path)
        assert started == ["u000", "u001", "u002"]
        assert _alive_unit_threads() == 0
        assert not (tmp_path / "results.jsonl").exists()
    finally:
        release.set()
        stop.clear()


def test_build_progress_shows_n_of_total_per_stage_plain_lines_off_a_terminal_and_a_cache_hit(
    tmp_path, monkeypatch, hash_embedding
):
    monkeypatch.setattr(display, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    console = Console(file=out, width=200)  # not a terminal: no live display

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # the build goes on once a plain progress line was printed meanwhile
            _until(lambda: "context graph: extraction " in out.getvalue())

    Run(tmp_path, hold, console=console, build_kb_only=True).execute()
    text = out.getvalue()
    assert "context graph: 16 chunks, 16 to label" in text
    assert re.search(r"^context graph: extraction 0/16$", text, re.MULTILINE)  # a plain line while it built
    stats = json.loads(
        (
            tmp_path
            / next(p.name for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("_"))
            / "kb_stats.json"
        ).read_text()
    )
    for stage, total in (("extraction", 16), ("embedding chunks", 16), ("embedding entities", stats["entities"])):
        assert re.search(rf"^  {stage} .*\b{total}/{total}\b", text, re.MULTILINE), stage  # the final display
    # the statistics, printed when the build ended: a small table, not a dict's repr
    assert "{" not in text and re.search(r"documents .* chunks .* entities .* mentions .* entities from", text)
    counts = " ".join(str(stats[k]) for k in ("documents", "chunks", "entities", "mentions"))
    assert re.search(r"\b" + r"\W+".join(counts.split()) + r"\b", text), counts

    again = io.StringIO()
    Run(tmp_path, console=Console(file=again, width=200), build_kb_only=True).execute()
    assert "context graph: cache hit, loaded from" in again.getvalue()
    assert "context graph: extraction" not in again.getvalue()


def test_a_failed_build_is_the_runs_error_and_a_resume_continues_the_batches(tmp_path, monkeypatch, hash_embedding):
    box: dict[str, Run] = {}

    class Down(HashEmbedding):
        def __call__(self, input):
            # fails once both batches wait for the graph (at --concurrency 1 the second took the first's slot),
            # so no batch is cut mid-step and every question asked so far is saved
            _until(lambda: box["run"].waiting() == 2)
            raise InfraError("embedding server down")

    monkeypatch.setattr(Services, "embeddings", lambda self: Down())
    box["run"] = failing = Run(tmp_path)
    with pytest.raises(InfraError, match="embedding server down"):
        failing.execute()
    assert not any(r["status"] == "ok" for r in failing.records().values())

    monkeypatch.setattr(Services, "embeddings", lambda self: hash_embedding)
    resumed = Run(tmp_path, run_id=failing.run.run_dir.name)
    summary = resumed.execute()
    assert summary["status_counts"] == {"ok": 2}
    gold = _gold()
    asked = [p for p in failing.target.prompts + resumed.target.prompts if any(q in p for q in gold)]
    assert len(asked) == len(set(asked))  # graded before the failure, not again after the resume


def test_a_failed_build_exits_like_bad_input_in_prepare_did(tmp_path, monkeypatch):
    """A build that cannot start (an embeddings endpoint without its key) is one ``error:`` line, exit 2."""
    import contextlib

    from dyneval import cli
    from tests.golden_runs import ROLES, respond
    from tests.standin_endpoint import StandIn

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    err = io.StringIO()
    with (
        StandIn(respond=respond) as standin,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(err),
    ):
        code = cli.main(
            [
                "--protocol",
                "judgeagent",
                "--limit",
                "1",
                "--out",
                str(tmp_path),
                "--embedding-model",
                "m@https://embeddings.invalid/v1",
                *[x for role in ROLES for x in (f"--{role}", standin.spec(role))],
            ]
        )
    assert code == 2
    assert "error:" in err.getvalue() and "--embedding-model" in err.getvalue()


@pytest.mark.parametrize("c, batches", [(2, 2), (1, 3)])  # (1, 3): the batches beyond --concurrency wait too
def test_stop_ends_the_batches_waiting_for_the_graph(tmp_path, hash_embedding, c, batches):
    release = threading.Event()
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):
            _until(lambda: stop.stopped() or box["run"].waiting() == batches)  # every batch waits for the graph
            stop.request_stop()  # Ctrl-C, while the build is in an extraction call
            release.wait(PATIENCE_S)

    box["run"] = waiting = Run(tmp_path, hold, c=c, limit=batches)
    try:
        with pytest.raises(RunInterrupted):
            waiting.execute()
        assert not [t for t in threading.enumerate() if t.name.startswith("unit-") and t.is_alive()]
        assert waiting.records() == {}  # interrupted, not failed: a resume continues both batches
    finally:
        release.set()
        for job in waiting.run.services.background():
            job.future.exception(timeout=PATIENCE_S)  # the build stops at its next step
        stop.clear()


def test_the_no_context_graph_ablation_never_waits_for_the_build(tmp_path, hash_embedding):
    held: list[bool] = []
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # the build goes on only after every batch reached its feedback
            held.append(_until(lambda: len(box["run"].evaluator.prompts.get("Feedback", [])) == 2))

    box["run"] = ablation = Run(tmp_path, hold, no_context_graph=True)
    summary = ablation.execute()
    assert held and all(held)
    assert summary["status_counts"] == {"ok": 2}
    assert summary["metrics"]["generation"]["path_modes"] == {"random": 2}
    assert (ablation.run.run_dir / "kb_stats.json").exists()  # the run still waited for the build's statistics


def test_a_stopped_build_embeds_no_further_chunk_batch(tmp_path):
    from dyneval.stores.context_graph import CHUNK_BATCH
    from dyneval.stores.context_graph_build import open_context_graph
    from dyneval.stores.knowledge_base import Document
    from dyneval.stores.vectors import chroma_client

    class Slow(HashEmbedding):
        def __call__(self, input):
            time.sleep(0.05)
            return super().__call__(input)

    class Stopped(Exception):
        pass

    stopping = threading.Event()

    def progress(stage: str, advance: int, total: int) -> None:
        if stopping.is_set():
            raise Stopped()

    def extract(texts: list[str]) -> list[tuple[list[str], str]]:
        stopping.set()  # Ctrl-C while a labelling request is in flight: the build ends only when it returns
        time.sleep(0.5)
        raise Stopped()

    docs = [
        Document(id=f"d{i}", title="", chunks=[f"Chunk {i}.{j} about the Harbor Mill." for j in range(3)])
        for i in range(100)
    ]
    embed = Slow()
    with pytest.raises(Stopped):
        open_context_graph(
            docs,
            cache_dir=tmp_path,
            extractor_label="x",
            extract=extract,
            chroma=chroma_client,
            embed=embed,
            progress=progress,
        )
    assert len(embed.calls) < -(-300 // CHUNK_BATCH)  # the pool stopped too, not only the extraction
