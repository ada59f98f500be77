"""Adaptive (IRT) sessions against full fixed-length sessions, on a simulated population (issue 17).

A bank of ``--items`` questions with known 2PL parameters (a ~ lognormal(0, 0.3), b ~ N(0, 1)) and
``--models`` simulated models of known ability (theta ~ N(0, 1)) that answer by the 2PL model, except
that a ``--misfit`` fraction of their answers is a coin flip (answers the model does not explain).
Half the models answer every question and the bank is calibrated on them (nodes.irt, the same
code as ``--calibrate``). The other half each take

* a full fixed-length session: ``--length`` questions sampled at random (LLMEval-3 section 2.2), scored
  by the share of correct answers (equation 1 with correct = full marks): the reference ranking;
* an adaptive session (maximum information at the EAP ability, randomesque k = ``--exposure``, no
  repeats), read at 10, 25, 50 and 100 % of the fixed length, and with the target-SE stop rules;
* a random session of the same length scored the same way (what a shorter fixed exam would give).

Printed per budget: Kendall tau (scipy) of the ranking against the full fixed-length ranking and against
the true abilities, RMSE of theta against the true theta (the adaptive EAP; the calibration's scale is
anchored on the calibration models' N(0, 1), as the true abilities are), and calls (one answer plus one
judgement per question) relative to the full session. Means over ``--seeds`` populations.

    python bench/irt_adaptive.py [--items 3000] [--models 30] [--length 1000] [--misfit 0.1] [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dyneval.nodes import irt  # noqa: E402


def answers(rng: np.random.Generator, theta: np.ndarray, a: np.ndarray, b: np.ndarray, misfit: float) -> np.ndarray:
    """0/1 answers of every model (rows) to every item (columns): 2PL, a ``misfit`` share replaced by coin flips."""
    y = rng.random((theta.size, a.size)) < irt.probability(theta[:, None], a, b)
    flip = rng.random(y.shape) < misfit
    return np.where(flip, rng.random(y.shape) < 0.5, y).astype(int)


def adaptive_path(
    y: np.ndarray, a: np.ndarray, b: np.ndarray, steps: int, k: int, rng: np.random.Generator, stops: tuple[float, ...]
) -> tuple[list[irt.Ability], dict[float, irt.Ability]]:
    """One adaptive session of ``steps`` questions: the ability after each answer, and where each SE stop
    rule would have ended it."""
    eligible = np.ones(a.size, bool)
    asked: list[int] = []
    ability = irt.eap([], [], [])
    path, stopped = [], {}
    for _ in range(steps):
        i = irt.select_item(ability.theta, a, b, eligible, rng, k=k)
        if i is None:
            break
        eligible[i] = False
        asked.append(i)
        ability = irt.eap(a[asked], b[asked], y[asked])
        path.append(ability)
        for se in stops:
            if se not in stopped and ability.se <= se:
                stopped[se] = ability
    return path, stopped


def one_population(seed: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0, 0.3, args.items)
    b = rng.normal(0, 1, args.items)
    theta = rng.normal(0, 1, args.models)
    y = answers(rng, theta, a, b, args.misfit)
    half = args.models // 2
    cal, test = np.arange(half), np.arange(half, args.models)
    ex, it = np.nonzero(np.ones((half, args.items), bool))
    fit = irt.calibrate(ex, it, y[cal][ex, it], args.items, model=args.irt_model)
    full = np.array([y[m, rng.choice(args.items, args.length, replace=False)].mean() for m in test])
    budgets = [max(1, round(args.length * f)) for f in (0.1, 0.25, 0.5, 1.0)]
    stops = tuple(args.stop_se)
    paths, stopped = zip(*(adaptive_path(y[m], fit.a, fit.b, budgets[-1], args.exposure, rng, stops) for m in test))
    rows: dict[str, dict[str, float]] = {}
    true = theta[test]

    def record(name: str, estimate: np.ndarray, calls: float, thetas: np.ndarray | None) -> None:
        rows[name] = {
            "tau_full": kendalltau(estimate, full).statistic,
            "tau_true": kendalltau(estimate, true).statistic,
            "rmse": float(np.sqrt(np.mean((thetas - true) ** 2))) if thetas is not None else float("nan"),
            "calls": calls,
        }

    for n, f in zip(budgets, ("10%", "25%", "50%", "100%")):
        est = np.array([p[n - 1].theta for p in paths])
        record(f"adaptive {f} ({n} q)", est, n / args.length, est)
        rand = np.array([y[m, rng.choice(args.items, n, replace=False)].mean() for m in test])
        record(f"random {f} ({n} q)", rand, n / args.length, None)
    for se in stops:
        ended = [s.get(se, p[-1]) for s, p in zip(stopped, paths)]
        est = np.array([e.theta for e in ended])
        record(f"adaptive SE<={se}", est, float(np.mean([e.n for e in ended])) / args.length, est)
    record(f"full fixed ({args.length} q)", full, 1.0, None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--models", type=int, default=30)
    ap.add_argument("--length", type=int, default=1000, help="fixed session length (the paper's N = 1000)")
    ap.add_argument("--misfit", type=float, default=0.1, help="share of answers that are coin flips")
    ap.add_argument("--exposure", type=int, default=5, help="randomesque k")
    ap.add_argument("--irt-model", default="2pl", choices=irt.MODELS)
    ap.add_argument("--stop-se", type=float, nargs="*", default=[0.3, 0.2])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    start = time.perf_counter()
    runs = [one_population(seed, args) for seed in range(args.seeds)]
    print(
        f"{args.items} items, {args.models} models ({args.models // 2} calibrate, {args.models - args.models // 2} "
        f"tested), fixed length {args.length}, misfit {args.misfit}, {args.irt_model}, randomesque k = "
        f"{args.exposure}; mean (min-max) over {args.seeds} populations; {time.perf_counter() - start:.0f} s"
    )
    head = f"{'session':<26}{'calls vs full':>14}{'tau vs full':>22}{'tau vs true':>22}{'theta RMSE':>12}"
    print(head)
    print("-" * len(head))

    def cell(values: list[float]) -> str:
        return f"{np.mean(values):.3f} ({min(values):.2f}-{max(values):.2f})"

    for name in runs[0]:
        vals = {k: [r[name][k] for r in runs] for k in ("tau_full", "tau_true", "rmse", "calls")}
        rmse = "-" if np.isnan(vals["rmse"][0]) else f"{np.mean(vals['rmse']):.3f}"
        print(
            f"{name:<26}{np.mean(vals['calls']):>13.0%} {cell(vals['tau_full']):>21} {cell(vals['tau_true']):>21}"
            f"{rmse:>12}"
        )


if __name__ == "__main__":
    main()
