"""Error kinds the runtime tells apart, and the backoff with which endpoint and store faults are retried.

``InputError`` is the user's to fix (exit code 2, one line). ``InfraError`` is an
endpoint or store fault after retries (:class:`RetryPolicy`); ``ModelError`` is a
model that answered but not usably. Metrics never count an ``InfraError`` as a
wrong answer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

T = TypeVar("T")


class InputError(Exception):
    """Bad configuration, dataset or argument: one clear line naming its real source.

    A data problem names ``file``, ``record`` and ``field``. A setting names where
    its value came from in ``setting``: a flag (``--concurrency``), an environment
    variable (``DYNEVAL_CONCURRENCY``) or a config-file key
    (``eval.toml: [models.gpt] temperature``).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        record: int | str | None = None,
        field: str | None = None,
        setting: str | None = None,
    ) -> None:
        self.message, self.file, self.record, self.field, self.setting = message, file, record, field, setting
        where = ", ".join(
            part
            for part in (
                file and f"{file}",
                record is not None and f"record {record}",
                field and f"field {field!r}",
            )
            if part
        )
        if setting:
            where = f"{where} (from {setting})" if where else setting
        super().__init__(f"{where}: {message}" if where else message)

    def blamed(self, sources: Mapping[str, str]) -> InputError:
        """This error re-blamed on where a flag-named value really came from.

        Protocols name a bad parameter by its flag (``field="--per-task"``); when
        the value came from the config file or an environment variable,
        ``sources`` (flag -> real source) names that instead.
        """
        real = sources.get(self.field or "")
        if real is None:
            return self
        return InputError(self.message, file=self.file, record=self.record, setting=real)


class GraphInputError(InputError, ValueError):
    """A graph's input refused at its entry (``nodes/entry.py``), naming each wrong field.

    Also a ``ValueError``: LangGraph's server passes the message of a ``ValueError`` on to its client (Studio) and
    replaces that of most other exceptions with "An internal error occurred".
    """


class InfraError(Exception):
    """An endpoint or store could not serve the request (after retries)."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` as ``TypeName: message`` on one line (a library's multi-line message folded), cut at ``limit``."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:limit]}"


class ModelError(Exception):
    """The model answered, but its output was unusable (e.g. invalid after one repair)."""


class ReplayMissing(BaseException):
    """A replayed role was asked something the source run never asked (the unit's path changed).

    A ``BaseException``, like :class:`runtime.stop.StopRequested`: a node's ``except Exception`` must not turn it
    into a verdict or a failed answer that would then be scored.
    """


def retry_after(exc: BaseException) -> float:
    """Seconds the endpoint asked to wait (``Retry-After``: seconds or an HTTP date); 0 when it did not say."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = str(headers.get("retry-after") or "").strip()
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return 0.0


@dataclass
class RetryPolicy:
    """How often and how long a transient fault is retried: the LLM call layer's (``runtime.llm``), the Chroma
    server client's (``stores.vectors``) and PostgreSQL's (``stores.postgres``)."""

    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_after_s: float = 120.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, exc: BaseException | None = None) -> float:
        """Exponential backoff with full jitter for retry number ``attempt`` (1-based), and at least the wait the
        endpoint asked for in ``Retry-After`` (up to ``max_retry_after_s``)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        asked = min(self.max_retry_after_s, retry_after(exc)) if exc is not None else 0.0
        return max(asked, random.uniform(cap / 2, cap))

    def call(
        self,
        fn: Callable[[int], T],
        *,
        retry_on: Callable[[Exception], bool],
        give_up: Callable[[int, Exception], Exception],
    ) -> T:
        """``fn(attempt)`` (``attempt`` 1-based), tried again after :meth:`delay` while what it raises is a fault
        (``retry_on``), at most ``max_retries`` times; then ``give_up(attempts, last_error)`` is raised."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(attempt)
            except Exception as exc:
                if not retry_on(exc):
                    raise
                if attempt > self.max_retries:
                    raise give_up(attempt, exc) from exc
                self.sleep(self.delay(attempt, exc))
