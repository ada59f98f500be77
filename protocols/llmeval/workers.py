"""The exam server on several processes: ``--serve --workers N`` over a PostgreSQL bank.

The LLMEval-3 exam (seed 002, section 2.2) is served by processes that share nothing but the bank: uvicorn's own
multi-process mode (what ``uvicorn.run(APP, workers=N)`` runs) binds 127.0.0.1:PORT once in the parent, whose
supervisor starts N workers sharing that socket; each imports the application by path, :data:`APP` (the
factory :func:`protocols.llmeval.protocol.worker_app`), and builds its :class:`ExamServer` from the run's
configuration, handed over in the environment variable :data:`SETTINGS_ENV`. Sessions, examinees, answers (one
per slot, by a conditional update) and the rate buckets live in the bank (:mod:`stores.question_bank`), so any
worker may answer any request; the token signing secret comes from the same variable or file in every worker, and
a token carries all it needs.

SIGTERM or Ctrl-C to the parent: it closes its copy of the listening socket (the workers close theirs, so new
connections are refused, not queued) and sends SIGTERM to every worker; each finishes its requests in flight (within
the bounds of :class:`protocols.llmeval.server.H11Limited` and ``SHUTDOWN_TIMEOUT_S``, so a slow client cannot hold
it), writes its part of the access log (``access_log.worker-PID.jsonl``) and of the event log and closes the bank;
the parent waits for all of them, then merges the parts into ``access_log.jsonl`` and ``events.jsonl``
(:func:`merge_parts`). The parts and the merged logs are their owner's only (the judge prompts quote the reference
answers). uvicorn replaces a worker that dies.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.runtime.events import EventLog
from dyneval.runtime.executors.choice import ExecutorChoice
from dyneval.runtime.pricing import Pricing
from dyneval.runtime.protocol import Run
from dyneval.runtime.services import Services
from dyneval.state.config import RunConfig
from dyneval.stores.files import read_records
from dyneval.stores.private_files import private_file

if TYPE_CHECKING:
    from uvicorn.supervisors import Multiprocess

#: The worker application, by import path (a factory: ``uvicorn --factory``).
APP = "dyneval.protocols.llmeval.protocol:worker_app"
#: The HTTP protocol, by import path: a worker imports it once it answers the supervisor's health checks (the
#: configuration handed to a new process holds no class whose unpickling would import the application first).
HTTP = "dyneval.protocols.llmeval.server:H11Limited"
#: Seconds a worker may take to answer the supervisor's health check before it is replaced (uvicorn: 5; a
#: worker importing the application on a loaded machine needs longer).
HEALTHCHECK_S = 30
#: Environment variable holding the workers' settings (JSON: the run's configuration and folder).
SETTINGS_ENV = "DYNEVAL_EXAM_WORKER_SETTINGS"
#: A worker's part of the run's log ``NAME.jsonl``: ``NAME.worker-PID.jsonl``.
PART = "{name}.worker-{pid}.jsonl"


def worker_run() -> Run:
    """The run of this worker process, from :data:`SETTINGS_ENV`: the run's configuration and folder, and an event
    log part of its own (:data:`PART`)."""
    from rich.console import Console

    settings = json.loads(os.environ[SETTINGS_ENV])
    config = RunConfig.model_validate(settings["config"])
    run_dir = Path(settings["run_dir"])
    events = EventLog(
        private_file(run_dir / PART.format(name="events", pid=os.getpid())), pricing=Pricing.for_run(config)
    )
    return Run(
        config=config,
        run_dir=run_dir,
        services=Services(config=config, run_dir=run_dir, events=events),
        console=Console(stderr=True),
        executor=ExecutorChoice(),  # the exam server works in this machine's processes only (local_mode)
        resumed=True,
    )


def access_log_part(run: Run) -> Path:
    """This worker's part of the run's access log."""
    return run.run_dir / PART.format(name="access_log", pid=os.getpid())


def serve_workers(run: Run, listener: socket.socket, workers: int, max_headers: int) -> int:
    """Serve on ``listener`` with ``workers`` processes until SIGTERM or Ctrl-C reached every one and all have
    stopped; then the logs merged. Returns the number of authenticated requests answered."""
    import uvicorn
    from uvicorn.supervisors.multiprocess import SIGNALS

    from dyneval.protocols.llmeval.server import SHUTDOWN_TIMEOUT_S

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}  # the supervisor installs its own handlers
    before = os.environ.get(SETTINGS_ENV)
    os.environ[SETTINGS_ENV] = json.dumps({"config": run.config.model_dump(mode="json"), "run_dir": str(run.run_dir)})
    config = uvicorn.Config(
        APP,
        factory=True,
        host="127.0.0.1",
        port=listener.getsockname()[1],
        workers=workers,
        log_level="warning",
        http=HTTP,
        h11_max_incomplete_event_size=max_headers,
        timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S,
        timeout_worker_healthcheck=HEALTHCHECK_S,
    )
    try:
        supervisor(config, [listener]).run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if before is None:
            os.environ.pop(SETTINGS_ENV, None)
        else:
            os.environ[SETTINGS_ENV] = before
    return merge_parts(run.run_dir)


def supervisor(config: Any, sockets: list[Any]) -> Multiprocess:
    """uvicorn's supervisor of ``config.workers`` processes, closing its copy of ``sockets`` when it stops them."""
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        def terminate_all(self) -> None:
            for sock in self.sockets:
                sock.close()
            super().terminate_all()

    return Supervisor(config, sockets)


def merge_parts(run_dir: Path) -> int:
    """The workers' parts in time order: the access log into ``access_log.jsonl`` (its length is returned),
    their events appended to ``events.jsonl``; the parts removed."""
    counts = {}
    for name, mode in (("access_log", "w"), ("events", "a")):
        parts = sorted(run_dir.glob(PART.format(name=name, pid="*")))
        records: list[dict[str, Any]] = [r for part in parts for r in read_records(part)]
        records.sort(key=lambda r: r.get("ts", 0))
        with private_file(run_dir / f"{name}.jsonl").open(mode, encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        for part in parts:
            part.unlink()
        counts[name] = len(records)
    return counts["access_log"]
