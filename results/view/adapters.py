"""The built-in protocols' declarations for the readers of their runs (:class:`state.viewer.Adapter`, each the
``viewer`` of its protocol class): headline metrics (named and defined as in its paper, with their denominators),
the per-unit numeric outcomes a comparison pairs, extra unit-table columns and detail sections; and
:func:`adapter`, which finds any registered protocol's. Everything is read from the run's files (records, summary),
never recomputed from scratch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.results.numbers import cell, interval_text, number
from dyneval.state.atad import TASKS
from dyneval.state.blocks import Table
from dyneval.state.errors import InputError
from dyneval.state.viewer import Adapter, Metric, Section
from dyneval.stores.runfiles import ConfigFile

if TYPE_CHECKING:
    from dyneval.stores.question_bank import QuestionBank


def leaves(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` of every value of ``data`` that is not a mapping, depth first in key order (the
    paths :func:`dig` follows): what the summary table, the viewer's metrics and the export flatten."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def dig(data: Any, path: str) -> Any:
    """``data`` followed along a dotted path (None where a key is missing)."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def interval_of(metrics: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The 95 % interval of the headline metric at ``path`` (a :class:`Metric` path with any ``*`` replaced by its
    key), as every protocol writes it under ``summary["metrics"]["intervals"][path]``: ``{"estimate", "low",
    "high", "n", "level", "method"}`` (``method`` names how it was computed, e.g. ``clopper-pearson``,
    ``cluster-robust-t``, ``t-over-answers``). None when the run wrote none (an older run, or no data)."""
    found = (metrics.get("intervals") or {}).get(path)
    return found if isinstance(found, dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _share(items: list[dict[str, Any]] | None, key: str = "correct") -> float | None:
    """Share of graded entries (verdict correct / wrong) with ``key`` true; None when none is graded."""
    graded = [i for i in items or [] if i.get("verdict") in ("correct", "wrong")]
    return sum(bool(i.get(key)) for i in graded) / len(graded) if graded else None


# -- JudgeAgent (seed 000) ----------------------------------------------------------------------------------


def _question_texts(unit_input: dict[str, Any]) -> dict[str, str]:
    """Base question id -> its text with its options lettered A, B, ... (the unit's batch in the plan), as the
    target read it (``nodes.judgeagent.common.question_text``)."""
    return {
        str(q.get("id")): "\n".join(
            [str(q.get("question") or ""), *(f"{chr(65 + i)}. {o}" for i, o in enumerate(q.get("options") or []))]
        )
        for q in unit_input.get("batch") or []
        if isinstance(q, dict)
    }


def _judgeagent_sections(record: dict[str, Any], unit_input: dict[str, Any]) -> list[Section]:
    out: list[Section] = []
    if record.get("trajectory"):
        out.append(
            {
                "title": "Difficulty trajectory (running score after each step, next difficulty; Algorithm 1)",
                "headers": ["after", "running score", "next difficulty", "ungraded"],
                "rows": [
                    [t.get("after"), t.get("avg"), t.get("next"), t.get("ungraded")] for t in record["trajectory"]
                ],
            }
        )
    text = _question_texts(unit_input)
    judged = [
        [
            "base",
            text.get(str(b.get("id")), b.get("id")),
            b.get("difficulty"),
            b.get("verdict"),
            b.get("gain"),
            b.get("how"),
            b.get("reason"),
            b.get("reply"),
        ]
        for b in record.get("base") or []
    ]
    judged += [
        [
            "round " + str(r.get("round", i)),
            r.get("question"),
            r.get("difficulty"),
            r.get("verdict"),
            r.get("gain"),
            r.get("how"),
            r.get("reason"),
            r.get("reply"),
        ]
        for i, r in enumerate(record.get("rounds") or [], 1)
    ]
    judged += [
        [
            "validation",
            text.get(str(v.get("id")), v.get("id")),
            v.get("difficulty"),
            f"{v.get('verdict1')} -> {v.get('verdict2')}",
            None,
            v.get("how2"),
            v.get("reason2"),
            v.get("reply2"),
        ]
        for v in record.get("validation") or []
    ]
    if judged:
        headers = ["step", "question", "difficulty", "verdict", "gain", "judged by", "judge's reason", "answer"]
        if not any(row[6] for row in judged):  # a run made before the judge gave reasons
            headers.pop(6)
            judged = [row[:6] + row[7:] for row in judged]
        out.append(
            {
                "title": "Verdicts (base questions, extension rounds, validation with suggestions)",
                "headers": headers,
                "rows": judged,
            }
        )
    feedback = record.get("feedback") or {}
    if feedback:
        out.append(
            {
                "title": "The evaluator's feedback (knowledge and capability flaws, suggestions; Table 13)",
                "headers": ["field", "text"],
                "rows": [[k, v] for k, v in feedback.items()],
            }
        )
    return out


def _unit_score(record: dict[str, Any]) -> float | None:
    """The unit's JudgeAgent score on the headline's scale: its sum of gains over its graded answers (the headline
    pools the same over all units, Algorithm 1); None when none is graded. The record's ``score`` is the sum."""
    total, answered = _number(record.get("score")), record.get("answered")
    return total / answered if total is not None and isinstance(answered, int) and answered > 0 else None


def _judgeagent_items(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Base questions, extension-round questions and validation re-answers, each with its verdict."""
    return (
        [{"step": "base", **b} for b in record.get("base") or []]
        + [{"step": "round", **r} for r in record.get("rounds") or []]
        + [{"step": "validation", **v} for v in record.get("validation") or []]
    )


def _judgeagent_tables(m: dict[str, Any]) -> list[Table]:
    """The running score after each round (Algorithm 1) and the validation per difficulty (Algorithm 2)."""
    out = []
    rounds = m.get("dynamic_scores") or {}
    if rounds:
        rows = []
        for key, value in rounds.items():
            den = (m.get("dynamic_denominators") or {}).get(key) or {}
            label = "base questions" if key == "base" else f"round {key.lstrip('@')}"
            rows.append([label, value, den.get("n", ""), den.get("ungraded", "")])
        out.append(Table(["after", "score", "graded", "ungraded"], rows, "Running score per round (Algorithm 1)"))
    validation = {k: v for k, v in (m.get("validation") or {}).items() if k != "overall"}
    if validation:
        rows = [[label, v["n"], *[v.get(k) for k in ("acc1", "acc2", "cr", "cte")]] for label, v in validation.items()]
        out.append(
            Table(["difficulty", "n", "ACC1", "ACC2", "CR", "CtE"], rows, "Validation per difficulty (Algorithm 2)")
        )
    return out


JUDGEAGENT = Adapter(
    tables=_judgeagent_tables,
    metrics=(
        Metric(
            "score",
            "JudgeAgent score",
            "sum of the gains of all graded answers (base questions and extension "
            "rounds) divided by their number (Algorithm 1); 95 % interval: cluster-robust t over batches, batches - 1 "
            "degrees of freedom (a batch's rounds grow from its own questions)",
            "score_denominator",
        ),
        Metric(
            "base_accuracy.value",
            "Base accuracy",
            "share of base questions answered correctly in Benchmark "
            "Grading; 95 % interval: exact binomial at the design effect of the batches (Korn-Graubard)",
            "base_accuracy",
        ),
        Metric(
            "validation.overall.acc1",
            "ACC1",
            "accuracy on the base questions before the suggestions "
            "(Algorithm 2, Table 1); 95 % interval: exact binomial at the design effect of the batches",
            "validation.overall",
        ),
        Metric(
            "validation.overall.acc2",
            "ACC2",
            "accuracy on the same questions answered with the batch's "
            "suggestions (Algorithm 2, Table 1); 95 % interval: exact binomial at the design effect of the batches "
            "(one feedback serves a batch)",
            "validation.overall",
        ),
        Metric(
            "validation.overall.cr",
            "CR",
            "wrong -> right share over all validated base questions "
            "(Algorithm 2); 95 % interval: exact binomial at the design effect of the batches",
            "validation.overall",
        ),
        Metric(
            "validation.overall.cte",
            "CtE",
            "right -> wrong share over all validated base questions "
            "(Algorithm 2); 95 % interval: exact binomial at the design effect of the batches",
            "validation.overall",
            better="lower",
        ),
    ),
    outcomes={"JudgeAgent score": _unit_score, "base accuracy": lambda r: _share(r.get("base"))},
    columns={
        "JudgeAgent score": _unit_score,
        "sum of gains": lambda r: _number(r.get("score")),
        "base accuracy": lambda r: _share(r.get("base")),
        "last difficulty": lambda r: (r.get("trajectory") or [{}])[-1].get("next"),
    },
    replaces=("score",),
    sections=_judgeagent_sections,
    items=_judgeagent_items,
)


# -- ATAD (seed 003) ----------------------------------------------------------------------------------------


def _rejected(item: dict[str, Any]) -> list[list[Any]]:
    """Each candidate the code checks or the orchestrator turned down, with why (from the item's history)."""
    rows, problem = [], None
    for h in item.get("history") or []:
        if h.get("step") == "generate":
            problem = h.get("problem")
            if h.get("structure_errors"):
                rows.append(
                    [
                        h.get("phase"),
                        h.get("level"),
                        h.get("attempt"),
                        "code checks",
                        "; ".join(map(str, h["structure_errors"])),
                        problem,
                    ]
                )
        elif h.get("step") == "validate" and h.get("approved") is False:
            rows.append([h.get("phase"), h.get("level"), h.get("attempt"), "orchestrator", h.get("feedback"), problem])
        elif h.get("step") == "validate" and h.get("approved") is None:  # ungraded: resume validates it again
            rows.append(
                [h.get("phase"), h.get("level"), h.get("attempt"), "not judged (ungraded)", h.get("error"), problem]
            )
    return rows


def _answer_key(unit_input: dict[str, Any]) -> Any:
    """The benchmark item's answer the examinee is scored against (``--evaluate``): the option number of T1 and
    T3-T7, whether the order is coherent for T2 (``state.atad``'s problem fields)."""
    problem = unit_input.get("problem") or {}
    return problem.get("answer", problem.get("coherent"))


def _atad_sections(record: dict[str, Any], unit_input: dict[str, Any]) -> list[Section]:
    item = record.get("item") or {}
    out: list[Section] = []
    rejected = _rejected(item)
    if rejected:
        out.append(
            {
                "title": "Rejected candidates, with why (Appendix D.2)",
                "headers": ["phase", "level", "attempt", "rejected by", "why", "candidate"],
                "rows": rejected,
            }
        )
    if item.get("history"):
        out.append(
            {
                "title": "Generation history (teacher, orchestrator, student, escalation)",
                "headers": ["step", "phase / level", "attempt", "outcome"],
                "rows": [
                    [
                        h.get("step"),
                        h.get("phase") or h.get("level"),
                        h.get("attempt"),
                        {k: v for k, v in h.items() if k not in ("step", "phase", "attempt")},
                    ]
                    for h in item["history"]
                ],
            }
        )
    if "correct" in record:
        out.append(
            {
                "title": "Evaluated answer, beside the benchmark's answer key",
                "headers": ["predicted", "answer key", "correct", "explanation", "parse error"],
                "rows": [
                    [
                        record.get("predicted"),
                        _answer_key(unit_input),
                        record.get("correct"),
                        record.get("explanation"),
                        record.get("parse_error"),
                    ]
                ],
            }
        )
    return out


def _atad_tables(m: dict[str, Any]) -> list[Table]:
    """``--evaluate``: the accuracy of each evaluated model (Table 1); a generation: the problems per task."""
    if "table1" in m:
        rows = [
            [
                model,
                f"{cell(t.get('avg'))} {interval_text(interval_of(m, f'table1.{model}.avg'))}",
                t.get("n", 0),
            ]
            for model, t in m["table1"].items()
        ]
        return [
            Table(["model", "accuracy [95 % interval]", "answers"], rows, "Accuracy per evaluated model (Table 1, %)")
        ]
    rows = [
        [task, TASKS[task].name if task in TASKS else task, v["finalized"], v["discarded"]]
        for task, v in (m.get("per_task") or {}).items()
    ]
    return [Table(["task", "name", "finalized", "discarded"], rows, "Problems per task")]


ATAD = Adapter(
    tables=_atad_tables,
    metrics=(
        Metric(
            "finalized",
            "Finalized problems",
            "problems kept in the benchmark: approved by the orchestrator, "
            "then failed by the student or not escalated further (section 3); 95 % interval: exact binomial "
            "(Clopper-Pearson) of the finalized share, times the problems",
            "items",
        ),
        Metric(
            "discarded",
            "Discarded problems",
            "problems that ended without a finalized version; 95 % "
            "interval: exact binomial of the discarded share, times the problems",
            "items",
            better="lower",
        ),
        Metric(
            "mean_level",
            "Mean difficulty level",
            "mean escalation level of the finalized problems; 95 % interval: Student's t over the finalized problems",
            "finalized",
        ),
        Metric(
            "table1.*.avg",
            "Accuracy (%) of {key}",
            "share of benchmark items the model answered correctly, "
            "mean over task types (Table 1); 95 % interval: exact binomial at the effective number of distinct "
            "problems (Table 1's weights; copies of a problem count once)",
            "table1.*.n",
            column="Accuracy (%)",
        ),
    ),
    outcomes={
        "correct": lambda r: _number(r.get("correct")),
        "finalized": lambda r: None if "item" not in r else float((r.get("item") or {}).get("status") == "finalized"),
        "level": lambda r: _number((r.get("item") or {}).get("current_level")),
    },
    columns={
        "correct": lambda r: r.get("correct"),  # --evaluate: the examinee's answer
        "outcome": lambda r: (r.get("item") or {}).get("acceptance") or (r.get("item") or {}).get("status"),
        "level": lambda r: (r.get("item") or {}).get("current_level"),
        "model": lambda r: (r.get("meta") or {}).get("model") if "correct" in r else None,
        "task": lambda r: (r.get("item") or r.get("meta") or {}).get("task"),
        "rejected": lambda r: len(_rejected(r["item"])) if r.get("item") else None,
    },
    sections=_atad_sections,
    subject="student",
    subject_params=("evaluate",),
)


# -- LLM-as-an-Interviewer (seed 004) -----------------------------------------------------------------------


def _interview_answers(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every graded answer of a session: the seed question's attempts, then the follow-ups."""
    return [*(record.get("seed_interactions") or []), *(record.get("followup_results") or [])]


def _interview_sections(record: dict[str, Any]) -> list[Section]:
    out: list[Section] = []
    answers = _interview_answers(record)
    if record.get("single_turn"):
        answers.insert(0, {"kind": "single-turn judge", **record["single_turn"]})
    if answers:
        out.append(
            {
                "title": "Answers and the grader's verdicts and reasons",
                "headers": ["question", "kind", "attempt", "answer", "verdict", "score", "error type", "reason"],
                "rows": [
                    [
                        a.get("q"),
                        a.get("kind") or a.get("type"),
                        a.get("attempt"),
                        a.get("answer"),
                        a.get("verdict"),
                        a.get("score"),
                        a.get("error_type"),
                        a.get("reason"),
                    ]
                    for a in answers
                ],
            }
        )
    if record.get("feedbacks"):
        out.append(
            {
                "title": "Interviewer feedback",
                "headers": ["question", "attempt", "level", "text"],
                "rows": [[f.get("q"), f.get("attempt"), f.get("level"), f.get("text")] for f in record["feedbacks"]],
            }
        )
    if record.get("transcript"):
        out.append(
            {
                "title": "Interview transcript",
                "headers": ["speaker", "kind", "question", "attempt", "text"],
                "rows": [
                    [t.get("speaker"), t.get("kind"), t.get("q"), t.get("attempt"), t.get("text")]
                    for t in record["transcript"]
                ],
            }
        )
    return out


def _final_seed_score(record: dict[str, Any]) -> float | None:
    scores = record.get("seed_scores") or []
    return _number(scores[-1]) if scores else None


def _interview_tables(m: dict[str, Any]) -> list[Table]:
    """Sessions, judge score and Score@n per task."""
    n_max = int(m.get("n_max") or 0)
    by_task = m.get("by_task") or {}
    if not by_task:
        return []
    rows = [[task, t["sessions"], t.get("judge"), *t["score_at_n"]] for task, t in by_task.items()]
    return [Table(["task", "sessions", "judge", *[f"Score@{n}" for n in range(1, n_max + 1)]], rows, "Per task")]


INTERVIEW = Adapter(
    tables=_interview_tables,
    metrics=tuple(
        Metric(
            f"score@{n}",
            f"Score@{n}",
            f"mean over sessions of the score of the seed answer given at interaction "
            f"{n} (section 3.2). It is that answer's score, not the best so far, so it can fall when a retry "
            "after feedback scores lower; a session solved earlier keeps its solved score. Every Score@n is over "
            "the same sessions: one with an ungraded seed answer leaves them all (counted as ungraded). "
            "95 % interval: cluster-robust t over seed questions (their repeats one cluster); exact binomial "
            "when each seed question has one 0/1 score, else bootstrap over sessions",
            f"denominators.score@{n}",
        )
        for n in (1, 2, 3)
    )
    + (
        Metric(
            "judge",
            "Judge",
            "single-turn LLM-as-a-judge score on the unmodified question (Table 2); 95 % interval as Score@n",
            "denominators.judge",
        ),
        Metric(
            "followup_accuracy.overall",
            "Follow-up accuracy",
            "share of follow-up questions answered "
            "correctly (section 3.2); 95 % interval: cluster-robust t over seed questions (a session's "
            "follow-ups one cluster)",
            "followup_accuracy",
        ),
    ),
    outcomes={
        "score@1": lambda r: _number((r.get("seed_scores") or [None])[0]),
        "final seed score": _final_seed_score,
        "judge": lambda r: _number((r.get("single_turn") or {}).get("score")),
        "follow-up accuracy": lambda r: _share(r.get("followup_results")),
    },
    columns={
        "Score@1": lambda r: _number((r.get("seed_scores") or [None])[0]),
        "final seed score": _final_seed_score,
        "solved": lambda r: r.get("seed_solved"),
        "judge": lambda r: _number((r.get("single_turn") or {}).get("score")),
        "follow-up accuracy": lambda r: _share(r.get("followup_results")),
    },
    replaces=("seed_solved",),
    sections=lambda record, unit_input: _interview_sections(record),
    items=lambda record: [{"step": a.get("kind") or "seed", **a} for a in _interview_answers(record)],
)


# -- LLMEval-3 (seed 002) -----------------------------------------------------------------------------------


def _bank_question(bank: QuestionBank, item: dict[str, Any]) -> str:
    """A session's question as the examinee read it: its text, then its lettered options for multiple choice
    (``stores.bank_sessions.question_text``, what the exam server delivers)."""
    from dyneval.stores.bank_sessions import question_text

    question = bank.get(item["question_uuid"])
    return question_text(str(item.get("question") or ""), question.options if question else None)


def bank_location(run_dir: Path, config: ConfigFile) -> str | None:
    """Where an LLMEval-3 run's question bank is, as the protocol opens it (``nodes.llmeval.common.bank_location``):
    its ``bank_db``, else the PostgreSQL DSN, else ``_cache/llmeval_bank.sqlite`` beside the run directory; None
    when that is a file no longer there."""
    location = str(
        config.params.get("bank_db")
        or config.stores.postgres_dsn
        or str(run_dir.parent / "_cache" / "llmeval_bank.sqlite")
    )
    return None if "://" not in location and not Path(location).exists() else location


def _llmeval_answers(run_dir: Path, config: ConfigFile, records: list[dict[str, Any]]) -> dict[str, list[Section]]:
    """Per session: every question with the answer, stars and the judge's reason, from the question bank.

    The bank (not the graph state) holds a session's answers (seed 002, section 3), at :func:`bank_location`.
    """
    from dyneval.stores.question_bank import QuestionBank

    location = bank_location(run_dir, config)
    if location is None:
        return {}
    bank = QuestionBank(location)
    try:
        out: dict[str, list[Section]] = {}
        for r in records:
            sections = []
            for label, session in (("", r.get("session_id")), ("reference model: ", r.get("reference_session_id"))):
                rows = [
                    [
                        i.get("position"),
                        i.get("discipline"),
                        _bank_question(bank, i),
                        i.get("answer"),
                        i.get("response"),
                        i.get("stars"),
                        i.get("judge_status"),
                        i.get("reason"),
                    ]
                    for i in (bank.judged_items(session) if session else [])
                ]
                if rows:
                    sections.append(
                        {
                            "title": f"{label}questions, answers and stars (0-3, the judge's reason)",
                            "headers": [
                                "#",
                                "discipline",
                                "question",
                                "reference",
                                "answer",
                                "stars",
                                "judge status",
                                "reason",
                            ],
                            "rows": rows,
                        }
                    )
            out[r["unit_id"]] = sections
        return out
    finally:
        bank.close()


def _llmeval_tables(m: dict[str, Any]) -> list[Table]:
    """Every model the bank has judged, and the scores per discipline."""
    out = []
    if m.get("leaderboard"):
        rows = [[str(r["model"]), r.get("S"), r.get("R"), r.get("sessions")] for r in m["leaderboard"]]
        out.append(
            Table(["model", "S (0-100)", "R (%)", "sessions"], rows, "Per model (every model the bank has judged)")
        )
    if m.get("disciplines"):
        rows = [[d, v] for d, v in m["disciplines"].items()]
        out.append(Table(["discipline", "score out of 10"], rows, "Per discipline (mean stars / 3 x 10)"))
    return out


LLMEVAL = Adapter(
    tables=_llmeval_tables,
    metrics=(
        Metric(
            "S",
            "Absolute score S",
            "mean over scored sessions of S = sum of stars / (N answers x 3) x 100 "
            "(equation 1), 0-100; 95 % interval: t over the answers, variance pooled within sessions (exact "
            "binomial when every rating is 0 or 3 stars)",
            "sessions_scored",
        ),
        Metric(
            "R",
            "Relative score R",
            "mean over sessions of R = S_model / S_reference x 100 on the same "
            "questions (equation 2); 95 % interval: t over the answers both models were scored on, variance "
            "pooled within sessions",
            "sessions_scored",
        ),
    ),
    outcomes={"S": lambda r: _number(r.get("S")), "R": lambda r: _number(r.get("R"))},
    columns={
        "S": lambda r: _number(r.get("S")),
        "R": lambda r: _number(r.get("R")),
        "stars 0/1/2/3": lambda r: (
            "/".join(str((r.get("stars") or {}).get(k, 0)) for k in "0123") if r.get("stars") else None
        ),
    },
    run_sections=_llmeval_answers,
)


# -- judge check (agreement with human labels) --------------------------------------------------------------


def _first_verdict_agrees(record: dict[str, Any]) -> float | None:
    """1 when the first judge's first verdict equals the human label, 0 when it differs, None when ungraded."""
    verdicts = [v for v in record.get("verdicts") or [] if v.get("member") == 0]
    if not verdicts or verdicts[0].get("value") is None or verdicts[0].get("how") in ("ungraded", "split"):
        return None
    return float(str(verdicts[0]["value"]) == str(record.get("label")))


def _decisive(record: dict[str, Any], order: str) -> dict[str, Any] | None:
    """The verdict the unit table shows: the jury's when there is one, else the first judge's; first repeat."""
    if record.get("jury"):
        found = [j for j in record["jury"] if j.get("order") == order]
    else:
        found = [v for v in record.get("verdicts") or [] if v.get("member") == 0 and v.get("order") == order]
    return min(found, key=lambda v: v.get("repeat") or 0) if found else None


def _shown_verdict(record: dict[str, Any], order: str) -> Any:
    verdict = _decisive(record, order)
    if verdict is None:
        return None
    return "ungraded" if verdict.get("value") is None else verdict["value"]


def _agreement(value: Any, label: Any) -> str:
    """``agree`` / ``disagree`` of a verdict's value with the human label; ``ungraded`` (no value) and a jury's
    ``split`` say so."""
    if value is None or value == "split":
        return "ungraded" if value is None else "split"
    return "agree" if str(value) == str(label) else "disagree"


def _agree(record: dict[str, Any]) -> str | None:
    """The agreement of the verdict the unit table shows (original order)."""
    verdict = _decisive(record, "original")
    return None if verdict is None or "label" not in record else _agreement(verdict.get("value"), record["label"])


def _judgecheck_sections(record: dict[str, Any]) -> list[Section]:
    """Every verdict (each judge, repeat and order) with the judge's reason, then the jury's."""
    label = record.get("label")
    rows = [
        [
            v.get("model") or f"m{v.get('member')}",
            v.get("repeat"),
            v.get("order"),
            v.get("value"),
            _agreement(v.get("value"), label),
            v.get("how"),
            v.get("reason"),
        ]
        for v in record.get("verdicts") or []
    ]
    rows += [
        [
            "jury",
            j.get("repeat"),
            j.get("order"),
            j.get("value"),
            _agreement(j.get("value"), label),
            j.get("how"),
            j.get("reason"),
        ]
        for j in record.get("jury") or []
    ]
    if not rows:
        return []
    return [
        {
            "title": f"Verdicts and the judges' reasons (human label: {record.get('label')})",
            "headers": ["judge", "repeat", "order", "verdict", "agree", "how", "reason"],
            "rows": rows,
        }
    ]


#: judgecheck measures shown per judge, first found: the pairwise mode's names, then the label modes'.
_ACCURACY = (
    ("accuracy_mean", "accuracy (mean of both orders)"),
    ("accuracy_original", "accuracy"),
    ("accuracy", "accuracy"),
)
_KAPPA = (("kappa_original", "kappa"), ("kappa", "kappa"))


def _measure(measures: dict[str, Any], names: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The first of ``names`` the judge has: its label and ``value [low, high] (n=..., ungraded)``."""
    for key, label in names:
        if key in measures:
            v = measures[key]
            low, high = v.get("low"), v.get("high")
            span = f" [{number(low)}, {number(high)}]" if low is not None and high is not None else ""
            return label, f"{cell(v.get('value'))}{span} (n={v.get('n')}, {v.get('ungraded', 0)} ungraded)"
    return names[-1][1], "-"


def _judgecheck_tables(m: dict[str, Any]) -> list[Table]:
    """Each judge's accuracy and kappa against the human labels."""
    raters = m.get("raters") or {}
    if not raters:
        return []
    first = next(iter(raters.values())).get("measures") or {}
    acc_label, kappa_label = _measure(first, _ACCURACY)[0], _measure(first, _KAPPA)[0]
    rows = [
        [
            str(r.get("model") or name),
            r.get("items"),
            _measure(r.get("measures") or {}, _ACCURACY)[1],
            _measure(r.get("measures") or {}, _KAPPA)[1],
        ]
        for name, r in raters.items()
    ]
    title = f"Per judge ({m.get('judge')} verdicts against the human labels; 95 % bootstrap intervals)"
    return [Table(["judge", "items", f"{acc_label} [95 %]", f"{kappa_label} [95 %]"], rows, title)]


JUDGECHECK = Adapter(
    tables=_judgecheck_tables,
    metrics=(  # {name}: the judge's model (its key m0, m1, ... names the path)
        Metric(
            "raters.*.measures.accuracy.value",
            "Accuracy of judge {name}",
            "share of judged items whose verdict equals the human label",
            "raters.*.measures.accuracy",
            column="Accuracy",
        ),
        Metric(
            "raters.*.measures.kappa.value",
            "Cohen's kappa of judge {name}",
            "chance-corrected agreement with the human labels",
            "raters.*.measures.kappa",
            column="Cohen's kappa",
        ),
        Metric(
            "raters.*.measures.accuracy_mean.value",
            "Accuracy of judge {name} (mean of both orders)",
            "pairwise: share of verdicts equal to the human label, averaged over the two presentation orders (LLMBar)",
            "raters.*.measures.accuracy_mean",
            column="Accuracy (mean of both orders)",
        ),
        Metric(
            "raters.*.measures.accuracy_original.value",
            "Accuracy of judge {name} (original order)",
            "pairwise: share of verdicts equal to the human label with output_1 shown first",
            "raters.*.measures.accuracy_original",
            column="Accuracy (original order)",
        ),
        Metric(
            "raters.*.measures.kappa_original.value",
            "Cohen's kappa of judge {name} (original order)",
            "pairwise: chance-corrected agreement with the human labels (1, 2, tie)",
            "raters.*.measures.kappa_original",
            column="Cohen's kappa (original order)",
        ),
        Metric(
            "raters.*.measures.swap_consistency.value",
            "Swap consistency of judge {name}",
            "pairwise: share of pairs given the same winner in both orders",
            "raters.*.measures.swap_consistency",
            column="Swap consistency",
        ),
        Metric(
            "raters.*.per_class.original.macro.f1.value",
            "Macro F1 of judge {name}",
            "mean over the labels of the per-label F1 (as PandaLM reports); a label never chosen counts 0; no "
            "interval while a label has fewer than 3 items",
            "raters.*.per_class.original.macro.f1",
            column="Macro F1",
        ),
    ),
    outcomes={"agreement (first judge)": _first_verdict_agrees},
    columns={
        "verdict": lambda r: _shown_verdict(r, "original"),
        "verdict (swapped)": lambda r: _shown_verdict(r, "swapped"),
        "label": lambda r: r.get("label"),
        "agree": _agree,
    },
    sections=lambda record, unit_input: _judgecheck_sections(record),
    replaces=("verdicts",),
    subject="evaluator",
)


def adapter(protocol: str) -> Adapter:
    """The declaration of a registered protocol (its class's ``viewer``: the built-ins' above, a user's own from
    ``DYNEVAL_PROTOCOLS``); a run of a protocol that is not registered here gets the generic page."""
    from dyneval.runtime.protocol import protocol_class

    try:
        return protocol_class(protocol).viewer
    except InputError:
        return Adapter()
