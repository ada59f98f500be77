"""The JudgeAgent report: overall score, Table 1-style validation, Table 3-style dynamic scores and
difficulty distribution, Table 5-style efficiency, difficulty-trajectory plots, per-batch flaws and
suggestions."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from dyneval.results.headline import report_blocks
from dyneval.results.report import figure_path, line_chart
from dyneval.runtime.protocol import Run, with_results
from dyneval.state.blocks import Block, Code, Details, Figure, Heading, Table, Text
from dyneval.state.judgeagent import DIFFICULTIES
from dyneval.state.verdicts import show

LEVEL = {"easy": 1, "medium": 2, "hard": 3}


def _den(d: dict[str, Any] | None) -> str:
    if not d:
        return ""
    return f"{d['n']}" + (f" ({d['ungraded']})" if d.get("ungraded") else "")


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def num(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


FORMATS = {
    "phrase": "phrase answers (a word or a phrase, judged as the same fact)",
    "free": "free-form answers (judged by the evaluator against the full reference)",
}


def build_report(run: Run, m: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
    ok = with_results(records)
    blocks: list[Block] = [Heading("JudgeAgent evaluation", 2), *report_blocks("judgeagent", m)]
    settings = m.get("settings", {})
    ablations = [
        name for name in ("no_context_graph", "no_difficulty_adaptation", "no_extension") if settings.get(name)
    ]
    blocks.append(
        Text(
            f"Batches: {m['batches']}, base questions: {m['base_questions']}. Knowledge base: "
            f"{settings.get('kb')}. Ablations: {', '.join(ablations) or 'none'}. Questions without "
            f"options were asked for {FORMATS.get(m.get('answer_format', ''), m.get('answer_format'))}."
        )
    )
    den = m.get("score_denominator") or {}
    if m.get("batches_ungraded"):
        blocks.append(
            Text(
                f"{m['batches_ungraded']} batch(es) hold ungraded answers or are unvalidated: the "
                "evaluator gave no usable verdict or feedback after retries and one repair (or the "
                "--judge-jury split without a majority). Ungraded "
                "answers count neither for nor against the model (every rate below is over graded "
                "answers and gives its denominator); --resume re-judges them."
            )
        )
    blocks.append(
        Table(
            ["metric", "value"],
            [
                [
                    "JudgeAgent score (sum of gains / graded answers, Algorithm 1)",
                    f"{num(m['score']) or 'n/a'} (n={den.get('n', '')}, {den.get('ungraded', 0)} ungraded)",
                ],
                ["Base accuracy (Benchmark Grading)", show(m["base_accuracy"], "{:.2%}")],
                [
                    "Generated questions (failed generations)",
                    f"{m['generation']['rounds']} ({m['generation']['failed']})",
                ],
                [
                    "Answers judged by (code = option letter / exact = the reference itself / evaluator / empty / "
                    "ungraded / split = the --judge-jury had no majority, left ungraded)",
                    str(m["judged_by"]),
                ],
                ["Feedback status per batch", str(m["feedback_status"])],
                ["Base questions whose free-form answer the feedback quotes", ", ".join(m["leak_suspects"]) or "none"],
            ],
            caption="Overall",
        )
    )

    if m.get("adaptive_grading"):
        blocks.extend(_adaptive(m["adaptive_grading"], ok))

    # Table 1 style
    val = m.get("validation")
    blocks.append(Heading("Validation with suggestions (Algorithm 2, Table 1 style)", 3))
    unval = m.get("unvalidated_batches") or {}
    if val:
        rows = []
        for label, v in val.items():
            rows.append(
                [
                    label,
                    v["n"],
                    v.get("ungraded", 0),
                    pct(v["acc1"]),
                    pct(v["acc2"]),
                    pct(v["cr"]),
                    pct(v["cte"]),
                    pct(v["cr_given_wrong"]),
                    pct(v["cte_given_right"]),
                ]
            )
        blocks.append(
            Table(
                ["questions", "n (graded)", "ungraded", "ACC1", "ACC2", "CR", "CtE", "CR | wrong", "CtE | right"],
                rows,
                caption=f"All values in percent over the n questions graded both times; "
                f"{m['validated_batches']} validated batches, {len(unval)} unvalidated",
            )
        )
        blocks.append(
            Text(
                "CR and CtE follow Algorithm 2: wrong->right and right->wrong counts over ALL base questions "
                "(so ACC2 = ACC1 + CR - CtE). 'CR | wrong' is wrong->right over the initially wrong questions and "
                "'CtE | right' is right->wrong over the initially right questions (conditional rates). ACC1 uses "
                "the Benchmark Grading answers; ACC2 the answers given with the batch's suggestions (Table 14)."
            )
        )
    else:
        blocks.append(Text("No batch was validated (feedback failed or validation was switched off)."))
    if unval:
        blocks.append(
            Table(
                ["unvalidated batch", "why"],
                [[u, why] for u, why in sorted(unval.items())],
                caption="Batches in no ACC1/ACC2/CR/CtE value above (resume redoes them)",
            )
        )

    # Table 3 style
    ds = m["dynamic_scores"]
    dist = m["difficulty_distribution"]
    keys = list(ds)
    blocks.append(Heading("Dynamic difficulty scores (Table 3 style)", 3))
    dd = m.get("dynamic_denominators") or {}
    blocks.append(
        Table(
            ["", "ACC (%)", *keys, *[f"{d} (%)" for d in DIFFICULTIES]],
            [
                [
                    "value",
                    pct(m["base_accuracy"]["value"]),
                    *[num(ds[k]) for k in keys],
                    *[pct(dist["share"][d]) for d in DIFFICULTIES],
                ],
                [
                    "graded (ungraded)",
                    _den(m["base_accuracy"]),
                    *[_den(dd.get(k)) for k in keys],
                    *[""] * len(DIFFICULTIES),
                ],
            ],
            caption=(
                "base = pooled score of the base questions, @K = pooled running score after "
                f"the K-th extension round; distribution over {dist['total']} generated questions"
            ),
        )
    )

    # Table 5 style
    eff = m["efficiency"]
    blocks.append(
        Table(
            ["avg tokens per seed question", "avg seconds per seed question"],
            [[num(eff["avg_tokens_per_seed_question"]), num(eff["avg_seconds_per_seed_question"])]],
            caption="Efficiency (Table 5 style): batch tokens and wall time divided by base questions",
        )
    )

    blocks.extend(_figures(run, ok))
    blocks.extend(_batches(ok))
    return blocks


def _adaptive(ad: dict[str, Any], ok: list[dict[str, Any]]) -> list[Block]:
    """Adaptive base questions (--irt-runs): the calibration, the ability, the calls not made, per batch."""
    cal, ab, acc = ad["calibration"], ad["ability"], ad["expected_accuracy"]
    saved = ad["saved"]
    out: list[Block] = [
        Heading("Adaptive base questions (item response theory)", 3),
        Text(
            f"Item parameters ({cal['irt_model']}) fitted on {cal['responses']} graded answers of "
            f"{len(cal['examinees'])} earlier targets in {len(cal['runs'])} runs; {cal['calibrated']} of "
            f"{cal['benchmark_questions']} questions had at least {cal['min_responses']} answers and were calibrated "
            f"(EM {'converged' if cal.get('converged') else 'did not converge'} in {cal.get('iterations')} "
            f"iterations); {cal['uncalibrated']} uncalibrated questions were left out. Each batch asked its questions "
            f"one at a time, each the most informative at the target's ability so far; the first extension difficulty "
            f"is the Appendix B level of the average the ability predicts on the whole pool (the accuracy on questions "
            f"chosen near the ability tends to 1/2 for every target, so their observed average would not tell targets "
            f"apart)."
        ),
    ]
    out.append(
        Table(
            ["metric", "value"],
            [
                [
                    "ability theta +/- SE (all batches' graded answers, EAP, N(0,1) prior)",
                    f"{ab['theta']:.3f} +/- {ab['se']:.3f} (95 % {ab['theta_95'][0]:.3f} to {ab['theta_95'][1]:.3f}; "
                    f"n={ab['responses']})",
                ],
                [
                    f"expected accuracy on the {acc['questions']} calibrated questions",
                    f"{pct(acc['value'])} % (95 % {pct(acc['low'])} to {pct(acc['high'])})",
                ],
                ["base questions asked / in the pools", f"{ad['asked']} / {ad['pool_questions']}"],
                [
                    "calls not made versus grading every pool question",
                    f"{saved['base_answers']} target answers (+ a judge call for each that code would not have "
                    "decided), "
                    f"{saved['validation_answers']} validation re-answers (+ their judge calls)",
                ],
                ["first extension difficulty per batch", str(ad["first_difficulty"])],
            ],
            caption="Adaptive Benchmark Grading",
        )
    )
    rows = []
    for r in ok:
        x = r.get("adaptive")
        if x:
            lo, hi = x["difficulty_interval"]
            rows.append(
                [
                    r["unit_id"],
                    f"{x['theta']:.3f} +/- {x['se']:.3f}",
                    f"{len(x['asked'])}/{x['pool']}",
                    ", ".join(x["asked"]),
                    num(x["observed_avg"]),
                    num(x["expected_avg"]),
                    x["first_difficulty"],
                    lo if lo == hi else f"{lo} to {hi}",
                ]
            )
    out.append(
        Table(
            [
                "batch",
                "theta +/- SE",
                "asked/pool",
                "asked (in order)",
                "observed avg",
                "expected avg",
                "first difficulty",
                "at theta -/+ 1.96 SE",
            ],
            rows,
            caption="Per batch: observed avg = sc_B / RND_total of the asked questions; expected avg = "
            "the Appendix B average the ability predicts on the pool",
        )
    )
    return out


def _figures(run: Run, ok: list[dict[str, Any]]) -> list[Block]:
    out: list[Block] = []
    trajs = [r["trajectory"] for r in ok if r.get("trajectory")]
    if not trajs or max(len(t) for t in trajs) < 2:
        return out
    steps = max(len(t) for t in trajs)
    labels = ["base", *[f"@{k}" for k in range(1, steps)]]
    if len(trajs) <= 12:
        series: dict[str, Sequence[float]] = {
            r["unit_id"]: [_nan(t["avg"]) for t in r["trajectory"]] for r in ok if r.get("trajectory")
        }
        band: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None
    else:
        cols = [[t[i]["avg"] for t in trajs if len(t) > i and t[i]["avg"] is not None] for i in range(steps)]
        series = {"mean": [mean(c) if c else float("nan") for c in cols]}
        band = {"mean": ([min(c, default=float("nan")) for c in cols], [max(c, default=float("nan")) for c in cols])}
    path = line_chart(
        figure_path(run.run_dir, "judgeagent_score_trajectory"),
        series,
        x=labels,
        band=band,
        title="Running difficulty score per batch",
        xlabel="after",
        ylabel="avg score",
    )
    out.append(Figure(path, "Running difficulty score after the base questions and each extension round"))
    levels: dict[str, Sequence[float]] = {
        r["unit_id"]: [LEVEL.get(x["difficulty"], 0) for x in r["rounds"]] for r in ok if r["rounds"]
    }
    if levels:
        if len(levels) > 12:
            n = max(len(v) for v in levels.values())
            levels = {"mean": [mean(v[i] for v in levels.values() if len(v) > i) for i in range(n)]}
        path = line_chart(
            figure_path(run.run_dir, "judgeagent_difficulty_trajectory"),
            levels,
            title="Difficulty of the generated question per round (1 easy, 2 medium, 3 hard)",
            xlabel="round",
            ylabel="difficulty",
        )
        out.append(Figure(path, "Difficulty trajectory of the generated questions"))
    return out


def _batches(ok: list[dict[str, Any]]) -> list[Block]:
    out: list[Block] = [Heading("Per batch: knowledge flaws and suggestions", 3)]
    for r in ok:
        fb = r.get("feedback") or {}
        inner: list[Block] = []
        inner.append(
            Table(
                ["question", "difficulty", "verdict", "judged by", "answer (clipped)"],
                [
                    [
                        b["id"],
                        b.get("difficulty") or "-",
                        b.get("verdict", b["correct"]),
                        b.get("how"),
                        str(b.get("reply", ""))[:120],
                    ]
                    for b in r["base"]
                ],
                caption="Base questions",
            )
        )
        if r["rounds"]:
            inner.append(
                Table(
                    ["round", "difficulty", "path", "question", "reference", "verdict", "avg after", "next"],
                    [
                        [
                            x["round"],
                            x["difficulty"],
                            " > ".join(x["path"].get("entities") or []) or x["path"].get("mode"),
                            x.get("question", x.get("reason", ""))[:160],
                            x.get("answer", ""),
                            x.get("verdict", x.get("correct", "")),
                            num(x.get("avg_after")),
                            x.get("next_difficulty"),
                        ]
                        for x in r["rounds"]
                    ],
                    caption="Interactive extension",
                )
            )
        if fb.get("status") == "ok":
            inner.append(
                Table(
                    ["field", "text"],
                    [
                        [k, fb.get(k, "")]
                        for k in ("flaws_knowledge", "flaws_capability", "comprehensive_performance", "suggestions")
                    ],
                    caption="Evaluation feedback (Table 13)",
                )
            )
        else:
            inner.append(Code(f"feedback {fb.get('status')}: {fb.get('reason', '')}"))
        if r["validation"]:
            inner.append(
                Table(
                    ["question", "before", "after"],
                    [
                        [v["id"], v.get("verdict1", v["correct1"]), v.get("verdict2", v["correct2"])]
                        for v in r["validation"]
                    ],
                    caption="Validation",
                )
            )
        out.append(
            Details(f"{r['unit_id']} (score {num(r['score'] / r['answered'] if r['answered'] else None)})", inner)
        )
    return out
