"""Interview Report blocks (seed 004, section 3.2; Tables 2, 3, 6, 7; Appendix C.1 report examples)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dyneval.protocols.interview import metrics
from dyneval.results.headline import report_blocks as headline_blocks
from dyneval.results.report import figure_path, line_chart
from dyneval.runtime.protocol import Run
from dyneval.state.blocks import Block, Code, Details, Figure, Heading, Table, Text


def _f(x: Any) -> Any:
    return None if x is None else (round(x, 3) if isinstance(x, float) else x)


def _clip(text: str, n: int = 300) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[:n] + " ..."


def _delta(scores: list[float | None]) -> float | None:
    return None if scores[-1] is None or scores[0] is None else scores[-1] - scores[0]


def _nan(scores: list[float | None]) -> list[float]:
    return [float("nan") if x is None else x for x in scores]


def _den(d: dict[str, Any] | None) -> str:
    if not d:
        return ""
    return f"{d['n']}" + (f" ({d['ungraded']})" if d.get("ungraded") else "")


def report_blocks(run: Run, m: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
    from dyneval.nodes.interview.interviewer import transcript_text  # the graph's modules: not with `dyneval --help`

    ok = metrics.ok_records(records)
    if not ok:
        return [Text("No interview finished, so there is no Interview Report.")]
    n_max = m["n_max"]
    blocks: list[Block] = [*headline_blocks("interview", m), Heading("1. Performance scores")]
    heads = ["task", "sessions", "Judge", *[f"@{n}" for n in range(1, n_max + 1)], "Δ (@last - @1)"]
    rows = []
    for task, t in m["by_task"].items():
        s = t["score_at_n"]
        rows.append([task, t["sessions"], _f(t["judge"]), *map(_f, s), _f(_delta(s))])
    all_s = [m[f"score@{n}"] for n in range(1, n_max + 1)]
    rows.append(["all", m["sessions"], _f(m["judge"]), *map(_f, all_s), _f(m["delta"])])
    den = m.get("denominators", {})
    rows.append(
        [
            "graded (ungraded)",
            "",
            _den(den.get("judge")),
            *[_den(den.get(f"score@{n}")) for n in range(1, n_max + 1)],
            "",
        ]
    )
    blocks.append(
        Table(
            heads,
            rows,
            caption="Score@n of the seed questions (Table 2 style): @n = after n-1 rounds "
            "of feedback; math = accuracy, factual = precision of atomic facts; "
            "Judge = single-turn LLM-as-a-Judge on the unmodified question. Every "
            "Score@n is over the same sessions, those whose seed answers were all "
            "graded (an ungraded retry cannot move a failing session out of a "
            "later Score@n); the last row gives the denominators and what was "
            "left out as ungraded",
        )
    )
    if m.get("sessions_ungraded"):
        split = m.get("graded_by", {}).get("split", 0)
        why = "the grader gave no usable verdict after retries and one repair" + (
            f", or ({split} of them) the grader jury split without a majority" if split else ""
        )
        blocks.append(
            Text(
                f"{m['sessions_ungraded']} session(s) hold {m.get('answers_ungraded', 0)} ungraded "
                f"answer(s): {why}. A session stops at its first ungraded answer; ungraded answers "
                "count neither for nor against the model, and --resume re-judges them."
            )
        )
    series: dict[str, Sequence[float]] = {"interview (all)": _nan(all_s)}
    for task, t in m["by_task"].items():
        if len(m["by_task"]) > 1:
            series[task] = _nan(t["score_at_n"])
    if m.get("by_level"):
        blocks.append(
            Table(
                ["level", "sessions", "Judge", *[f"@{n}" for n in range(1, n_max + 1)], "std over repeats @1..@n"],
                [
                    [
                        lv,
                        t["sessions"],
                        _f(t["judge"]),
                        *map(_f, t["score_at_n"]),
                        ", ".join(str(_f(x)) for x in t["run_to_run"]["std"]) if t.get("run_to_run") else "",
                    ]
                    for lv, t in m["by_level"].items()
                ],
                caption="Score@n by difficulty level (section 7 compares easy and hard levels)",
            )
        )
    if m.get("judge") is not None:
        series["single-turn judge (all)"] = [m["judge"]] * n_max
    path = line_chart(
        figure_path(run.run_dir, "interview_score_at_n"),
        series,
        title="Score@n",
        xlabel="interaction",
        ylabel="score",
        x=[f"@{n}" for n in range(1, n_max + 1)],
    )
    blocks.append(Figure(path, "Score@n by interaction; the flat line is the single-turn judge score"))

    fa = m["followup_accuracy"]
    blocks.append(
        Table(
            ["seed solved", "seed failed", "overall", "graded follow-ups (solved/failed)", "ungraded"],
            [
                [
                    _f(fa["solved"]),
                    _f(fa["failed"]),
                    _f(fa["overall"]),
                    f"{fa['n_solved']}/{fa['n_failed']}",
                    fa.get("ungraded", 0),
                ]
            ],
            caption="Follow-up accuracy within solved and failed seed questions (Table 3 style), over "
            "graded follow-up answers",
        )
    )
    if fa["by_type"]:
        blocks.append(
            Table(
                ["follow-up type (Table 1)", "accuracy", "n", "ungraded"],
                [[t, _f(v["accuracy"]), v["n"], v.get("ungraded", 0)] for t, v in fa["by_type"].items()],
                caption="Follow-up accuracy by type",
            )
        )

    blocks.append(Heading("2. Error analysis and examples"))
    et = m["error_types"]
    blocks.append(
        Table(
            ["error type", "count", "rate"],
            [[t, v["count"], _f(v["rate"])] for t, v in et["types"].items()],
            caption=f"Error types over {et['total']} incorrect answers to seed questions",
        )
    )
    ex_blocks: list[Block] = []
    for t, v in et["types"].items():
        for e in v["examples"]:
            ex_blocks.append(
                Code(
                    f"[{t}] {e['unit']} try {e['attempt']}\nQuestion: {_clip(e['question'])}\n"
                    f"Answer: {_clip(e['answer'], 500)}\nGrader: {_clip(e['reason'])}"
                )
            )
    if ex_blocks:
        blocks.append(Details("Examples per error type", ex_blocks))

    blocks.append(Heading("3. Summary"))
    blocks.append(Text(m.get("comprehensive_summary") or "(no summary)"))
    blocks.append(Text(f"(written by: {m.get('summary_source')})"))

    blocks.append(Heading("Reliability analyses"))
    blocks.append(
        Table(
            ["interaction", "answers", "r (length vs score)", "p"],
            [[v["interaction"], v["n"], _f(v["r"]), _f(v["p"])] for v in m["verbosity_bias"]],
            caption="Verbosity bias: Pearson correlation of answer length (words) with score "
            "(section 7); empty = undefined (fewer than 3 answers or constant values)",
        )
    )
    rr = m.get("run_to_run")
    if rr:
        blocks.append(
            Table(
                ["", *[f"@{n}" for n in range(1, n_max + 1)], "Judge"],
                [["std over repeats", *map(_f, rr["std"]), _f(rr["judge_std"])]],
                caption=f"Run-to-run standard deviation over {rr['repeats']} repeats (Table 6 style)",
            )
        )
    else:
        blocks.append(Text("Run-to-run standard deviation: run with --repeats K (K >= 2) to measure it."))
    if m.get("bootstrap"):
        blocks.append(
            Table(
                ["sample size", "Interviewer (Score@1) p", "Judge p"],
                [[b["size"], _f(b["interviewer_p"]), _f(b["judge_p"])] for b in m["bootstrap"]],
                caption="Bootstrap sample-size check (Appendix C.2, Table 7 style): p of the full-set "
                "mean among resampled means of a subset of that size; large p = no significant "
                "difference",
            )
        )
    fc, gb, mod = m.get("feedback_checks", {}), m.get("graded_by", {}), m.get("modification", {})
    blocks.append(
        Table(
            ["check", "counts"],
            [
                ["feedback (answer-leak check in code)", ", ".join(f"{k}={v}" for k, v in sorted(fc.items()))],
                ["grading provenance", ", ".join(f"{k}={v}" for k, v in sorted(gb.items()))],
                ["question modification", ", ".join(f"{k}={v}" for k, v in mod.items())],
            ],
            caption="How the verdicts were reached",
        )
    )

    blocks.append(Heading("Interview transcripts"))
    for r in sorted(ok, key=lambda r: r["unit_id"]):
        outcome = (
            f"stopped: {r['stopped']}"
            if r.get("stopped")
            else f"solved at @{r['solved_at']}"
            if r["seed_solved"]
            else "not solved"
        )
        mod = r.get("modification", {})
        inner: list[Block] = [
            Text(
                f"Task {r['task']}; modification {mod.get('strategy')} -> {mod.get('status')}; {outcome}; "
                f"scores {r['seed_scores']}; single-turn judge score {r.get('single_turn', {}).get('score')}"
            ),
            Text(f"Original question: {_clip(r['original_question'], 600)}"),
            Text(f"Session summary ({r.get('summary_source')}): {r.get('session_summary')}"),
            Code(transcript_text(r.get("transcript", []), limit=1500)),
        ]
        blocks.append(Details(f"{r['unit_id']}: {outcome}", inner))
    return blocks
