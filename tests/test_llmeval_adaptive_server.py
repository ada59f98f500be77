"""End to end: an adaptive (IRT) exam through the exam server on 127.0.0.1, examinee and judge served by the
stand-in OpenAI-compatible endpoint."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import uvicorn

from dyneval.nodes.llmeval.calibration import calibrate_bank
from dyneval.protocols.llmeval.server import ExamServer, create_app
from dyneval.runtime.embedded import free_port
from dyneval.state.llmeval import LLMEvalContext
from tests.standin_endpoint import StandIn
from tests.test_llmeval_adaptive import answer_as, synthetic_bank

SECRET = "test-secret-of-at-least-32-bytes-length!"


def test_adaptive_exam_over_http_against_the_standin_endpoint(tmp_path):
    bank, b = synthetic_bank(tmp_path / "bank.sqlite")
    rng = np.random.default_rng(0)
    for m, theta in enumerate(np.linspace(-2, 2, 12)):
        answer_as(bank, f"model-{m}", theta, b, rng)
    assert calibrate_bank(bank, "1pl", min_responses=10)["items"] == 60
    standin = StandIn()
    ctx = LLMEvalContext(
        evaluator=standin.spec("judge"),
        target=standin.spec("unused"),
        run_dir=str(tmp_path / "run"),
        bank_db=str(tmp_path / "bank.sqlite"),
        irt_model="1pl",
        target_se=0.5,
        max_items=8,
    )
    server = ExamServer(ctx, secret=SECRET, rate=10000.0, burst=10000)
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(create_app(server), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=uv.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http,
            httpx.Client(base_url=standin.url, timeout=60) as model,
        ):
            admin = {"Authorization": f"Bearer {server.admin_token()}"}
            s = http.post("/admin/sessions", json={"model": "examinee-model", "adaptive": True}, headers=admin).json()
            me, sid = {"Authorization": f"Bearer {s['token']}"}, s["session_id"]
            assert s["allocated"] == 1  # one question at a time
            delivered, stopped = [], None
            for _ in range(20):  # bounded loop
                nxt = http.get(f"/sessions/{sid}/next", headers=me)
                if nxt.status_code == 429:
                    break
                q = nxt.json()
                assert not {"answer", "explanation", "source"} & set(q)
                assert "secret-explanation" not in str(q)
                delivered.append(q["question_id"])
                reply = model.post(
                    "/chat/completions", json={"model": "examinee-model", "messages": q["messages"]}
                ).json()
                text = reply["choices"][0]["message"]["content"]
                # serial delivery: the next question does not exist before this one is answered
                assert http.get(f"/sessions/{sid}/next", headers=me).json()["question_id"] == q["question_id"]
                ans = http.post(
                    f"/sessions/{sid}/answers", json={"position": q["position"], "answer": text}, headers=me
                ).json()
                assert ans["accepted"]
                stopped = ans["stopped"]
            assert stopped in ("target_se", "max_items") and len(delivered) == len(set(delivered)) <= 8
            judged = [r for r in standin.ok_requests() if r.model == "judge"]
            assert len(judged) == len(delivered)  # one judge call per answer, as they come
            scores = http.post(f"/admin/sessions/{sid}/score", headers=admin).json()["scores"]
            assert scores["items"] == len(delivered) and scores["stopped"] == stopped
            assert scores["expected_S_low"] <= scores["expected_S"] <= scores["expected_S_high"]
            assert scores["se"] > 0 and "theta" in scores
            assert len([r for r in standin.ok_requests() if r.model == "judge"]) == len(delivered)  # no re-judging
    finally:
        uv.should_exit = True
        standin.close()
