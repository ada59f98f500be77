"""The review page's server (FastAPI on uvicorn): the page, the next item, a decision, the end screen.

The judge's verdict and reason leave the server only in the answer to a decision on that item (``POST
/api/label``), so no page, script or request shows them before the person has decided. Bound to a loopback
address the server needs nothing more; bound to any other address every request must carry ``?token=`` (a random
token printed with the page's address), compared in constant time.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from dyneval.results.review.items import Item
from dyneval.results.review.labels import Labels, agreement
from dyneval.state.judgecheck import SCALES

PAGE = Path(__file__).with_name("page.html")
SCRIPT = Path(__file__).with_name("page.js")

#: The choices of each judge's scale: (value, what the button says, its key).
CHOICES: dict[str, list[tuple[str, str, str]]] = {
    "interview.grader": [("correct", "Correct", "c"), ("wrong", "Wrong", "w")],
    "judgeagent.judge": [("correct", "Correct", "c"), ("wrong", "Wrong", "w")],
    "llmeval.judge": [(s, f"{s} stars", s) for s in SCALES["llmeval.judge"]],
    "pairwise": [("1", "A is better", "a"), ("2", "B is better", "b"), ("tie", "Tie", "t")],
}


@dataclass
class Review:
    """One reviewer's review of a run: the sample in its order and the reviewer's labels."""

    run: str
    run_dir: Path
    judge: str
    sample: list[Item]
    labels: Labels
    token: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_item(self) -> tuple[int, Item | None]:
        """How many of the sample are labelled, and the first not yet labelled (None: the review is done)."""
        done = sum(item.key in self.labels.given for item in self.sample)
        todo = next((item for item in self.sample if item.key not in self.labels.given), None)
        return done, todo

    def end(self) -> dict[str, Any]:
        """The end screen: this reviewer's agreement with the judge, and between the run's reviewers."""
        keys = [item.key for item in self.sample]
        mine = [(self.labels.given[i.key], i.verdict) for i in self.sample if i.key in self.labels.given]
        between = agreement(self.run_dir, self.judge, keys)
        return {
            "labelled": len(mine),
            "with_judge": sum(a == b for a, b in mine),
            "reviewers": list(between.reviewers),
            "statistic": between.statistic,
            "common": between.items,
            "kappa": between.kappa,
            "observed": between.observed,
            "line": between.line(),
        }


class Decision(BaseModel):
    key: str
    label: str


def create_app(review: Review) -> FastAPI:
    app = FastAPI(title=f"review of {review.run}", docs_url=None, redoc_url=None, openapi_url=None)

    def allowed(token: str | None = Query(None)) -> None:
        if review.token is not None and not secrets.compare_digest(token or "", review.token):
            raise HTTPException(403, "this page needs the token printed with its address (?token=...)")

    guard = [Depends(allowed)]

    @app.get("/", response_class=HTMLResponse, dependencies=guard)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"), headers={"Content-Security-Policy": _CSP})

    @app.get("/page.js")
    def script() -> Response:  # the page's code, the same for everyone: no data, no token
        return Response(SCRIPT.read_text(encoding="utf-8"), media_type="text/javascript")

    @app.get("/api/state", dependencies=guard)
    def state() -> dict[str, Any]:
        done, item = review.next_item()
        return {
            "run": review.run,
            "reviewer": review.labels.reviewer,
            "judge": review.judge,
            "choices": [{"value": v, "text": t, "key": k} for v, t, k in CHOICES[review.judge]],
            "done": done,
            "total": len(review.sample),
            "item": item.shown() if item else None,
            "end": None if item else review.end(),
        }

    @app.post("/api/label", dependencies=guard)
    def label(decision: Decision) -> dict[str, Any]:
        if decision.label not in SCALES[review.judge]:
            raise HTTPException(422, f"{decision.label!r} is not on the {review.judge} scale")
        with review.lock:
            _, item = review.next_item()
            if item is None or item.key != decision.key:
                raise HTTPException(409, "that item is labelled already or not the next one; reload the page")
            review.labels.add(item, decision.label)
        return {"verdict": item.verdict, "reason": item.reason}

    return app


#: The page loads nothing from elsewhere and runs only its own script file: no inline script or handler runs,
#: whatever text reaches the page (a second guard behind setting every text as text).
_CSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'"
