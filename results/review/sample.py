"""Which judged items a review shows, in which order, and how many to suggest.

**Order.** The items are shuffled within each verdict (stratum), from the order of their keys, by a generator seeded
with the run id, and the
strata are interleaved by rank: the ``k``-th of ``n_s`` items of stratum ``s`` is placed at ``(k + 1/2) / n_s``
(Cochran, *Sampling Techniques*, 3rd ed., section 5.5: systematic selection within strata). Any first ``N`` of
this order is then a stratified random sample of size ``N`` with proportional allocation (each verdict holds its
share of the run, to within one item), and a larger ``--sample`` extends a smaller one: every reviewer of a run
sees the same items in the same order, and a reload or a restart resumes where the labels stop.

**Suggested size.** Enough labels to measure the judge's agreement with people to within +-10 points at 95 %
in the worst case (agreement 0.5): ``n0 = 1.96^2 * 0.25 / 0.1^2 = 96.04``, with the finite-population correction
for a run of ``N`` judged items, ``n = n0 / (1 + (n0 - 1) / N)`` rounded up (Cochran, eq. 4.2 and 4.1).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from dyneval.results.review.items import Item

#: Half-width of the agreement's 95 % interval the suggested sample size aims at, and the normal quantile.
MARGIN, Z95 = 0.10, 1.959964


def suggested_size(population: int) -> int:
    """The suggested number of labels for a run of ``population`` judged items (module docstring)."""
    n0 = Z95**2 * 0.25 / MARGIN**2
    return min(population, math.ceil(n0 / (1 + (n0 - 1) / population)))


def review_order(items: list[Item], seed: str) -> list[Item]:
    """Every item, in the review's order (module docstring): any prefix is a stratified sample by verdict."""
    rng = random.Random(seed)
    strata: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        strata[item.verdict].append(item)
    placed: list[tuple[float, float, Item]] = []
    for verdict in sorted(strata):
        members = sorted(strata[verdict], key=lambda item: item.key)  # whatever order the records were read in
        rng.shuffle(members)
        placed += [((k + 0.5) / len(members), rng.random(), item) for k, item in enumerate(members)]
    return [item for *_, item in sorted(placed, key=lambda p: (p[0], p[1]))]
