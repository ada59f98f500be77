"""The exam server: JWT outer layer (401/403), quota inner layer (409/429), answer stripping, rate limit,
request size limits (413/431), the signing secret's file, scoring through the graph, a bounded load test with
concurrent examinees on 127.0.0.1, and a serving process's memory and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from dyneval.nodes.llmeval.bankio import import_file
from dyneval.protocols.llmeval import server as exam_server
from dyneval.protocols.llmeval.server import SECRET_ENVS, SHUTDOWN_TIMEOUT_S, ExamServer, create_app, http_server
from dyneval.runtime.embedded import free_port
from dyneval.state.errors import InputError
from dyneval.state.llmeval import LLMEvalContext
from dyneval.stores.bank_examinees import LEGACY_SECRET_KEY
from dyneval.stores.question_bank import QuestionBank
from tests.conftest import make_services
from tests.fakes import ScriptedChat
from tests.listeners import listener_closed
from tests.slow_clients import SlowBodies

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "llmeval" / "bank.jsonl"
SECRET = "test-secret-of-at-least-32-bytes-length!"


def judge(messages, tool):
    return {"rating": 2, "reason": "fine"}


def make_server(tmp_path: Path, secret: str | None = SECRET, **kw) -> ExamServer:
    """A server over ``tmp_path/bank.sqlite`` (the sample imported once); ``secret=None``: the bank's own."""
    bank_path = tmp_path / "bank.sqlite"
    if not bank_path.exists():
        import_file(QuestionBank(bank_path), SAMPLE)
    svc = make_services(
        tmp_path,
        protocol="llmeval",
        chats={"evaluator": ScriptedChat(judge), "target": ScriptedChat(lambda m, t: "unused")},
    )
    ctx = LLMEvalContext(services=svc, bank_db=str(bank_path), questions=5)
    return ExamServer(ctx, secret=secret, **kw)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def no_secret_env(monkeypatch):
    """Neither secret variable set: the server takes its secret from the file."""
    for name in SECRET_ENVS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def exam(tmp_path):
    server = make_server(tmp_path)
    client = TestClient(create_app(server))
    admin = auth(server.admin_token())
    return server, client, admin


def new_session(client, admin, **body) -> dict:
    r = client.post("/admin/sessions", json={"model": "remote-model", **body}, headers=admin)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_whole_session_over_http_never_transmits_answers_or_explanations(exam):
    server, client, admin = exam
    created = new_session(client, admin, questions=5, paradigm="few-shot")
    me = auth(created["token"])
    sid = created["session_id"]
    bank = server.bank
    secrets_ = []
    for u in bank.question_ids(sid):
        q = bank.get(u)
        secrets_.append(q.explanation)
        if len(q.answer) > 6 and q.answer.lower() not in q.question.lower():
            secrets_.append(q.answer)
    bodies = [json.dumps(created)]
    for i in range(5):
        r = client.get(f"/sessions/{sid}/next", headers=me)
        assert r.status_code == 200
        payload = r.json()
        bodies.append(r.text)
        assert payload["position"] == i
        assert set(payload) == {
            "session_id",
            "position",
            "question_id",
            "discipline",
            "sub_discipline",
            "qtype",
            "question",
            "paradigm",
            "messages",
        }
        r = client.post(f"/sessions/{sid}/answers", json={"position": i, "answer": f"my answer {i}"}, headers=me)
        bodies.append(r.text)
        assert r.status_code == 200
    bodies.append(client.get(f"/sessions/{sid}", headers=me).text)
    bodies.append(client.get(f"/sessions/{sid}/next", headers=me).text)
    for body in bodies:
        for key in ('"answer":', '"explanation":', '"hint":', '"stars":'):
            assert key not in body
        for secret in secrets_:
            assert secret not in body
    scored = client.post(f"/admin/sessions/{sid}/score", headers=admin)
    assert scored.status_code == 200 and scored.json()["scores"]["S"] == pytest.approx(200 / 3)
    rows = client.get("/admin/leaderboard", headers=admin).json()["rows"]
    assert rows[0]["model"] == "remote-model" and rows[0]["sessions"] == 1


def test_examinee_token_cannot_read_or_answer_another_session_and_cannot_act_as_admin(exam):
    _, client, admin = exam
    a, b = new_session(client, admin), new_session(client, admin)
    token_a = auth(a["token"])
    for method, path, body in (
        ("get", f"/sessions/{b['session_id']}", None),
        ("get", f"/sessions/{b['session_id']}/next", None),
        ("post", f"/sessions/{b['session_id']}/answers", {"position": 0, "answer": "x"}),
        ("post", "/admin/sessions", {"model": "x"}),
        ("post", f"/admin/sessions/{a['session_id']}/score", None),
        ("get", "/admin/leaderboard", None),
    ):
        r = client.request(method, path, json=body, headers=token_a)
        assert r.status_code == 403, (path, r.status_code, r.text)
    assert client.get(f"/sessions/{a['session_id']}/next", headers=token_a).status_code == 200


def test_over_quota_and_resubmission_are_rejected(exam):
    _, client, admin = exam
    s = new_session(client, admin, questions=2)
    me, sid = auth(s["token"]), s["session_id"]
    assert (
        client.post(f"/sessions/{sid}/answers", json={"position": 0, "answer": "early"}, headers=me).status_code == 409
    )  # not delivered yet
    assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == 0
    assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == 0  # no second question while pending
    assert (
        client.post(f"/sessions/{sid}/answers", json={"position": 1, "answer": "skip"}, headers=me).status_code == 409
    )  # out of order
    assert client.post(f"/sessions/{sid}/answers", json={"position": 0, "answer": "a"}, headers=me).status_code == 200
    r = client.post(f"/sessions/{sid}/answers", json={"position": 0, "answer": "again"}, headers=me)
    assert r.status_code == 409 and r.json()["detail"]["error"] == "resubmission"
    client.get(f"/sessions/{sid}/next", headers=me)
    assert client.post(f"/sessions/{sid}/answers", json={"position": 1, "answer": "b"}, headers=me).status_code == 200
    r = client.get(f"/sessions/{sid}/next", headers=me)
    assert r.status_code == 429 and r.json()["detail"]["error"] == "exhausted"
    assert (
        client.post(f"/sessions/{sid}/answers", json={"position": 2, "answer": "extra"}, headers=me).status_code == 429
    )
    status = client.get(f"/sessions/{sid}", headers=me).json()["quota"]
    assert status == {"allocated": 2, "undelivered": 0, "pending": 0, "completed": 2}
    unfinished = new_session(client, admin, questions=2)
    assert client.post(f"/admin/sessions/{unfinished['session_id']}/score", headers=admin).status_code == 409


def test_expired_forged_and_missing_tokens_get_401(exam):
    server, client, admin = exam
    s = new_session(client, admin)
    path = f"/sessions/{s['session_id']}/next"
    expired = server.issue(s["examinee"], "examinee", s["session_id"], ttl_s=-10)
    claims = jwt.decode(s["token"], SECRET, algorithms=["HS256"])
    forged = jwt.encode(claims, "another-secret-another-secret-12345", algorithm="HS256")
    unsigned = jwt.encode({**claims, "role": "admin"}, None, algorithm="none")
    tampered = s["token"][:-4] + ("AAAA" if not s["token"].endswith("AAAA") else "BBBB")
    for token in (expired, forged, unsigned, tampered, "not-a-jwt"):
        r = client.get(path, headers=auth(token))
        assert r.status_code == 401, (token[:20], r.status_code)
    assert client.get(path).status_code == 401
    assert "expired" in client.get(path, headers=auth(expired)).json()["detail"]
    # a validly signed token of a user the server never registered: 403 (Algorithm 1, line 22)
    ghost = server.issue("ghost", "examinee", s["session_id"])
    assert client.get(path, headers=auth(ghost)).status_code == 403


def test_requests_beyond_the_rate_limit_get_429(tmp_path):
    server = make_server(tmp_path, rate=0.01, burst=3)  # one token per 100 s: no refill during the test
    client = TestClient(create_app(server))
    admin = auth(server.admin_token())
    s = client.post("/admin/sessions", json={"model": "m"}, headers=admin).json()
    me = auth(s["token"])
    codes = [client.get(f"/sessions/{s['session_id']}", headers=me).status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    r = client.get(f"/sessions/{s['session_id']}", headers=me)
    assert r.status_code == 429 and "rate limit" in r.json()["detail"] and int(r.headers["retry-after"]) >= 1


def _in_thread(server: ExamServer, **options: Any) -> tuple[threading.Thread, Any, int]:
    """``server`` served by uvicorn on a free 127.0.0.1 port in a thread of this process, once it has started."""
    port = free_port()
    uv = http_server(server, port, **options)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started
    return thread, uv, port


def test_load_many_concurrent_examinees_lose_and_duplicate_no_answer(tmp_path, record_property):
    """Bounded load test on 127.0.0.1: 32 examinee clients x 8 questions, each also trying one resubmission."""
    server = make_server(tmp_path, rate=10000.0, burst=10000)
    thread, uv, port = _in_thread(server, limit_concurrency=200)
    base = f"http://127.0.0.1:{port}"
    clients, per = 32, 8
    try:
        with httpx.Client(base_url=base, timeout=30) as admin_http:
            admin = auth(server.admin_token())
            sessions = [
                admin_http.post("/admin/sessions", json={"model": f"load-{i}", "questions": per}, headers=admin).json()
                for i in range(clients)
            ]
        latencies: list[float] = []
        lock = threading.Lock()
        stop_at = time.monotonic() + 90  # the whole test is bounded in time

        def examinee(s: dict) -> dict:
            me, sid = auth(s["token"]), s["session_id"]
            sent, codes = {}, []
            with httpx.Client(base_url=base, timeout=30) as http:
                while time.monotonic() < stop_at:
                    t0 = time.perf_counter()
                    r = http.get(f"/sessions/{sid}/next", headers=me)
                    t1 = time.perf_counter()
                    if r.status_code == 429:
                        break
                    pos = r.json()["position"]
                    text = f"{sid}:{pos}:{r.json()['question_id']}"
                    a = http.post(f"/sessions/{sid}/answers", json={"position": pos, "answer": text}, headers=me)
                    t2 = time.perf_counter()
                    codes.append(a.status_code)
                    sent[pos] = text
                    if pos == 0:  # one resubmission attempt per client
                        codes.append(
                            http.post(
                                f"/sessions/{sid}/answers", json={"position": 0, "answer": "dup"}, headers=me
                            ).status_code
                        )
                    with lock:
                        latencies.extend([t1 - t0, t2 - t1])
            return {"sid": sid, "sent": sent, "codes": codes}

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            results = list(pool.map(examinee, sessions))
        elapsed = time.perf_counter() - started
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
    bank = server.bank
    for res in results:
        assert sorted(res["sent"]) == list(range(per)), res["sid"]
        assert res["codes"].count(200) == per and res["codes"].count(409) == 1
        items = bank.judged_items(res["sid"])
        assert [i["status"] for i in items] == ["completed"] * per
        assert [i["response"] for i in items] == [res["sent"][p] for p in range(per)]  # nothing lost or swapped
        assert [i["response"].split(":")[2] for i in items] == bank.question_ids(res["sid"])
    requests = len(latencies) + clients  # + the resubmission attempts
    figures = {
        "clients": clients,
        "questions_per_client": per,
        "answers_stored": clients * per,
        "requests": requests,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(requests / elapsed, 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "latency_p95_ms": round(sorted(latencies)[int(0.95 * len(latencies))] * 1000, 1),
    }
    record_property("load_test", json.dumps(figures))
    print("\nllmeval exam server load test:", json.dumps(figures))
    (tmp_path / "load_test.json").write_text(json.dumps(figures))
    assert elapsed < 90


def test_examinee_named_admin_is_refused_and_the_admin_keeps_its_rights(exam):
    server, client, admin = exam
    for name in ("admin", "Admin", " ADMIN "):
        r = client.post("/admin/sessions", json={"model": "m", "examinee": name}, headers=admin)
        assert r.status_code == 422, (name, r.status_code)
    assert client.get("/admin/leaderboard", headers=admin).status_code == 200
    assert server.bank.examinee_session("admin") is None
    # a validly signed examinee token named admin is no user at all
    s = new_session(client, admin)
    posing = server.issue("admin", "examinee", s["session_id"])
    assert client.get(f"/sessions/{s['session_id']}/next", headers=auth(posing)).status_code == 403


def test_an_examinee_name_is_registered_once_and_the_first_holder_keeps_its_session(exam):
    _, client, admin = exam
    first = new_session(client, admin, examinee="alice")
    r = client.post("/admin/sessions", json={"model": "m", "examinee": "alice"}, headers=admin)
    assert r.status_code == 409 and "already registered" in r.text
    assert client.get(f"/sessions/{first['session_id']}/next", headers=auth(first["token"])).status_code == 200


def test_concurrent_duplicate_submissions_accept_exactly_one(exam):
    server, client, admin = exam
    s = new_session(client, admin, questions=2)
    me, sid = auth(s["token"]), s["session_id"]
    assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == 0
    barrier = threading.Barrier(12)

    def submit(i: int) -> int:
        barrier.wait()
        return client.post(
            f"/sessions/{sid}/answers", json={"position": 0, "answer": f"copy {i}"}, headers=me
        ).status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        codes = list(pool.map(submit, range(12)))
    assert sorted(codes) == [200] + [409] * 11
    item = server.bank.judged_items(sid)[0]
    assert item["status"] == "completed" and item["response"].startswith("copy ")


def test_a_restarted_server_keeps_examinees_sessions_answers_and_tokens(tmp_path, no_secret_env):
    """Two server processes over one database file, neither given a secret: the second accepts the first's
    tokens and continues the session exactly where it stopped."""
    first = make_server(tmp_path, secret=None)  # the signing secret kept in the file beside the bank
    client = TestClient(create_app(first))
    admin = auth(first.admin_token())
    s = new_session(client, admin, questions=3, examinee="bob")
    me, sid = auth(s["token"]), s["session_id"]
    for pos in (0, 1):
        assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == pos
        assert (
            client.post(f"/sessions/{sid}/answers", json={"position": pos, "answer": f"a{pos}"}, headers=me).status_code
            == 200
        )
    assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == 2  # delivered, unanswered
    first.bank.close()

    second = make_server(tmp_path, secret=None)
    assert second.secret == first.secret
    client = TestClient(create_app(second))
    assert client.get(f"/sessions/{sid}", headers=me).json()["quota"] == {
        "allocated": 3,
        "undelivered": 0,
        "pending": 1,
        "completed": 2,
    }
    assert (
        client.post(f"/sessions/{sid}/answers", json={"position": 1, "answer": "again"}, headers=me).status_code == 409
    )
    assert client.get(f"/sessions/{sid}/next", headers=me).json()["position"] == 2
    assert client.post(f"/sessions/{sid}/answers", json={"position": 2, "answer": "a2"}, headers=me).status_code == 200
    assert [i["response"] for i in second.bank.judged_items(sid)] == ["a0", "a1", "a2"]
    assert client.post("/admin/sessions", json={"model": "m", "examinee": "bob"}, headers=admin).status_code == 409
    assert client.post(f"/admin/sessions/{sid}/score", headers=admin).status_code == 200


def test_an_expired_admin_token_is_replaced_by_one_the_operator_reissues_without_a_run_directory(
    tmp_path, capsys, no_secret_env
):
    from dyneval.cli import main

    server = make_server(tmp_path, secret=None)  # the secret file's key, as `--serve` uses
    client = TestClient(create_app(server))
    expired = server.issue("admin", "admin", ttl_s=-1)
    assert client.get("/admin/leaderboard", headers=auth(expired)).status_code == 401
    out = tmp_path / "runs"
    for _ in range(2):
        capsys.readouterr()
        code = main(
            [
                "--protocol",
                "llmeval",
                "--admin-token",
                "--bank-db",
                str(tmp_path / "bank.sqlite"),
                "--out",
                str(out),
                "--skip-preflight",
            ]
        )
        assert code == 0
        fresh = capsys.readouterr().out.strip().splitlines()[-1]
        assert client.get("/admin/leaderboard", headers=auth(fresh)).status_code == 200
    assert not out.exists()  # no run directory, no token file, not even the --out folder this call made


@pytest.mark.parametrize(
    "port, says",
    [
        ("99999", "between 1 and 65535"),
        ("0", "between 1 and 65535"),
        ("-1", "between 1 and 65535"),
        ("http", "invalid int"),
        ("80.5", "invalid int"),
    ],
)
def test_an_invalid_port_is_one_line_and_exit_2(tmp_path, capsys, port, says):
    from dyneval.cli import main

    code = main(
        [
            "--protocol",
            "llmeval",
            "--serve",
            "--port",
            port,
            "--out",
            str(tmp_path / "runs"),
            "--bank-db",
            str(tmp_path / "bank.sqlite"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--port" in err and says in err
    assert not (tmp_path / "bank.sqlite").exists() and not (tmp_path / "runs").exists()


def test_a_port_from_the_config_file_is_checked_and_blamed_on_its_key(tmp_path, capsys):
    from dyneval.cli import main

    config = tmp_path / "eval.toml"
    config.write_text("[params]\nport = 99999\n", encoding="utf-8")
    assert main(["--protocol", "llmeval", "--serve", "--config", str(config), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "eval.toml" in err and "port" in err and "between 1 and 65535" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("given", ["flag", "config"])
def test_a_port_in_use_is_one_line_naming_it_and_exit_2_leaving_nothing_behind(tmp_path, capsys, given):
    """Not exit 3 (uvicorn's start-up failure, documented as "budget reached") with a run folder and a cache left."""
    from dyneval.cli import main

    bank = tmp_path / "bank.sqlite"
    import_file(QuestionBank(bank), SAMPLE)
    out = tmp_path / "runs"
    out.mkdir()  # an --out that exists already: nothing may be left in it
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = tmp_path / "eval.toml"
        config.write_text(f"[params]\nport = {port}\n", encoding="utf-8")
        where = ["--port", str(port)] if given == "flag" else ["--config", str(config)]
        code = main(["--protocol", "llmeval", "--serve", *where, "--bank-db", str(bank), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"127.0.0.1:{port}" in err and "in use" in err, err
    assert ("--port" in err) if given == "flag" else ("eval.toml" in err and "port" in err)
    assert not any(out.iterdir())


def test_an_expired_examinee_token_is_reissued_by_the_admin_and_the_session_goes_on(exam):
    server, client, admin = exam
    s = new_session(client, admin, questions=2, examinee="carol")
    sid = s["session_id"]
    assert client.get(f"/sessions/{sid}/next", headers=auth(s["token"])).json()["position"] == 0
    expired = auth(server.issue("carol", "examinee", sid, ttl_s=-1))
    assert client.get(f"/sessions/{sid}/next", headers=expired).status_code == 401
    r = client.post(f"/admin/sessions/{sid}/token", headers=admin)
    assert r.status_code == 200 and r.json()["examinee"] == "carol"
    fresh = auth(r.json()["token"])
    r = client.post(f"/sessions/{sid}/answers", json={"position": 0, "answer": "a"}, headers=fresh)
    assert r.status_code == 200
    assert client.post(f"/admin/sessions/{sid}/token", headers=fresh).status_code == 403  # examinees cannot
    assert client.post("/admin/sessions/srv-none/token", headers=admin).status_code == 404


def _bank_holds(path: Path, secret: str) -> bool:
    """Whether any row of any table of the SQLite bank, or any byte of its files (database, write-ahead log),
    holds ``secret``."""
    with sqlite3.connect(path) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = [row for t in tables for row in db.execute(f'SELECT * FROM "{t}"')]
    files = [f for f in (path, path.with_name(path.name + "-wal")) if f.exists()]
    return any(secret in str(value) for row in rows for value in row) or any(
        secret.encode() in f.read_bytes() for f in files
    )


def test_the_signing_secret_lives_in_an_owner_only_file_beside_the_bank_and_not_in_it(tmp_path, no_secret_env):
    server = make_server(tmp_path, secret=None)
    secret_file = tmp_path / "bank.sqlite.secret"
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert secret_file.read_text().strip() == server.secret and len(server.secret) >= 32
    client = TestClient(create_app(server))
    assert client.get("/admin/leaderboard", headers=auth(server.admin_token())).status_code == 200
    server.bank.close()
    assert not _bank_holds(tmp_path / "bank.sqlite", server.secret)
    assert make_server(tmp_path, secret=None).secret == server.secret  # read back, not made anew


def test_a_secret_an_older_bank_kept_inside_moves_to_the_file_and_is_erased_from_the_bank(tmp_path, no_secret_env):
    bank_path = tmp_path / "bank.sqlite"
    legacy = "0123456789abcdef" * 4
    bank = QuestionBank(bank_path)
    import_file(bank, SAMPLE)
    with bank.engine.begin() as conn:  # as an older version stored it
        conn.exec_driver_sql("INSERT INTO llmeval_meta (key, value) VALUES (?, ?)", (LEGACY_SECRET_KEY, legacy))
    bank.close()
    old_token = jwt.encode(
        {
            "sub": "admin",
            "role": "admin",
            "permissions": ["leaderboard:read"],
            "iat": int(time.time()),
            "exp": int(time.time()) + 600,
        },
        legacy,
        algorithm="HS256",
    )
    server = make_server(tmp_path, secret=None)
    assert server.secret == legacy  # tokens issued before the upgrade keep working
    assert TestClient(create_app(server)).get("/admin/leaderboard", headers=auth(old_token)).status_code == 200
    secret_file = tmp_path / "bank.sqlite.secret"
    assert secret_file.read_text().strip() == legacy and secret_file.stat().st_mode & 0o777 == 0o600
    assert not _bank_holds(bank_path, legacy)  # while the server runs, write-ahead log included


@pytest.mark.parametrize("form", ["url", "libpq key=value"])
def test_a_postgresql_banks_secret_moves_out_of_the_database_into_the_cache_folder(
    tmp_path, fresh_postgres_db, no_secret_env, form, monkeypatch
):
    from psycopg.conninfo import conninfo_to_dict

    url = fresh_postgres_db("llmeval_secret_" + ("url" if form == "url" else "kv"))
    dsn = url if form == "url" else " ".join(f"{k}={v}" for k, v in conninfo_to_dict(url).items())
    monkeypatch.chdir(tmp_path)  # a DSN taken for a file name put the secret (and the bank) here
    legacy = "fedcba9876543210" * 4
    bank = QuestionBank(url)
    with bank.engine.begin() as conn:  # as an older version stored it
        conn.exec_driver_sql("INSERT INTO llmeval_meta (key, value) VALUES (%s, %s)", (LEGACY_SECRET_KEY, legacy))
    svc = make_services(tmp_path, protocol="llmeval")
    server = ExamServer(LLMEvalContext(services=svc, bank_db=dsn))
    secret_file = svc.cache_dir / f"llmeval_exam_{bank.bank_id()}.secret"
    assert server.secret == legacy and secret_file.read_text().strip() == legacy
    assert secret_file.stat().st_mode & 0o777 == 0o600
    with bank.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM llmeval_meta WHERE value = %s", (legacy,)).scalar() == 0
    assert not [p for p in tmp_path.iterdir() if "=" in p.name]


def test_the_secret_comes_from_either_environment_variable_and_a_short_or_exposed_one_is_refused(
    tmp_path, monkeypatch, no_secret_env
):
    for name in SECRET_ENVS:
        monkeypatch.setenv(name, f"{name}-of-at-least-32-bytes-length")
        assert make_server(tmp_path, secret=None).secret == f"{name}-of-at-least-32-bytes-length"
        monkeypatch.setenv(name, "short")
        with pytest.raises(InputError, match=f"{name}.*at least 32 bytes"):
            make_server(tmp_path, secret=None)
        monkeypatch.delenv(name)
    secret_file = tmp_path / "bank.sqlite.secret"
    make_server(tmp_path, secret=None)
    secret_file.chmod(0o644)
    with pytest.raises(InputError, match="readable by other users"):
        make_server(tmp_path, secret=None)


def test_oversized_bodies_and_headers_are_refused_before_parsing_and_authentication(tmp_path):
    server = make_server(tmp_path, max_body=4096, max_headers=2048)
    client = TestClient(create_app(server))
    admin = auth(server.admin_token())
    big = json.dumps({"model": "m", "padding": "x" * 5000})
    r = client.post("/admin/sessions", content=big, headers={"content-type": "application/json"})  # no token
    assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]
    chunked = client.post(
        "/admin/sessions",
        content=iter([big[:3000].encode(), big[3000:].encode()]),
        headers={"content-type": "application/json", **admin},
    )  # no Content-Length
    assert chunked.status_code == 413
    r = client.get("/admin/leaderboard", headers={**admin, "x-filler": "a" * 2100})
    assert r.status_code == 431 and "2048 bytes" in r.json()["detail"]
    small = json.dumps({"model": "m", "questions": 1})
    assert (
        client.post("/admin/sessions", content=small, headers={"content-type": "application/json"}).status_code == 401
    )  # within the limits: on to authentication
    assert (
        client.post("/admin/sessions", content=small, headers={"content-type": "application/json", **admin}).status_code
        == 200
    )


def _serving(folder: Path) -> tuple[subprocess.Popen, str, dict[str, str]]:
    """``dyneval --protocol llmeval --serve`` as its own process over ``folder/bank.sqlite`` (the sample imported),
    once it answers: the process, its base URL and the admin token's header."""
    bank = folder / "bank.sqlite"
    import_file(QuestionBank(bank), SAMPLE)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNEVAL_")}
    with (folder / "server.log").open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dyneval",
                "--protocol",
                "llmeval",
                "--serve",
                "--port",
                str(port),
                "--bank-db",
                str(bank),
                "--out",
                str(folder / "runs"),
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # start-up imports are slow on a loaded machine
    while True:
        try:
            httpx.get(f"{base}/health", timeout=2)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, (folder / "server.log").read_text()
            time.sleep(0.3)
    token_file = next((folder / "runs").glob("*/admin_token"))
    assert token_file.stat().st_mode & 0o777 == 0o600
    return proc, base, auth(token_file.read_text().strip())


def _rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def test_a_serving_process_refuses_50_mb_bodies_and_1_mb_headers_without_growing(tmp_path, record_property):
    proc, base, _ = _serving(tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            http.post("/admin/sessions", content=b"{" * 2_000_000)  # warm the refusal path up
            before = _rss_kb(proc.pid)
            body = b"x" * (50 << 20)
            declared = http.post("/admin/sessions", content=body, headers={"content-type": "application/json"})
            pieces = (body[i : i + (1 << 20)] for i in range(0, len(body), 1 << 20))  # streamed: no Content-Length
            chunked = http.post("/admin/sessions", content=pieces, headers={"content-type": "application/json"})
            after = _rss_kb(proc.pid)
            headers = [
                http.get("/health", headers={"x-filler": "a" * size}).status_code for size in (20 << 10, 1 << 20)
            ]
            assert http.get("/health").status_code == 200  # still serving
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    figures = {"rss_before_kb": before, "rss_after_two_50_mb_bodies_kb": after, "growth_kb": after - before}
    record_property("body_limit", json.dumps(figures))
    print("\nllmeval exam server, 50 MB bodies:", json.dumps(figures))
    assert declared.status_code == 413 and chunked.status_code == 413  # no token sent: refused before the 401
    assert after - before < 4096
    assert headers == [431, 431]


def test_sigterm_closes_the_listener_finishes_the_request_in_flight_and_persists(tmp_path):
    proc, base, admin = _serving(tmp_path)
    try:
        s = httpx.post(f"{base}/admin/sessions", json={"model": "m", "questions": 2}, headers=admin).json()
        me, sid = auth(s["token"]), s["session_id"]
        assert httpx.get(f"{base}/sessions/{sid}/next", headers=me).json()["position"] == 0
        body = json.dumps({"position": 0, "answer": "sent across the stop"}).encode()
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(
                f"POST /sessions/{sid}/answers HTTP/1.1\r\nHost: x\r\nAuthorization: {me['Authorization']}"
                f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body[:10]
            )
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            # the listener closes while the request is in flight
            assert listener_closed(port, within_s=20), "the listener stayed open after SIGTERM"
            conn.sendall(body[10:])
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and b'"accepted":true' in reply
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    bank = QuestionBank(tmp_path / "bank.sqlite")
    assert bank.judged_items(sid)[0]["response"] == "sent across the stop"
    run_dir = next((tmp_path / "runs").glob("*/admin_token")).parent
    paths = [json.loads(line)["path"] for line in (run_dir / "access_log.jsonl").read_text().splitlines()]
    assert paths[-1] == f"/sessions/{sid}/answers"
    assert json.loads((run_dir / "summary.json").read_text())["authenticated_requests"] == len(paths)


def test_a_request_that_does_not_arrive_whole_within_the_timeout_gets_408_and_its_connection_closes(
    tmp_path, monkeypatch
):
    """A body sent a byte at a time, a request head never finished and a connection that sends nothing are each
    refused once the request timeout passes; the server goes on serving."""
    monkeypatch.setattr(exam_server, "REQUEST_TIMEOUT_S", 1.5)
    thread, uv, port = _in_thread(make_server(tmp_path))
    slow = SlowBodies(port, 3, every_s=0.2)
    head = socket.create_connection(("127.0.0.1", port), timeout=30)
    head.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    idle = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        deadline = time.monotonic() + 30
        while slow.open_count() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slow.statuses() == ["HTTP/1.1 408 Request Timeout"] * 3
        for conn in (head, idle):
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 408 ") and b"request not received within 1.5 s" in reply
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        slow.close()
        head.close()
        idle.close()
        uv.should_exit = True
        thread.join(timeout=30)


def test_sigterm_with_20_clients_sending_a_byte_every_2_s_stops_within_its_bound_and_persists_the_log(tmp_path):
    """Each slow client is answered 503 once the arrival grace has passed, instead of holding the stop for as long
    as it keeps sending; the access log and the summary are written."""
    proc, base, admin = _serving(tmp_path)
    try:
        assert httpx.get(f"{base}/admin/leaderboard", headers=admin, timeout=30).status_code == 200
        slow = SlowBodies(int(base.rsplit(":", 1)[1]), 20)
        assert httpx.get(f"{base}/health", timeout=30).status_code == 200  # the server has read their heads
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=SHUTDOWN_TIMEOUT_S + 10)
        stopped_s = time.monotonic() - signalled
        slow.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    assert code == 0 and "Traceback" not in log, log
    print(f"\nexam server, SIGTERM with 20 slow clients: stopped in {stopped_s:.2f} s")
    assert stopped_s < SHUTDOWN_TIMEOUT_S + 2, stopped_s
    assert slow.statuses() == ["HTTP/1.1 503 Service Unavailable"] * 20
    run_dir = next((tmp_path / "runs").glob("*/admin_token")).parent
    paths = [json.loads(line)["path"] for line in (run_dir / "access_log.jsonl").read_text().splitlines()]
    assert paths == ["/admin/leaderboard"]
    assert json.loads((run_dir / "summary.json").read_text())["authenticated_requests"] == 1
