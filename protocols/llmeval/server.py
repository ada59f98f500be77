"""The LLMEval-3 exam server: FastAPI over the same question bank and nodes as the batch graph.

Section 2.2 "Secure Anti-Cheating Architecture" and appendix F (Algorithm 1):

* Outer layer (access control): every request carries a JWT (HMAC-SHA256) with
  ``sub`` (user id), ``role`` (``admin`` or ``examinee``), ``session_id``,
  ``permissions``, ``iat`` and ``exp``. A bad signature, a malformed or an
  expired token -> 401; an unknown user, a missing permission or another
  examinee's session -> 403 (RBAC: a token sees only its own session).
* Inner layer (process control): the bank's quota (allocated / pending /
  completed) - questions come one at a time in the fixed order, an answer is
  accepted once for the pending slot (resubmission or skipping ahead -> 409),
  nothing beyond the allocation (-> 429). Payloads are built from a whitelist:
  answers and explanations never leave the server.
* Rate limiting: a token bucket per user, kept in the bank (every server process draws on it);
  over the limit -> 429 with Retry-After.

Users: the single ``admin`` (the operator; never an examinee name) and one
examinee per session. Examinees live in the bank's database (``llmeval_examinees``); the
signing secret never does (a bank may be copied or shared): it comes from ``DYNEVAL_EXAM_SECRET``
(or the older ``DYNEVAL_LLMEVAL_JWT_SECRET``), else from a file only its owner may read, made on
first use next to a SQLite bank (:func:`nodes.llmeval.common.secret_file`). So a restarted server
keeps accepting their tokens; ``dyneval --protocol llmeval --admin-token`` re-issues an admin
token and ``POST /admin/sessions/{id}/token`` an examinee's, since tokens expire (one hour by default).

Limits (:class:`RequestLimits`, before any parsing or authentication): a body beyond
``--max-request-body`` bytes -> 413, a request line and headers beyond ``--max-request-headers``
bytes -> 431, a request not arrived whole within :data:`REQUEST_TIMEOUT_S` -> 408 (:class:`H11Limited`).
SIGTERM or Ctrl-C stops the server gracefully and within a bound (:func:`serve_until_stopped`): requests still
arriving get :data:`ARRIVAL_GRACE_S` (then 503), those being answered :data:`SHUTDOWN_TIMEOUT_S`.

Several processes (``--workers N``, :mod:`protocols.llmeval.workers`) need no more than this: what they must
share lives in the bank (sessions, examinees, answers with their one-answer-per-slot rule, rate buckets), the
signing secret comes from the same variable or file, and tokens are self-contained; every response names the
process that answered it (``X-Exam-Worker``, its pid).

Sessions are created with the ``open_session`` node and scored by running the
exam graph (judge + score nodes) on the session once it is complete. An adaptive
session (``"adaptive": true``, IRT) gets one question at a time: each accepted answer
is judged at once, the ability updated and the next question allocated (or the session
stopped at its target SE or maximum), so ``/next`` then serves it; scoring reports theta.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeGuard

import h11
import jwt
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, field_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from dyneval.nodes.llmeval.adaptive import adaptive_step, run_params
from dyneval.nodes.llmeval.calibration import load_params
from dyneval.nodes.llmeval.common import bank_of, secret_file
from dyneval.nodes.llmeval.examinee import build_messages, fewshot_examples
from dyneval.nodes.llmeval.judge import judge_session, judges
from dyneval.nodes.llmeval.session import open_session
from dyneval.protocols.llmeval.options import LLMEvalBatch
from dyneval.runtime import stop
from dyneval.runtime.services import services_of
from dyneval.state.errors import InputError
from dyneval.state.llmeval import PARADIGMS, LLMEvalContext, Paradigm
from dyneval.stores.bank_sessions import QuotaError
from dyneval.stores.private_files import private_file, private_folder, write_private
from dyneval.stores.question_bank import QuestionBank

ALGORITHM = "HS256"
ADMIN = "admin"
#: Environment variables with the token signing secret (the first set wins); unset = the secret file.
SECRET_ENVS = ("DYNEVAL_EXAM_SECRET", "DYNEVAL_LLMEVAL_JWT_SECRET")
#: Seconds a connection refused (431, 408) keeps reading (and dropping) what the client still sends before it closes.
LINGER_S = 5.0
#: Seconds a request may take to arrive whole (request line, headers and body) from its first byte, and a new
#: connection to start its first request: then 408 and the connection closes, so a slow client holds none for long.
REQUEST_TIMEOUT_S = 30.0
#: Seconds a request still arriving when the server stops (SIGTERM, Ctrl-C) has left to arrive whole: then 503.
ARRIVAL_GRACE_S = 3.0
#: Seconds a stopping server waits for the requests in flight (uvicorn's ``timeout_graceful_shutdown``): then those
#: still being answered are cancelled, and the logs are written and the bank closed all the same.
SHUTDOWN_TIMEOUT_S = 5
#: The ``Authorization: Bearer TOKEN`` scheme (also what ``/docs`` offers under "Authorize").
BEARER = HTTPBearer(auto_error=False, description="an admin or examinee token (JWT)")
#: Response header naming the server process (pid) that answered.
WORKER_HEADER = "X-Exam-Worker"
PERMISSIONS = {
    "admin": ["sessions:create", "sessions:read", "sessions:score", "leaderboard:read"],
    "examinee": ["questions:read", "answers:write"],
}


def _is_paradigm(name: str) -> TypeGuard[Paradigm]:
    """Whether ``name`` is one paradigm a session can run (``all`` is a batch run's choice)."""
    return name in PARADIGMS


class NewSession(BaseModel):
    model: str = Field(min_length=1, max_length=200)
    questions: int | None = Field(None, ge=1, le=100000)
    paradigm: str = "zero-shot"
    stratified: bool = False
    examinee: str | None = Field(None, min_length=1, max_length=200)
    adaptive: bool = False  # IRT session: each question chosen after the previous answer is judged
    target_se: float | None = Field(None, gt=0)
    max_items: int | None = Field(None, ge=1, le=100000)

    @field_validator("examinee")
    @classmethod
    def _not_admin(cls, name: str | None) -> str | None:
        if name is not None and name.strip().casefold() == ADMIN:
            raise ValueError(f"{ADMIN!r} is the administrator, not an examinee name")
        return name


class Answer(BaseModel):
    position: int = Field(ge=0)
    answer: str = Field(max_length=100000)


def _create_secret(path: Path, value: str) -> None:
    """``value`` as the secret file ``path`` unless it exists (the first of concurrent starts wins, whole)."""
    private_folder(path.parent)
    draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    write_private(draft, value + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def _hs256_key(value: str, **where: str) -> str:
    if len(value.encode("utf-8")) < 32:
        raise InputError("the token signing secret must hold at least 32 bytes (an HS256 key)", **where)
    return value


def signing_secret(bank: QuestionBank, path: Path) -> str:
    """The HS256 key: ``DYNEVAL_EXAM_SECRET`` (or ``DYNEVAL_LLMEVAL_JWT_SECRET``) when set, else the file ``path``
    (made on first use, mode 0600; refused when others may read it). A secret an older version kept in the bank
    moves to that file and is erased from the bank."""
    bank.move_secret(lambda kept: _create_secret(path, kept))
    for name in SECRET_ENVS:
        if value := os.environ.get(name, ""):
            return _hs256_key(value, setting=name)
    if not path.exists():
        _create_secret(path, secrets.token_hex(32))
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise InputError(
            f"the token signing secret is readable by other users (mode {mode:o}): chmod 600 it, or "
            "delete it for a new secret (tokens signed with the old one then stop working)",
            file=str(path),
        )
    return _hs256_key(path.read_text(encoding="utf-8").strip(), file=str(path))


class ExamServer:
    """One server process: signing secret, limits, bank and graph (users, answers and rate buckets live in the
    bank, so several processes over one PostgreSQL bank act as one server)."""

    def __init__(
        self,
        ctx: LLMEvalContext,
        *,
        secret: str | None = None,
        token_ttl_s: int = 3600,
        rate: float = 20.0,
        burst: int = 40,
        max_body: int = LLMEvalBatch.max_request_body,
        max_headers: int = LLMEvalBatch.max_request_headers,
    ) -> None:
        self.ctx = ctx
        self.bank = bank_of(ctx)
        self.secret = secret or signing_secret(self.bank, secret_file(ctx, services_of(ctx)))
        self.ttl = token_ttl_s
        self.rate, self.burst = rate, burst
        self.max_body, self.max_headers = max_body, max_headers
        self.log: deque[dict[str, Any]] = deque(maxlen=10000)  # access log (Algorithm 1, line 29)

    # -- tokens (Algorithm 1, lines 1-6) -----------------------------------------------------
    def issue(self, sub: str, role: str, session_id: str | None = None, ttl_s: int | None = None) -> str:
        now = int(time.time())
        payload = {
            "sub": sub,
            "role": role,
            "session_id": session_id,
            "permissions": PERMISSIONS[role],
            "iat": now,
            "exp": now + (self.ttl if ttl_s is None else ttl_s),
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(payload, self.secret, algorithm=ALGORITHM)

    def admin_token(self) -> str:
        return self.issue(ADMIN, "admin")

    def own_session(self, sub: str, role: str) -> str | None:
        """The session a registered user may see (``None`` for the admin); :class:`HTTPException` 403 if unknown."""
        if role == "admin" and sub == ADMIN:
            return None
        own = self.bank.examinee_session(sub) if role == "examinee" else None
        if own is None:
            raise HTTPException(403, "unknown user or role")
        return own

    # -- verification (Algorithm 1, lines 12-29) ----------------------------------------------
    def claims(self, request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> dict[str, Any]:
        if bearer is None:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        try:
            claims = jwt.decode(
                bearer.credentials,
                self.secret,
                algorithms=[ALGORITHM],
                options={"require": ["exp", "iat", "sub", "role"]},
            )
        except jwt.ExpiredSignatureError:
            raise HTTPException(401, "token expired", headers={"WWW-Authenticate": "Bearer"}) from None
        except jwt.InvalidTokenError as exc:
            raise HTTPException(401, f"invalid token: {exc}", headers={"WWW-Authenticate": "Bearer"}) from None
        self.own_session(str(claims["sub"]), str(claims["role"]))
        wait = self.bank.take_token(str(claims["sub"]), self.rate, self.burst)
        if wait:
            raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": f"{max(1, round(wait))}"})
        self.log.append(
            {
                "sub": claims["sub"],
                "ts": time.time(),
                "session_id": claims.get("session_id"),
                "path": request.url.path,
                "pid": os.getpid(),
            }
        )
        return claims

    def require(self, claims: dict[str, Any], permission: str, session_id: str | None = None) -> None:
        if permission not in (claims.get("permissions") or []) or permission not in PERMISSIONS[claims["role"]]:
            raise HTTPException(403, f"permission {permission!r} required")
        if claims["role"] == "examinee":
            own = self.own_session(str(claims["sub"]), "examinee")
            if session_id is None or claims.get("session_id") != session_id or own != session_id:
                raise HTTPException(403, "this token is not valid for that session")

    # -- operations ----------------------------------------------------------------------------
    def create_session(self, body: NewSession) -> dict[str, Any]:
        if not _is_paradigm(body.paradigm):
            raise HTTPException(422, f"paradigm must be one of {', '.join(PARADIGMS)}")
        session_id = f"srv-{uuid.uuid4().hex[:16]}"
        examinee = body.examinee or f"examinee-{session_id}"
        ctx = dataclasses.replace(
            self.ctx,
            questions=body.questions or self.ctx.questions,
            paradigm=body.paradigm,
            stratified=body.stratified,
            reference_model="",
            adaptive=body.adaptive,
            target_se=body.target_se or self.ctx.target_se,
            max_items=body.max_items or self.ctx.max_items,
        )
        if body.adaptive and load_params(self.bank, self.ctx.irt_model) is None:
            raise HTTPException(
                409,
                f"no calibrated question ({self.ctx.irt_model}) for an adaptive session; "
                "calibrate the bank first (--calibrate)",
            )
        with self.bank.exclusive("examinees"):  # name check, allocation and registration: one at a time
            if self.bank.examinee_session(examinee) is not None:
                raise HTTPException(409, f"examinee {examinee!r} is already registered")
            try:
                state = open_session(
                    {"session_id": session_id, "model": body.model, "paradigm": body.paradigm}, Runtime(context=ctx)
                )
                if body.adaptive:  # the first question, chosen at the prior's ability
                    state = adaptive_step(self.bank, session_id, run_params(self.ctx, self.bank, session_id))
                self.bank.register_examinee(examinee, session_id)
            except ValueError as exc:
                raise HTTPException(409, str(exc)) from None
        return {
            "session_id": session_id,
            "examinee": examinee,
            "allocated": state["allocated"],
            "token": self.issue(examinee, "examinee", session_id),
        }

    def status(self, session_id: str) -> dict[str, Any]:
        session = self.bank.session(session_id)
        if session is None:
            raise HTTPException(404, "no such session")
        return {
            "session_id": session_id,
            "model": session["model"],
            "paradigm": session["paradigm"],
            "quota": self.bank.quota(session_id),
            "scored": session["scores"] is not None,
        }

    def next_question(self, session_id: str) -> dict[str, Any]:
        try:
            item = self.bank.next_item(session_id)
        except QuotaError as exc:
            raise _quota_http(exc) from None
        session = self.bank.session(session_id) or {}
        paradigm = session.get("paradigm", "zero-shot")
        examples = fewshot_examples(self.bank, session) if paradigm == "few-shot" else ""
        messages = [
            {"role": {"human": "user"}.get(m.type, m.type), "content": m.content}
            for m in build_messages(item, paradigm, examples)
        ]
        return {**item, "paradigm": paradigm, "messages": messages}

    def answer(self, session_id: str, body: Answer) -> dict[str, Any]:
        try:
            quota = self.bank.submit(session_id, body.position, body.answer)
        except QuotaError as exc:
            raise _quota_http(exc) from None
        out: dict[str, Any] = {"accepted": True, "position": body.position}
        if self.bank.adaptive_state(session_id) is not None:  # judge it, update theta, choose the next question
            judge_session(self.bank, session_id, judges(self.ctx), int(self.ctx.judge_concurrency))
            step = adaptive_step(self.bank, session_id, run_params(self.ctx, self.bank, session_id))
            out["stopped"] = step["stopped"] or None
            quota = self.bank.quota(session_id)
        return {**out, "quota": quota}

    def examinee_token(self, session_id: str) -> dict[str, Any]:
        """A fresh token for the examinee of ``session_id`` (tokens expire; the session and its answers stay)."""
        session = self.bank.session(session_id)
        if session is None or not session.get("owner") or self.bank.examinee_session(session["owner"]) != session_id:
            raise HTTPException(404, "no examinee session with that id")
        return {
            "session_id": session_id,
            "examinee": session["owner"],
            "token": self.issue(session["owner"], "examinee", session_id),
        }

    def score(self, session_id: str) -> dict[str, Any]:
        from dyneval.graphs.llmeval import builder

        quota = self.bank.quota(session_id)
        if self.bank.session(session_id) is None:
            raise HTTPException(404, "no such session")
        if quota["completed"] < quota["allocated"]:
            raise HTTPException(409, f"session not finished: {quota['completed']}/{quota['allocated']} answered")
        graph = builder.compile(name="llmeval")
        final = graph.invoke(  # type: ignore[call-overload]  # a dict input is validated by the pydantic input schema
            {"session_id": session_id},
            {"configurable": {"thread_id": session_id}},
            context=dataclasses.replace(self.ctx, reference_model=""),
        )
        return {"session_id": session_id, "scores": final.get("scores")}

    def shut_down(self, path: Path) -> None:
        """Once the requests in flight are answered, or :data:`SHUTDOWN_TIMEOUT_S` passed: no further model request
        from this process (one still being answered stops at its next call), the access log into ``path`` (JSONL)
        and the bank closed (SQLite folds its write-ahead log into the database file)."""
        stop.request_stop()
        with private_file(path).open("w", encoding="utf-8") as out:  # who asked for which session: owner-only
            out.writelines(json.dumps(entry) + "\n" for entry in self.log)
        self.bank.close()


def _quota_http(exc: QuotaError) -> HTTPException:
    code = {"exhausted": 429, "resubmission": 409, "out_of_order": 409, "unknown": 404}.get(exc.kind, 409)
    return HTTPException(code, {"error": exc.kind, "message": str(exc)})


def create_app(server: ExamServer, on_stop: Callable[[], Any] | None = None) -> FastAPI:
    """The FastAPI application of an :class:`ExamServer`; ``on_stop`` runs once its server has finished the
    requests in flight or given up on them (the ASGI lifespan's shutdown, after :data:`SHUTDOWN_TIMEOUT_S` at
    most)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if on_stop is not None:
            on_stop()

    app = FastAPI(title="dyneval llmeval exam server", version="1", lifespan=lifespan)
    app.add_middleware(RequestLimits, max_body=server.max_body, max_headers=server.max_headers)
    app.add_middleware(WorkerHeader)
    app.state.exam = server
    claims = server.claims

    @app.exception_handler(HTTPException)
    async def _errors(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "questions": server.bank.count()}

    @app.post("/admin/sessions")
    def create(body: NewSession, c: dict = Depends(claims)) -> dict[str, Any]:
        server.require(c, "sessions:create")
        return server.create_session(body)

    @app.get("/sessions/{session_id}")
    def status(session_id: str, c: dict = Depends(claims)) -> dict[str, Any]:
        if c["role"] == "admin":
            server.require(c, "sessions:read")
        else:
            server.require(c, "questions:read", session_id)
        return server.status(session_id)

    @app.get("/sessions/{session_id}/next")
    def next_question(session_id: str, c: dict = Depends(claims)) -> dict[str, Any]:
        server.require(c, "questions:read", session_id)
        return server.next_question(session_id)

    @app.post("/sessions/{session_id}/answers")
    def answer(session_id: str, body: Answer, c: dict = Depends(claims)) -> dict[str, Any]:
        server.require(c, "answers:write", session_id)
        return server.answer(session_id, body)

    @app.post("/admin/sessions/{session_id}/token")
    def reissue(session_id: str, c: dict = Depends(claims)) -> dict[str, Any]:
        server.require(c, "sessions:create")
        return server.examinee_token(session_id)

    @app.post("/admin/sessions/{session_id}/score")
    def score(session_id: str, c: dict = Depends(claims)) -> dict[str, Any]:
        server.require(c, "sessions:score")
        return server.score(session_id)

    @app.get("/admin/leaderboard")
    def leaderboard(c: dict = Depends(claims)) -> dict[str, Any]:
        from dyneval.protocols.llmeval.analyses import leaderboard as board

        server.require(c, "leaderboard:read")
        return {"rows": board(server.bank)}

    return app


class WorkerHeader:
    """ASGI middleware adding :data:`WORKER_HEADER` (this process's pid) to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app, self.header = app, (WORKER_HEADER.lower().encode(), str(os.getpid()).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)

        await self.app(scope, receive, named)


class RequestLimits:
    """ASGI middleware refusing a request line and headers beyond ``max_headers`` bytes (431) and a body beyond
    ``max_body`` bytes (413) before the application parses or authenticates anything: a declared Content-Length
    is judged unread; a body without one (chunked) is read up to the limit, then passed on or refused."""

    def __init__(self, app: ASGIApp, max_body: int, max_headers: int) -> None:
        self.app, self.max_body, self.max_headers = app, max_body, max_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        head = (
            len(scope["raw_path"]) + len(scope["query_string"]) + sum(len(k) + len(v) + 4 for k, v in scope["headers"])
        )
        if head > self.max_headers:
            return await _refuse(scope, receive, send, 431, f"request headers beyond {self.max_headers} bytes")
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body:
            return await _refuse(scope, receive, send, 413, f"request body beyond {self.max_body} bytes")
        messages, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left, or its request was refused for arriving too slowly: nobody to answer
            size += len(message.get("body", b""))
            if size > self.max_body:
                return await _refuse(scope, receive, send, 413, f"request body beyond {self.max_body} bytes")
            messages.append(message)
            more = message["type"] == "http.request" and message.get("more_body", False)
        queued = iter(messages)

        async def replay() -> Message:
            return next(queued, None) or await receive()

        await self.app(scope, replay, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
    await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)


class H11Limited(H11Protocol):
    """uvicorn's h11 protocol with bounds on what a client can make it wait for (uvicorn itself has no read
    timeout: a client sending a byte now and then held its connection, and a stopping server, for as long as it
    liked):

    * request line and headers outgrowing ``h11_max_incomplete_event_size`` before they end: 431, not 400 (h11
      then refuses to buffer more);
    * a request not arrived whole within :data:`REQUEST_TIMEOUT_S` of its first byte (or of the connection's
      opening): 408;
    * once the server stops, a request still arriving gets at most :data:`ARRIVAL_GRACE_S` more: 503.

    A refused connection reads and drops what the client still sends for up to :data:`LINGER_S` (none once the
    server stops) before closing, as closing on unread bytes would reset the connection under the reply."""

    _draining = False
    _stopping = False
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(  # type: ignore[override]  # as uvicorn's own: asyncio types it BaseTransport
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self._expect(REQUEST_TIMEOUT_S, 408, "request not received")

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        if self._deadline is None:  # the first byte of the next request on this connection
            self._expect(REQUEST_TIMEOUT_S, 408, "request not received")
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY) and self._deadline is not None:
            self._deadline.cancel()  # arrived whole (or refused): answering it takes what it takes
            self._deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        self._stopping = True
        if self._draining:
            self.transport.close()
        elif (
            self._deadline is not None
            and self._deadline.when() - self.loop.time() > ARRIVAL_GRACE_S
            and self.cycle is not None
            and not self.cycle.response_complete
        ):
            self._deadline.cancel()  # its body is arriving: answered if it arrives within the grace
            self._expect(ARRIVAL_GRACE_S, 503, "the server is stopping; request not received")
        super().shutdown()  # closes a connection between requests, or with a request head still arriving

    def _expect(self, seconds: float, status: int, detail: str) -> None:
        """Refuse with ``status`` unless the request has arrived whole within ``seconds``."""
        self._deadline = self.loop.call_later(seconds, self._too_slow, status, f"{detail} within {seconds:g} s")

    def _too_slow(self, status: int, detail: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:  # the application waits for the body
            self.cycle.disconnected = True  # its receive() says the client left; it sends nothing more
            self.cycle.message_event.set()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet
            self._refuse(status, detail, linger=0.0 if self._stopping else LINGER_S)
        else:  # answered (e.g. 413) while the client still sends its body
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size
        if limit is None or len(self.conn.trailing_data[0]) <= limit:
            return super().send_400_response(msg)
        self._refuse(431, f"request headers beyond {limit} bytes", linger=LINGER_S)

    def _refuse(self, status: int, detail: str, linger: float) -> None:
        """Answer ``status`` with ``detail`` and close the connection, after ``linger`` seconds of dropping what
        the client still sends."""
        body = json.dumps({"detail": detail}).encode()
        head = h11.Response(
            status_code=status,
            reason=HTTPStatus(status).phrase.encode(),
            headers=[
                (b"content-type", b"application/json"),
                (b"connection", b"close"),
                (b"content-length", str(len(body)).encode()),
            ],
        )
        for event in (head, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self._draining = True
        self.transport.write_eof()
        self.loop.call_later(linger, self.transport.close)


def http_server(
    server: ExamServer, port: int, on_stop: Callable[[], Any] | None = None, **options: Any
) -> uvicorn.Server:
    """The uvicorn server of ``server`` on 127.0.0.1:``port``, with its header limit (h11: the header bytes it
    buffers are bounded, unlike httptools'), its read timeouts (:class:`H11Limited`) and its bounded stop, after
    which it calls ``on_stop``."""
    config = uvicorn.Config(
        create_app(server, on_stop),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        http=H11Limited,
        h11_max_incomplete_event_size=server.max_headers,
        timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S,
        **options,
    )
    return uvicorn.Server(config)


def bind_port(port: int) -> socket.socket:
    """127.0.0.1:``port`` bound for the exam server, which listens on it once it serves (the workers' supervisor
    hands it to each worker); a port another process holds is bad input naming ``--port``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise InputError(
            f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc} (another server listens there?); "
            "choose another port",
            field="--port",
        ) from None
    sock.set_inheritable(True)
    return sock


def serve_until_stopped(http: uvicorn.Server, listener: socket.socket) -> None:
    """Serve on ``listener`` until SIGTERM or Ctrl-C: uvicorn then closes it, finishes the requests in flight
    (:data:`SHUTDOWN_TIMEOUT_S` at most) and raises the signal again for its former handler; the handlers set here
    take it, so the caller persists its state and returns (the command exits 0). A second Ctrl-C stops at once.
    Off the main thread, which cannot take signals, it just serves."""
    if threading.current_thread() is not threading.main_thread():
        return http.run(sockets=[listener])

    def stop(signum: int, frame: Any) -> None:
        http.should_exit = True  # also a signal before uvicorn installs its own handlers

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        http.run(sockets=[listener])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
