"""``dyneval --review RUN [--sample N] [--reviewer NAME] [--host H] [--port P] [--out DIR]``.

Reads the run's judged items (:mod:`.items`), prints how many there are by verdict and the suggested sample size
with its rule (:mod:`.sample`), then serves the review page until Ctrl-C; the agreement between the run's
reviewers (:mod:`.labels`) is printed before and after. Every check (the run, the options, the port) runs before
anything is written or served.
"""

from __future__ import annotations

import argparse
import secrets
import socket
from collections import Counter
from functools import partial
from typing import NoReturn

import uvicorn
from rich.console import Console

from dyneval.results.calibration.run import JUDGES, judge_fingerprint
from dyneval.results.review.items import judged_items
from dyneval.results.review.labels import Labels, agreement, check_reviewer
from dyneval.results.review.sample import MARGIN, review_order, suggested_size
from dyneval.results.review.server import Review, create_app
from dyneval.runtime.executors.ray_address import is_loopback
from dyneval.state.errors import InputError
from dyneval.stores.files import writable
from dyneval.stores.rundir import RunDir, finished_run


class _Options(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InputError(f"--review: {message}", setting="--review")


def _options(argv: list[str]) -> argparse.Namespace:
    parser = _Options(prog="dyneval --review RUN", add_help=False)
    parser.add_argument("--sample", type=int, help="how many items to review (default: the suggested size)")
    parser.add_argument("--reviewer", default="reviewer", help="your name: your labels go to RUN/review/NAME.jsonl")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (not loopback: a token is needed)")
    parser.add_argument("--port", type=int, default=8765, help="port to serve on (0: any free port)")
    return parser.parse_args(argv)


def prepare(run_ref: str, out: str, argv: list[str], console: Console) -> tuple[Review, argparse.Namespace]:
    """The review of ``run_ref`` the options ask for, every check done; prints the run's items and the rule."""
    args = _options(argv)
    run: RunDir = finished_run(run_ref, out, "--review")
    reviewer = check_reviewer(args.reviewer)
    judged = judged_items(run)
    population = len(judged.items)
    suggested = suggested_size(population)
    size = suggested if args.sample is None else args.sample
    if not 1 <= size <= population:
        raise InputError(f"{size}: the run has {population} judged items; give 1 to {population}", setting="--sample")
    by_verdict = Counter(item.verdict for item in judged.items)
    say = partial(console.print, markup=False, highlight=False, soft_wrap=True)
    say(
        f"run {run.name}: {population} answers decided by {judged.judge} ("
        + ", ".join(f"{n} {v}" for v, n in sorted(by_verdict.items()))
        + (f"; {judged.ungraded} left ungraded, not reviewable" if judged.ungraded else "")
        + ")"
    )
    say(
        f"suggested sample: {suggested} (the judge's agreement with people within +-{MARGIN:.0%} at 95 %, "
        f"worst case, corrected for {population} items); reviewing {size}, stratified by the judge's verdict"
    )
    sample = review_order(judged.items, run.name)[:size]
    fingerprint = judge_fingerprint(run.protocol, run.run_config()) if run.protocol in JUDGES else None
    review = Review(run.name, run.path, judged.judge, sample, Labels(run.path, reviewer, fingerprint))
    say(agreement(run.path, judged.judge, [i.key for i in sample]).line())
    return review, args


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``; ``InputError`` naming ``--host``/``--port`` when it cannot be."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror or exc})", setting="--port") from None
    sock.listen()
    return sock


def review_command(run_ref: str, out: str, argv: list[str], console: Console) -> None:
    """The command (module docstring): serves until Ctrl-C, then prints the agreement again."""
    review, args = prepare(run_ref, out, argv, console)
    if not is_loopback(args.host):
        review.token = secrets.token_urlsafe(24)
    with writable(review.run_dir, "--review"):
        review.labels.path.parent.mkdir(exist_ok=True)
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    where = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{where}:{port}/" + (f"?token={review.token}" if review.token else "")
    console.print(
        f"review page for {review.labels.reviewer}: {url}  (labels: {review.labels.path}; Ctrl-C to stop)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    server = uvicorn.Server(uvicorn.Config(create_app(review), log_level="warning", lifespan="off"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stops on Ctrl-C, then raises it again: here it is how a review ends
        pass
    finally:
        sock.close()
        keys = [i.key for i in review.sample]
        console.print(agreement(review.run_dir, review.judge, keys).line(), markup=False, soft_wrap=True)
