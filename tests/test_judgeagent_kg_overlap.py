"""JudgeAgent's context graph builds on a background thread while the batches run (issue 14): a batch grades its
base questions during the build and waits for the graph at its first knowledge path, with the same results as
after a build that came first; the build's progress is shown (n/total per stage, plain lines off a terminal, one
line for a cache hit); a failed build is the run's error, as when it blocked ``prepare()``; Ctrl-C ends the
batches waiting for it and the build's chunk embedding; the "w/o context graph" ablation never waits."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from rich.console import Console

import runtime.runner as runner
from protocols.judgeagent import JudgeAgentProtocol
from runtime.llm import current_unit
from runtime.runner import RunInterrupted, execute, open_run
from runtime.services import Services
from runtime import stop
from state.config import RunConfig
from state.errors import InfraError
from tests.fake_embedding import HashEmbedding
from tests.fakes import ScriptedChat
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
    return {json.loads(l)["question"]: json.loads(l)["answer"] for l in SAMPLE.read_text().splitlines()}


def _is_build_call(tool: dict[str, Any] | None) -> bool:
    """An entity-labelling call of the graph build (outside any unit), not a batch's question entities."""
    return bool(tool) and tool["function"]["name"] == "EntityLabels" and current_unit() == "-"


class Run:
    """One JudgeAgent run on the shipped sample with fake models; ``hold(tool)`` runs before each evaluator
    reply (a build call may wait there for a condition)."""

    def __init__(self, out: Path, hold: Callable[[Any], None] = lambda tool: None, console: Console | None = None,
                 run_id: str | None = None, **params: Any) -> None:
        self.evaluator = FakeEvaluator()
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
        config = RunConfig(protocol="judgeagent", out=str(out), params={"rounds": 1, **params}, roles=roles,
                           concurrency=concurrency, limit=limit)
        self.run = open_run(JudgeAgentProtocol(), config, run_id=run_id,
                            console=console or Console(file=io.StringIO(), width=200),
                            chat_overrides={"evaluator": ScriptedChat(evaluator), "target": ScriptedChat(target)},
                            retry_sleep=lambda s: None)

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
    monkeypatch.setattr(runner, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    held: list[bool] = []
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # released once a batch graded its base questions and the console says it waits
            held.append(box["run"].base_asked.wait(PATIENCE_S)
                        and _until(lambda: "(1 unit waiting for the context graph)" in out.getvalue()))

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


def test_build_progress_shows_n_of_total_per_stage_plain_lines_off_a_terminal_and_a_cache_hit(tmp_path, monkeypatch,
                                                                                             hash_embedding):
    monkeypatch.setattr(runner, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    console = Console(file=out, width=200)  # not a terminal: no live display

    def hold(tool: Any) -> None:
        if _is_build_call(tool):  # the build goes on once a plain progress line was printed meanwhile
            _until(lambda: "context graph: extraction " in out.getvalue())

    Run(tmp_path, hold, console=console, build_kb_only=True).execute()
    text = out.getvalue()
    assert "context graph: 16 chunks, 16 to label" in text
    assert re.search(r"^context graph: extraction 0/16$", text, re.MULTILINE)  # a plain line while it built
    stats = json.loads((tmp_path / next(p.name for p in tmp_path.iterdir() if not p.name.startswith("_"))
                        / "kb_stats.json").read_text())
    for stage, total in (("extraction", 16), ("embedding chunks", 16), ("embedding entities", stats["entities"])):
        assert re.search(rf"^  {stage} .*\b{total}/{total}\b", text, re.MULTILINE), stage  # the final display
    assert "context graph: {" in text  # the statistics line, printed when the build ended

    again = io.StringIO()
    Run(tmp_path, console=Console(file=again, width=200), build_kb_only=True).execute()
    assert "context graph: cache hit, loaded from" in again.getvalue()
    assert "context graph: extraction" not in again.getvalue()


def test_a_failed_build_is_the_runs_error_and_a_resume_continues_the_batches(tmp_path, monkeypatch, hash_embedding):
    class Down(HashEmbedding):
        def __call__(self, input):
            raise InfraError("embedding server down")

    monkeypatch.setattr(Services, "embeddings", lambda self: Down())
    failing = Run(tmp_path)
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

    import run as cli
    from tests.golden_runs import ROLES, respond
    from tests.standin_endpoint import StandIn

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    err = io.StringIO()
    with StandIn(respond=respond) as standin, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(err):
        code = cli.main(["--protocol", "judgeagent", "--limit", "1", "--out", str(tmp_path),
                         "--embedding-model", "m@https://embeddings.invalid/v1",
                         *[x for role in ROLES for x in (f"--{role}", standin.spec(role))]])
    assert code == 2
    assert "error:" in err.getvalue() and "--embedding-model" in err.getvalue()


def test_stop_ends_the_batches_waiting_for_the_graph(tmp_path, hash_embedding):
    release = threading.Event()
    box: dict[str, Run] = {}

    def hold(tool: Any) -> None:
        if _is_build_call(tool):
            _until(lambda: stop.stopped() or box["run"].waiting() == 2)  # both batches wait for the graph
            stop.request_stop()  # Ctrl-C, while the build is in an extraction call
            release.wait(PATIENCE_S)

    box["run"] = waiting = Run(tmp_path, hold, c=2)
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
    from stores.context_graph import CHUNK_BATCH, Document, open_context_graph
    from stores.vectors import chroma_client

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

    docs = [Document(id=f"d{i}", title="", chunks=[f"Chunk {i}.{j} about the Harbor Mill." for j in range(3)])
            for i in range(100)]
    embed = Slow()
    with pytest.raises(Stopped):
        open_context_graph(docs, cache_dir=tmp_path, extractor_label="x", extract=extract, chroma=chroma_client,
                           embed=embed, progress=progress)
    assert len(embed.calls) < -(-300 // CHUNK_BATCH)  # the pool stopped too, not only the extraction
