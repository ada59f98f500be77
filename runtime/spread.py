"""Spreading a run's heavy preparation over the executor's workers: ``run.services.spread.map(fn, items)``.

A protocol's preparation (JudgeAgent's entity labelling and chunk embedding, llmeval's bank import) is a map of
one function over many independent items. With the thread executor it runs here, item after item, exactly as a
plain loop would; with ``--executor ray`` the items go to the run's worker processes (one
:class:`runtime.executors.ray` unit runner per worker CPU), each calling ``fn`` with that worker's own services:
its role models go through the cluster's endpoint limits and budget, and every exchange is logged in the
driver's ``events.jsonl`` as the units' are.

``fn`` must be a module-level function (Ray pickles it by reference) taking ``(services, item)`` and returning
what the driver keeps; it must not write files a later step reads, since a worker may sit on another machine:
the driver stores what comes back (caches included), so a killed preparation resumes from what the driver kept.
An item whose worker died is run again on another worker, so ``fn`` may run more than once for an item: let it
compute, not append.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from dyneval.runtime import stop

#: The services ``fn`` is called with (``runtime.services.Services``, which holds its run's spread: a type
#: parameter, so that this module needs nothing from that one).
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
T = TypeVar("T")
R = TypeVar("R")


class Spread(Protocol[S_co]):
    """Where a preparation's items are worked on, each by ``fn(services, item)``."""

    #: Whether the items leave this process (a caller may then size its items for shipping).
    remote: bool

    def map(self, fn: Callable[[S_co, T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """``(index, fn(services, item))`` for every item, as each ends (in order here, in any order on Ray);
        raises what ``fn`` raised, and ``StopRequested`` once the run is stopped."""


class LocalSpread(Generic[S]):
    """The items in this process, in order, with this run's services: a plain loop."""

    remote = False

    def __init__(self, services: S) -> None:
        self.services = services

    def map(self, fn: Callable[[S, T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, item in enumerate(items):
            stop.raise_if_stopped()
            yield i, fn(self.services, item)


def in_order(results: Iterable[tuple[int, Any]]) -> Iterator[Any]:
    """The results of a spread map (``(index, result)``, in any order) in index order, each as soon as every
    result before it has come."""
    waiting: dict[int, Any] = {}
    following = 0
    for i, result in results:
        waiting[i] = result
        while following in waiting:
            yield waiting.pop(following)
            following += 1
