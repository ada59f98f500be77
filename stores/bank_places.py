"""Sampling places of the llmeval question bank (:data:`stores.bank_schema.ranks`).

Each active question has a place in UUID order, among all active questions (``rank``) and within its discipline
(``drank``). A session draws places, with the draws sampling the list of every unseen question's UUID would make,
and looks up only the drawn questions: the bank is never read whole (:meth:`QuestionBank.create_session`).
The places are derived from ``llmeval_questions``: valid while ``llmeval_meta`` holds :data:`RANKS_KEY` (every
change to the questions deletes it) and rebuilt by the next :func:`ranked_sizes`.
"""

from __future__ import annotations

import json
import random
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any, NamedTuple

import sqlalchemy as sa

from dyneval.stores.bank_schema import meta, questions, ranks

#: ``llmeval_meta`` key: the places are valid (value: active questions per discipline, JSON).
RANKS_KEY = "ranks"
RANKS_LOCK = 0x6C6C6D72  # PostgreSQL advisory lock of a rebuild


class Ranked(NamedTuple):
    """An active question's places in UUID order: among all active questions and within its discipline."""

    uuid: str
    rank: int
    discipline: str
    drank: int


def ranked(conn: Any, where: Any) -> list[Ranked]:
    """The places of the questions ``where`` selects (a condition on :data:`ranks`)."""
    return [
        Ranked(*r)
        for r in conn.execute(sa.select(ranks.c.uuid, ranks.c.rank, ranks.c.discipline, ranks.c.drank).where(where))
    ]


def ranked_sizes(conn: Any) -> dict[str, int]:
    """Active questions per discipline; the places rebuilt first when questions changed since (one statement:
    each active question's place in UUID order, overall and within its discipline)."""
    read = sa.select(meta.c.value).where(meta.c.key == RANKS_KEY)
    value = conn.scalar(read)
    if value is None and conn.dialect.name == "postgresql":  # one rebuild at a time across processes
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": RANKS_LOCK})
        value = conn.scalar(read)  # another process may have rebuilt them meanwhile
    if value is not None:
        return json.loads(value)
    conn.execute(ranks.delete())
    place = sa.func.row_number().over(order_by=questions.c.uuid) - 1
    dplace = sa.func.row_number().over(partition_by=questions.c.discipline, order_by=questions.c.uuid) - 1
    conn.execute(
        ranks.insert().from_select(
            ["uuid", "rank", "discipline", "drank"],
            sa.select(questions.c.uuid, place, questions.c.discipline, dplace).where(questions.c.active.is_(True)),
        )
    )
    sizes = {
        d: int(c) for d, c in conn.execute(sa.select(ranks.c.discipline, sa.func.count()).group_by(ranks.c.discipline))
    }
    conn.execute(meta.insert().values(key=RANKS_KEY, value=json.dumps(sizes)))
    return sizes


def at_places(conn: Any, keys: list[tuple[str | None, int]]) -> list[Ranked]:
    """The questions at ``keys`` (``(None, rank)`` or ``(discipline, drank)``), in the order of ``keys``."""
    found: dict[tuple[str | None, int], Ranked] = {}
    wanted: dict[str | None, list[int]] = {}
    for d, k in keys:
        wanted.setdefault(d, []).append(k)
    for d, places in wanted.items():
        for i in range(0, len(places), 10000):  # within every database's limit of bound parameters
            chunk = places[i : i + 10000]
            where = ranks.c.rank.in_(chunk) if d is None else sa.and_(ranks.c.discipline == d, ranks.c.drank.in_(chunk))
            for r in ranked(conn, where):
                found[(d, r.rank if d is None else r.drank)] = r
    return [found[k] for k in keys]


def free_places(excluded: list[int], picks: Iterable[int]) -> list[int]:
    """For each ``j`` of ``picks``: the ``j``-th (0-based) place that is not in ``excluded`` (sorted)."""
    free_before = [x - i for i, x in enumerate(excluded)]  # places not excluded before each excluded one
    return [j + bisect_right(free_before, j) for j in picks]


class Pool:
    """The active questions in UUID order minus ``excluded``, held as places, not as a list of UUIDs.

    ``random.sample`` only uses a population's length and indices, so drawing places from ``range(len(pool))``
    and mapping them past the excluded ones gives the draws, hence the questions, of sampling that list.
    """

    def __init__(self, sizes: dict[str, int], excluded: Iterable[Ranked]) -> None:
        self.sizes = sizes  # active questions per discipline
        self.excluded = sorted({r.rank: r for r in excluded}.values(), key=lambda r: r.rank)

    def __len__(self) -> int:
        return sum(self.sizes.values()) - len(self.excluded)

    def places(self, picks: Iterable[int]) -> list[tuple[str | None, int]]:
        """The :func:`at_places` keys of the pool's ``picks``-th questions."""
        return [(None, r) for r in free_places([r.rank for r in self.excluded], picks)]

    def sample(self, rng: random.Random, n: int, stratified: bool) -> list[tuple[str | None, int]]:
        """``n`` places without replacement; stratified by discipline (largest-remainder quotas) when asked."""
        n = min(n, len(self))
        if not stratified:
            return self.places(rng.sample(range(len(self)), n))
        out_of: dict[str, list[int]] = {}
        for r in self.excluded:
            out_of.setdefault(r.discipline, []).append(r.drank)
        groups = {d: size - len(out_of.get(d, ())) for d, size in self.sizes.items()}
        groups = {d: g for d, g in groups.items() if g > 0}
        total = len(self)
        exact = {d: n * g / total for d, g in groups.items()}
        quota = {d: int(x) for d, x in exact.items()}
        leftover = n - sum(quota.values())
        for d in sorted(groups, key=lambda d: (-(exact[d] - quota[d]), d))[:leftover]:
            quota[d] += 1
        chosen: list[tuple[str | None, int]] = []
        for d in sorted(groups):
            picks = rng.sample(range(groups[d]), min(quota[d], groups[d]))
            chosen += [(d, k) for k in free_places(sorted(out_of.get(d, [])), picks)]
        return chosen
