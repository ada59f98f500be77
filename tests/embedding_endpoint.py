"""An OpenAI-compatible ``POST /v1/embeddings`` on a loopback port that notes which process sent each request:
for tests that check where a run's embedding work ran (the driver, or a Ray worker process)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fake_embedding import embeddings_reply
from tests.fake_endpoint import Quiet, loopback, send_json, stop


class EmbeddingEndpoint:
    """``vectors(texts)`` for each request's inputs (computed here, so the same whichever process asks). Each
    request is noted as ``(sending process id, its texts)`` in :attr:`requests`, and the sender's ancestors in
    :attr:`ancestry`, both read while the request is served (a run's worker processes end with the run)."""

    def __init__(self, vectors: Callable[[list[str]], Any]) -> None:
        self.requests: list[tuple[int | None, list[str]]] = []
        self.ancestry: dict[int, list[int]] = {}
        lock = threading.Lock()
        endpoint = self

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                pid = client_pid(self.client_address[1], endpoint.server.server_port)
                chain = ancestors(pid) if pid is not None else []
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with lock:
                    endpoint.requests.append((pid, list(texts)))
                    if pid is not None:
                        endpoint.ancestry[pid] = chain
                send_json(self, *embeddings_reply(vectors, body))

        self.server = loopback(Handler)

    @property
    def model(self) -> str:
        """The ``--embedding-model`` reference of this endpoint."""
        return f"embed@http://127.0.0.1:{self.server.server_port}/v1"

    def close(self) -> None:
        stop(self.server)


def client_pid(client_port: int, server_port: int) -> int | None:
    """The process holding the socket 127.0.0.1:``client_port`` connected to 127.0.0.1:``server_port``."""
    local, remote = f"0100007F:{client_port:04X}", f"0100007F:{server_port:04X}"
    inode = next(
        (
            f[9]
            for f in (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
            if f[1] == local and f[2] == remote
        ),
        None,
    )
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process, or one that just ended
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
            except OSError:  # a descriptor closed meanwhile (a busy process opens and closes many): the next one
                continue
    return None


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, its parent's parent ... (from ``/proc/PID/stat``)."""
    out = []
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out.append(pid)
    return out
