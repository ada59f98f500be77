"""The exam server on several processes (``--serve --workers N``) over a throw-away PostgreSQL bank: both workers
answer, concurrent duplicate submissions through both are accepted exactly once, the rate limit is one bucket for
all processes, an exam gives the same stored answers and scores as one process, SIGTERM finishes the request in
flight, exits 0 and leaves no process behind; a SQLite bank is refused for more than one process."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from dyneval.nodes.llmeval.bankio import import_file
from dyneval.protocols.llmeval.server import SHUTDOWN_TIMEOUT_S, WORKER_HEADER
from dyneval.runtime.embedded import free_port
from dyneval.stores.question_bank import QuestionBank
from tests.listeners import listener_closed
from tests.slow_clients import SlowBodies
from tests.standin_endpoint import StandIn

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
BANK_SIZE = 36  # questions in the shipped sample: an exam of all of them is the same question set in any process


@pytest.fixture(scope="module")
def judge():
    with StandIn() as standin:  # answers depend only on the request content
        yield standin


class Serving:
    """``dyneval --protocol llmeval --serve --workers N`` as its own process over the bank ``dsn``."""

    def __init__(self, folder: Path, dsn: str, workers: int, judge: StandIn, *extra: str) -> None:
        import_file(QuestionBank(dsn), SAMPLE)
        self.folder, self.dsn, self.port = folder, dsn, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")}
        with (folder / "server.log").open("w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dyneval",
                    "--protocol",
                    "llmeval",
                    "--serve",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(workers),
                    "--bank-db",
                    dsn,
                    "--evaluator",
                    judge.spec("judge"),
                    "--target",
                    judge.spec("unused"),
                    "--out",
                    str(folder / "runs"),
                    *extra,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_for(workers)
        except BaseException:
            self.close()
            raise
        self.run_dir = next((folder / "runs").glob("*/admin_token")).parent
        self.admin = auth((self.run_dir / "admin_token").read_text().strip())

    def _wait_for(self, workers: int) -> None:
        deadline = time.monotonic() + 180  # start-up imports (parent, then each worker) are slow on a loaded machine
        serving: set[str] = set()
        while len(serving) < workers:  # every worker answers (each request on a new connection)
            try:
                serving.add(httpx.get(f"{self.base}/health", timeout=2).headers[WORKER_HEADER])
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.2)

    def log(self) -> str:
        return (self.folder / "server.log").read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)

    def close(self) -> None:
        """After a failure (the server still runs): it and its workers (its own process group) stopped."""
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        children = {p for p, pp in parents.items() if pp == parent}
        todo += list(children - found)
        found |= children
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by init, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pids: set[int]) -> None:
    """None of ``pids`` runs any more (their exit is awaited, not timed)."""
    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


def answer_for(question_id: str) -> str:
    """The examinee's answer, a function of the question only (so is the stand-in judge's rating)."""
    return "answer " + hashlib.sha256(question_id.encode()).hexdigest()[:12]


def full_exam(server: Serving) -> dict:
    """A whole-bank exam through the HTTP API, scored: its stored answers (by question) and its scores."""
    with httpx.Client(base_url=server.base, timeout=120) as http:
        s = http.post("/admin/sessions", json={"model": "exam-model", "questions": BANK_SIZE}, headers=server.admin)
        assert s.status_code == 200, s.text
        me, sid = auth(s.json()["token"]), s.json()["session_id"]
        while (q := http.get(f"/sessions/{sid}/next", headers=me)).status_code == 200:
            r = http.post(
                f"/sessions/{sid}/answers",
                headers=me,
                json={"position": q.json()["position"], "answer": answer_for(q.json()["question_id"])},
            )
            assert r.status_code == 200, r.text
        assert q.status_code == 429 and q.json()["detail"]["error"] == "exhausted"
        scored = http.post(f"/admin/sessions/{sid}/score", headers=server.admin)
        assert scored.status_code == 200, scored.text
    stored = {i["question_uuid"]: i["response"] for i in QuestionBank(server.dsn).judged_items(sid)}
    return {"answers": stored, "scores": scored.json()["scores"]}


def duplicate_burst(server: Serving, sid: str, me: dict[str, str], position: int, copies: int) -> list[dict]:
    """``copies`` submissions of one answer slot at once, each on its own connection."""
    barrier = threading.Barrier(copies)

    def submit(i: int) -> dict:
        with httpx.Client(base_url=server.base, timeout=120) as http:
            barrier.wait()
            r = http.post(f"/sessions/{sid}/answers", json={"position": position, "answer": f"copy {i}"}, headers=me)
        return {"i": i, "code": r.status_code, "pid": int(r.headers[WORKER_HEADER]), "body": r.json()}

    with ThreadPoolExecutor(max_workers=copies) as pool:
        return list(pool.map(submit, range(copies)))


def register_race(server: Serving, copies: int) -> list[tuple[int, int]]:
    """``copies`` session requests for one examinee name at once, each on its own connection: (status, pid)."""
    barrier = threading.Barrier(copies)

    def create(_: int) -> tuple[int, int]:
        with httpx.Client(base_url=server.base, timeout=120) as http:
            barrier.wait()
            r = http.post(
                "/admin/sessions",
                json={"model": "race-model", "questions": 2, "examinee": "alice"},
                headers=server.admin,
            )
        return r.status_code, int(r.headers[WORKER_HEADER])

    with ThreadPoolExecutor(max_workers=copies) as pool:
        return list(pool.map(create, range(copies)))


def open_sessions(dsn: str, worker: int, together: Any) -> list[str]:
    """Two sessions of one model, opened by this process as the others open theirs: their questions."""
    bank = QuestionBank(dsn)
    asked = []
    for k in range(2):
        together.wait()  # every process's bank is open: the four sample at the same moment
        bank.create_session(f"p{worker}-{k}", model="shared-model", n=4, seed=f"{worker}:{k}")
        asked += bank.question_ids(f"p{worker}-{k}")
    return asked


def test_sessions_of_one_model_opened_by_several_processes_at_once_never_share_a_question(fresh_postgres_db):
    """Section 2.2: no question twice in a model's cycle, also when four processes sample at the same time."""
    dsn = fresh_postgres_db("llmeval_workers_sampling")
    import_file(QuestionBank(dsn), SAMPLE)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(4, mp_context=context) as pool:
        together = manager.Barrier(4)
        futures = [pool.submit(open_sessions, dsn, w, together) for w in range(4)]
        asked = [q for f in futures for q in f.result()]
    assert len(asked) == 4 * 2 * 4 <= BANK_SIZE and len(set(asked)) == len(asked)


def test_two_workers_accept_exactly_one_of_concurrent_duplicates_and_score_an_exam_as_one_process_does(
    tmp_path, fresh_postgres_db, judge, record_property
):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    one = Serving(tmp_path / "one", fresh_postgres_db("llmeval_workers_one"), 1, judge, "--rate-limit", "10000")
    try:
        alone = full_exam(one)
        assert one.stop() == 0
    finally:
        one.close()
    two = Serving(tmp_path / "two", fresh_postgres_db("llmeval_workers_two"), 2, judge, "--rate-limit", "10000")
    try:
        workers = descendants(two.proc.pid)
        positions, copies = 8, 16
        with httpx.Client(base_url=two.base, timeout=120) as http:
            s = http.post(
                "/admin/sessions", json={"model": "dup-model", "questions": positions}, headers=two.admin
            ).json()
            me, sid = auth(s["token"]), s["session_id"]
            bursts = []
            for position in range(positions):
                assert http.get(f"/sessions/{sid}/next", headers=me).json()["position"] == position
                bursts.append(duplicate_burst(two, sid, me, position, copies))
        stored = QuestionBank(two.dsn).judged_items(sid)
        for position, burst in enumerate(bursts):
            codes = Counter(r["code"] for r in burst)
            assert codes == {200: 1, 409: copies - 1}, codes
            assert all(r["body"]["detail"]["error"] == "resubmission" for r in burst if r["code"] == 409)
            winner = next(r for r in burst if r["code"] == 200)
            assert stored[position]["response"] == f"copy {winner['i']}"
        pids = {r["pid"] for burst in bursts for r in burst}
        assert len(pids) == 2 and pids <= workers and two.proc.pid not in pids  # two worker processes answered
        crossed = sum(any(r["pid"] != next(w["pid"] for w in b if w["code"] == 200) for r in b) for b in bursts)
        assert crossed > 0  # duplicates refused by the process that did not store the answer

        registered = register_race(two, copies)
        assert Counter(code for code, _ in registered) == {200: 1, 409: copies - 1}
        assert len({pid for _, pid in registered}) == 2
        assert len(QuestionBank(two.dsn).sessions_of("race-model")) == 1  # the refused ones allocated nothing

        shared = full_exam(two)
        assert shared == alone  # same answers per question, same scores
        assert two.stop() == 0
    finally:
        two.close()
    gone(workers)
    log = [json.loads(line) for line in (two.run_dir / "access_log.jsonl").read_text().splitlines()]
    assert {e["pid"] for e in log} == pids
    assert json.loads((two.run_dir / "summary.json").read_text())["authenticated_requests"] == len(log)
    assert not list(two.run_dir.glob("*.worker-*.jsonl"))  # the workers' parts merged
    figures = {
        "bursts": positions,
        "copies_per_burst": copies,
        "accepted_per_burst": 1,
        "requests_per_worker": dict(Counter(e["pid"] for e in log)),
        "bursts_refused_across_processes": crossed,
    }
    record_property("workers", json.dumps(figures))
    print("\nllmeval exam server, 2 workers:", json.dumps(figures))


def test_the_rate_limit_is_one_bucket_for_all_workers(tmp_path, fresh_postgres_db, judge):
    server = Serving(tmp_path, fresh_postgres_db("llmeval_workers_rate"), 2, judge, "--rate-limit", "0.01")
    try:
        with httpx.Client(base_url=server.base, timeout=120) as http:
            s = http.post("/admin/sessions", json={"model": "m", "questions": 1}, headers=server.admin).json()
        me, path = auth(s["token"]), f"/sessions/{s['session_id']}"

        def get(_: int) -> tuple[int, int]:
            with httpx.Client(base_url=server.base, timeout=120) as http:
                r = http.get(path, headers=me)
            return r.status_code, int(r.headers[WORKER_HEADER])

        with ThreadPoolExecutor(max_workers=8) as pool:
            replies = list(pool.map(get, range(60)))  # one token per 100 s: no refill while this runs
        assert server.stop() == 0
    finally:
        server.close()
    assert len({pid for _, pid in replies}) == 2
    assert Counter(code for code, _ in replies) == {200: 40, 429: 20}  # the burst of 40, once, not once per worker


def test_sigterm_to_the_parent_finishes_a_workers_request_in_flight_exits_0_and_leaves_no_process(
    tmp_path, fresh_postgres_db, judge
):
    server = Serving(tmp_path, fresh_postgres_db("llmeval_workers_term"), 2, judge)
    try:
        workers = descendants(server.proc.pid)
        assert len(workers) >= 2
        s = httpx.post(
            f"{server.base}/admin/sessions", json={"model": "m", "questions": 2}, headers=server.admin
        ).json()
        me, sid = auth(s["token"]), s["session_id"]
        assert httpx.get(f"{server.base}/sessions/{sid}/next", headers=me).json()["position"] == 0
        body = json.dumps({"position": 0, "answer": "sent across the stop"}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as conn:
            conn.sendall(
                f"POST /sessions/{sid}/answers HTTP/1.1\r\nHost: x\r\nAuthorization: {me['Authorization']}"
                f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body[:10]
            )
            time.sleep(0.5)
            server.proc.send_signal(signal.SIGTERM)
            # every worker closes the listener while the request is in flight
            assert listener_closed(server.port, within_s=60), "the listener stayed open after SIGTERM"
            conn.sendall(body[10:])
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and b'"accepted":true' in reply
        assert server.proc.wait(timeout=120) == 0
    finally:
        server.close()
    gone(workers)
    assert QuestionBank(server.dsn).judged_items(sid)[0]["response"] == "sent across the stop"
    paths = [json.loads(line)["path"] for line in (server.run_dir / "access_log.jsonl").read_text().splitlines()]
    assert paths[-1] == f"/sessions/{sid}/answers"
    assert json.loads((server.run_dir / "summary.json").read_text())["authenticated_requests"] == len(paths)


def test_sigterm_with_20_clients_sending_a_byte_every_2_s_stops_every_worker_within_the_bound_and_merges_the_logs(
    tmp_path, fresh_postgres_db, judge
):
    """The workers answer each slow client 503 once the arrival grace has passed (they held the stop for as long
    as they kept sending, and an orchestrator's SIGKILL after its grace period lost the workers' unmerged logs)."""
    server = Serving(tmp_path, fresh_postgres_db("llmeval_workers_slow"), 2, judge)
    try:
        workers = descendants(server.proc.pid)
        assert httpx.get(f"{server.base}/admin/leaderboard", headers=server.admin, timeout=30).status_code == 200
        slow = SlowBodies(server.port, 20)
        for _ in range(4):  # each worker has read the heads it accepted (new connections go to either worker)
            assert httpx.get(f"{server.base}/health", timeout=30).status_code == 200
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=SHUTDOWN_TIMEOUT_S + 15)
        stopped_s = time.monotonic() - signalled
        slow.close()
    finally:
        server.close()
    gone(workers)
    assert code == 0 and "Traceback" not in server.log(), server.log()
    print(f"\nexam server (2 workers), SIGTERM with 20 slow clients: stopped in {stopped_s:.2f} s")
    assert stopped_s < SHUTDOWN_TIMEOUT_S + 3, stopped_s  # + the supervisor's 0.5 s poll, the merge and the exit
    assert slow.statuses() == ["HTTP/1.1 503 Service Unavailable"] * 20
    assert not list(server.run_dir.glob("*.worker-*.jsonl"))  # every worker's part merged
    paths = [json.loads(line)["path"] for line in (server.run_dir / "access_log.jsonl").read_text().splitlines()]
    assert paths == ["/admin/leaderboard"]


@pytest.fixture
def no_umask():
    """A umask of 0 meanwhile (in this process and the servers it starts): a file gets every permission its maker
    asks for, 0644 or 0666 for one made without a mode."""
    before = os.umask(0)
    yield
    os.umask(before)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("workers", [1, 2])
def test_the_bank_and_the_judge_logs_quoting_its_reference_answers_are_their_owners_only_whatever_the_umask(
    tmp_path, fresh_postgres_db, judge, no_umask, workers
):
    """A new SQLite bank (its folder, journal files and secret), the serving run's folder, the workers' parts of
    the judge log and the merged event log: 0600 files in 0700 folders, so no other local user reads the
    references (a bank was 0644 in a 0755 folder, the judge log 0644)."""
    banks = tmp_path / "banks"
    server = Serving(
        tmp_path,
        str(banks / "bank.sqlite") if workers == 1 else fresh_postgres_db("llmeval_private"),
        workers,
        judge,
        "--rate-limit",
        "10000",
    )
    try:
        full_exam(server)  # scored: the judge's prompts quote the reference answers
        serving = [*server.run_dir.glob("events*.jsonl"), *(banks.iterdir() if workers == 1 else [])]
        while_serving = {p.name: _mode(p) for p in serving}
        assert server.stop() == 0
    finally:
        server.close()
    assert len(serving) >= (4 if workers == 1 else 2)  # bank, -wal, -shm and secret; or each worker's part
    assert while_serving == {name: 0o600 for name in while_serving}
    kept = [server.run_dir / name for name in ("events.jsonl", "access_log.jsonl", "admin_token")]
    assert {p.name: _mode(p) for p in kept} == {p.name: 0o600 for p in kept}
    assert _mode(server.run_dir) == 0o700 and (workers > 1 or _mode(banks) == 0o700)
    references = [json.loads(line)["explanation"] for line in SAMPLE.read_text().splitlines()]
    judged = [
        json.dumps(e["messages"]) for e in map(json.loads, kept[0].read_text().splitlines()) if e["role"] == "evaluator"
    ]
    assert any(ref in prompt for prompt in judged for ref in references)  # what the modes protect


def test_more_than_one_worker_over_a_sqlite_bank_or_without_serve_is_one_line_and_exit_2(tmp_path, capsys):
    from dyneval.cli import main

    bank = tmp_path / "bank.sqlite"
    import_file(QuestionBank(bank), SAMPLE)
    for args, says in (
        (["--serve", "--workers", "2", "--bank-db", str(bank)], "need a PostgreSQL bank"),
        (["--workers", "2", "--leaderboard", "--bank-db", str(bank)], "needs --serve"),
    ):
        code = main(["--protocol", "llmeval", *args, "--out", str(tmp_path / "runs")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "--workers" in err and says in err, err
        assert not (tmp_path / "runs").exists()
