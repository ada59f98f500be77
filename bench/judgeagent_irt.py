"""JudgeAgent's adaptive base questions (--irt-runs) on a simulated benchmark: does the first extension difficulty
come out as the whole pool would set it, with a fraction of the base answers? (issue 17)

A benchmark of ``--items`` unlabeled questions with known 2PL parameters (a ~ lognormal(0, 0.3), b ~ N(0, 1));
``--earlier`` earlier targets (theta ~ N(0, 1)) answer every question and calibrate it (nodes.irt.calibrate,
the code --irt-runs uses). Then ``--targets`` new targets (theta ~ N(0, 1)) each meet one pool of ``--pool``
random questions and the first extension level is decided (Appendix B, gains 1/1.5/2, thresholds 0.5/1) by

* ``true``: the Appendix B average the target's true theta predicts on the pool, with the true parameters
  (what an endless Benchmark Grading would settle on): the reference;
* ``whole pool``: sc_B / RND_total after answering every pool question (Algorithm 1 on a batch of the pool);
* ``IRT, N asked``: N questions chosen by maximum information at the EAP ability, then the level of the
  average the EAP ability predicts on the pool with the fitted parameters (nodes.judgeagent.adaptive);
* ``observed, N asked adaptively``: the same N answers, but their own sc_B average decides;
* ``random N``: N random questions of the pool, their sc_B average decides (the paper with a batch of N).

Printed: base answers per batch and the share of targets whose level equals the reference (and the whole-pool
level). One run, one seed per population, means over ``--seeds`` populations.

    python bench/judgeagent_irt.py [--items 60] [--earlier 8] [--pool 30] [--targets 300] [--seeds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dyneval.nodes import irt  # noqa: E402
from dyneval.nodes.judgeagent.adaptive import expected_average  # noqa: E402
from dyneval.state.judgeagent import BaseQuestion, DifficultyControl  # noqa: E402

CONTROL = DifficultyControl()
C2 = CONTROL.gain(None)


def level(total: float, n: int) -> str:
    return CONTROL.next_difficulty(total, n)


def population(rng: np.random.Generator, args: argparse.Namespace) -> dict[str, float]:
    """Agreement shares of one simulated population."""
    a, b = np.exp(rng.normal(0, 0.3, args.items)), rng.normal(0, 1, args.items)
    earlier = rng.normal(0, 1, args.earlier)
    y = (rng.random((args.earlier, args.items)) < irt.probability(earlier[:, None], a, b)).astype(int)
    ex, it = np.nonzero(np.ones_like(y))
    fit = irt.calibrate(ex, it, y[ex, it], args.items, model=args.model)
    qs = [BaseQuestion(id=str(i), question="q", answer="a") for i in range(args.items)]
    fitted = {str(i): [fit.a[i], fit.b[i]] for i in range(args.items)}
    true = {str(i): [a[i], b[i]] for i in range(args.items)}
    hits: dict[str, list[bool]] = {}

    def record(name: str, got: str, ref: str, whole: str) -> None:
        hits.setdefault(name, []).append(got == ref)
        hits.setdefault(name + " | whole pool", []).append(got == whole)

    for theta in rng.normal(0, 1, args.targets):
        pool = rng.choice(args.items, args.pool, replace=False)
        answer = (rng.random(args.items) < irt.probability(theta, a, b)).astype(int)
        ref = level(*expected_average(CONTROL, theta, [qs[i] for i in pool], true))
        whole = level(C2 * answer[pool].sum(), args.pool)
        record("whole pool", whole, ref, whole)
        for n in args.asked:
            asked: list[int] = []
            eligible = np.isin(np.arange(args.items), pool)
            ability = irt.eap([], [], [])
            for _ in range(n):
                i = irt.select_item(ability.theta, fit.a, fit.b, eligible, rng)
                eligible[i] = False
                asked.append(i)
                ability = irt.eap(fit.a[asked], fit.b[asked], answer[asked])
            got = level(*expected_average(CONTROL, ability.theta, [qs[i] for i in pool], fitted))
            record(f"IRT, {n} asked", got, ref, whole)
            record(f"observed, {n} asked adaptively", level(C2 * answer[asked].sum(), n), ref, whole)
            rand = rng.choice(pool, n, replace=False)
            record(f"random {n}", level(C2 * answer[rand].sum(), n), ref, whole)
    return {k: float(np.mean(v)) for k, v in hits.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=60)
    p.add_argument("--earlier", type=int, default=8)
    p.add_argument("--pool", type=int, default=30)
    p.add_argument("--asked", type=int, nargs="+", default=[3, 6, 10])
    p.add_argument("--targets", type=int, default=300)
    p.add_argument("--model", default="2pl", choices=irt.MODELS)
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    start = time.perf_counter()
    runs = [population(np.random.default_rng(s), args) for s in range(args.seeds)]
    print(
        f"{args.items} questions, {args.earlier} earlier targets, pools of {args.pool}, {args.targets} targets, "
        f"{args.model}, {args.seeds} populations, {time.perf_counter() - start:.1f} s"
    )
    print("| first level decided by | base answers per batch | = true level | = whole-pool level |")
    print("| --- | --- | --- | --- |")
    names = [k for k in runs[0] if not k.endswith(" | whole pool")]
    for name in names:
        n = args.pool if name == "whole pool" else int(name.split()[1])
        same, pool_same = (np.array([r[k] for r in runs]) for k in (name, name + " | whole pool"))
        print(
            f"| {name} | {n} ({n / args.pool:.0%}) | {same.mean():.3f} ({same.min():.2f}-{same.max():.2f}) "
            f"| {pool_same.mean():.3f} |"
        )


if __name__ == "__main__":
    main()
