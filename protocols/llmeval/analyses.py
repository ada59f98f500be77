"""Analyses over the question bank's sessions: leaderboard, ranking stability, judge agreement, contamination.

* :func:`leaderboard` - Table 1 / Table 7 (R, S, per discipline) and Table 2 / Table 8
  (per paradigm with mean and population variance) across every model and run in the bank.
* :func:`stability_from_bank` - appendix D.1 / Table 9 / Figure 5 on the questions the models share.
* :func:`kappa_from_labels` - appendix D.2: Cohen's kappa between the judge and human labels.
* :func:`contamination_test` - Finding 6 / Table 4: masked-tail replay, three attempts, recalled at >= 2.
* :func:`irt_ranking` / :func:`paired_comparison` - IRT abilities with 95 % intervals, rank ranges, and the
  difference of two models with its interval (adaptive testing, issue 17).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from dyneval.nodes.irt import expected_score
from dyneval.nodes.llmeval.bankio import dialog_question
from dyneval.nodes.llmeval.calibration import ability_of, expected_scores, latest_responses, load_params
from dyneval.nodes.llmeval.scoring import discipline_scores
from dyneval.prompts import load_prompt
from dyneval.protocols.llmeval.metrics import (
    cohen_kappa,
    mask_tail,
    mean,
    population_variance,
    recalled,
    replay_match,
    stability,
)
from dyneval.runtime.concurrency import parallel_map
from dyneval.runtime.llm import RoleLLM
from dyneval.state.errors import InputError
from dyneval.state.llmeval import PARADIGMS
from dyneval.stores.inputs import read_records
from dyneval.stores.question_bank import QuestionBank


def leaderboard(bank: QuestionBank) -> list[dict[str, Any]]:
    """One row per model over all its scored sessions (runs), best relative score first.

    ``S`` is the mean absolute score of the model's sessions, ``R`` the mean
    relative score of its sessions that had a reference replay, per-discipline
    scores pool every judged answer (10-point scale), and ``paradigms`` gives
    the mean S per paradigm with their mean and population variance (Table 2).
    """
    by_model: dict[str, list[dict[str, Any]]] = {}
    for s in bank.sessions_of():
        if s["scores"] and "S" in s["scores"]:  # adaptive sessions have no S (see irt_ranking)
            by_model.setdefault(s["model"], []).append(s)
    rows: list[dict[str, Any]] = []
    for model, sess in by_model.items():
        pairs = []
        for s in sess:
            pairs += [
                (i["discipline"], i["stars"]) for i in bank.judged_items(s["session_id"]) if i["stars"] is not None
            ]
        rs = [s["scores"]["R"] for s in sess if s["scores"].get("R") is not None]
        para = {
            p: mean([s["scores"]["S"] for s in sess if s["paradigm"] == p])
            for p in PARADIGMS
            if any(s["paradigm"] == p for s in sess)
        }
        rows.append(
            {
                "model": model,
                "sessions": len(sess),
                "runs": len({s["run_id"] for s in sess}),
                "answers": len(pairs),
                "S": mean([s["scores"]["S"] for s in sess]),
                "R": mean(rs) if rs else None,
                "disciplines": discipline_scores(pairs),
                "paradigms": para,
                "paradigm_mean": mean(list(para.values())) if para else None,
                "paradigm_variance": population_variance(list(para.values())) if len(para) > 1 else None,
            }
        )
    rows.sort(key=lambda r: (-(r["R"] if r["R"] is not None else -1), -r["S"], r["model"]))
    return rows


def score_matrix(bank: QuestionBank) -> dict[str, dict[str, float]]:
    """model -> question -> mean stars over the model's judged answers."""
    return {m: {q: mean(v) for q, v in qs.items()} for m, qs in bank.answers_by_model().items()}


def stability_from_bank(
    bank: QuestionBank,
    *,
    sizes: list[int],
    trials: int,
    reference: str | None,
    seed: int = 0,
    models: list[str] | None = None,
) -> dict[str, Any]:
    """Table 9 / Figure 5: every model resampled on the questions it shares with the reference model."""
    matrix = score_matrix(bank)
    if models:
        matrix = {m: v for m, v in matrix.items() if m in models}
    if len(matrix) < 2:
        raise InputError(
            "ranking stability needs judged answers of at least two models (run sessions with "
            "--reference-model, or several targets on the same --out)",
            field="--stability",
        )
    if reference is None:
        reference = max(matrix, key=lambda m: len(matrix[m]))  # the model that replayed the most questions
    if reference not in matrix:
        raise InputError(
            f"reference model {reference!r} has no judged answers; models: {', '.join(matrix)}",
            field="--reference-model",
        )
    try:
        return stability(matrix, reference=reference, sizes=sizes, trials=trials, seed=seed)
    except ValueError as exc:
        raise InputError(str(exc), field="--stability") from None


def _label(value: Any) -> int | None:
    """A 0-3 star label: an integer or its digits (CSV); ``None`` for anything else (2.5, "two", true)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        label = int(value)
        return label if 0 <= label <= 3 else None
    return None


def read_labels(path: Path) -> list[dict[str, Any]]:
    """Human labels: JSONL/JSON/CSV/TSV rows with ``label`` (0-3 stars) and either ``session_id`` +
    ``position`` or ``model`` + ``question_uuid``."""
    rows = []
    for rec in read_records(path, flag="--kappa"):
        label = _label(rec.data.get("label"))
        if label is None:
            raise rec.error(f"needs an integer 0-3, got {rec.data.get('label')!r}", field="label")
        rows.append({**rec.data, "label": label, "_record": rec.n})
    return rows


def kappa_from_labels(bank: QuestionBank, path: Path) -> dict[str, Any]:
    """Agreement of the judge's stars with human labels on the same answers (appendix D.2, Table 10)."""
    labels = read_labels(path)
    judged: dict[tuple[str, str], int] = {}
    by_pos: dict[tuple[str, int], int] = {}
    for s in bank.sessions_of():
        for it in bank.judged_items(s["session_id"]):
            if it["stars"] is not None:
                judged[(s["model"], it["question_uuid"])] = it["stars"]
                by_pos[(s["session_id"], int(it["position"]))] = it["stars"]
    human, machine, missing = [], [], 0
    for rec in labels:
        if rec.get("session_id") not in (None, "") and rec.get("position") not in (None, ""):
            stars = by_pos.get((str(rec["session_id"]), int(rec["position"])))
        else:
            stars = judged.get((str(rec.get("model")), str(rec.get("question_uuid"))))
        if stars is None:
            missing += 1
            continue
        human.append(rec["label"])
        machine.append(stars)
    if not human:
        raise InputError("no label matches a judged answer in the bank", file=str(path))
    return {
        "matched": len(human),
        "unmatched": missing,
        "agreement": sum(a == b for a, b in zip(human, machine)) / len(human),
        "kappa": cohen_kappa(human, machine),
        "kappa_quadratic": cohen_kappa(human, machine, weights="quadratic"),
        "kappa_correct": cohen_kappa([h >= 2 for h in human], [m >= 2 for m in machine]),
    }


def public_questions(path: Path) -> list[str]:
    """Question texts of a public set: JSONL/JSON/CSV with ``question`` (AGIEval/MMLU style) or the LLMEval
    layout (user dialog turn); whitespace runs are collapsed for the replay test."""
    out = []
    for rec in read_records(path, flag="--contamination"):
        text = rec.data.get("question")
        if text is None and "dialog" in rec.data:
            text = dialog_question(rec.data["dialog"])
        if not isinstance(text, str) or not text.strip():
            raise rec.error(f"no question text; this record has: {rec.found()}", field="question")
        out.append(" ".join(text.split()))
    return out


def contamination_test(
    llm: RoleLLM,
    sets: dict[str, list[str]],
    *,
    per_set: int,
    attempts: int = 3,
    needed: int = 2,
    temperature: float = 0.7,
    seed: int = 0,
    concurrency: int = 4,
    threshold: float = 0.8,
) -> dict[str, Any]:
    """Finding 6: for up to ``per_set`` questions of each set, mask the tail and ask for ``attempts``
    continuations (sampled at ``temperature``); a question is recalled when ``needed`` attempts
    reproduce the tail (:func:`replay_match`). Returns recalled counts and rates per set."""
    # a chat model bound to the temperature: RoleLLM only invokes it, as it does a chat model
    sampler = dataclasses.replace(llm, chat=llm.chat.bind(temperature=temperature))  # type: ignore[arg-type]
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for name, texts in sets.items():
        split = [(t, mask_tail(t)) for t in texts]
        usable = [(t, m) for t, m in split if m]
        chosen = rng.sample(usable, min(per_set, len(usable)))

        def one(entry: tuple[str, tuple[str, str]], step: str = f"replay:{name}") -> dict[str, Any]:
            _, (prefix, tail) = entry
            messages = load_prompt("llmeval/examinee_complete").render(prefix=prefix)
            completions = [sampler.text(messages, step=step) for _ in range(attempts)]
            hits = [replay_match(c, tail, threshold) for c in completions]
            return {
                "prefix": prefix[-80:],
                "tail": tail,
                "hits": sum(hits),
                "recalled": recalled(hits, needed),
                "first": completions[0][:120],
            }

        rows = parallel_map(one, chosen, workers=concurrency)
        n_rec = sum(r["recalled"] for r in rows)
        out[name] = {
            "tested": len(rows),
            "skipped_short": len(split) - len(usable),
            "recalled": n_rec,
            "rate": n_rec / len(rows) if rows else 0.0,
            "examples": rows[:5],
        }
    return out


Z95 = 1.959963984540054


def irt_abilities(bank: QuestionBank, irt_model: str) -> dict[str, dict[str, Any]]:
    """model -> EAP theta, SE and expected absolute score (with its 95 % interval) from the model's latest
    judged answer to every calibrated question, fixed and adaptive sessions alike."""
    params = load_params(bank, irt_model)
    if params is None:
        raise InputError(
            f"no calibrated question ({irt_model}); run --calibrate after sessions of several models",
            field="--irt-model",
        )
    by_model: dict[str, list[tuple[str, int]]] = {}
    for (model, uid), stars in latest_responses(bank).items():
        by_model.setdefault(model, []).append((uid, stars))
    out = {}
    for model, judged in by_model.items():
        ability = ability_of(params, judged)
        if ability.n:
            out[model] = {
                "theta": ability.theta,
                "se": ability.se,
                "responses": ability.n,
                "theta_low": ability.theta - Z95 * ability.se,
                "theta_high": ability.theta + Z95 * ability.se,
                **expected_scores(params, ability, Z95),
            }
    return out


def irt_ranking(bank: QuestionBank, irt_model: str) -> list[dict[str, Any]]:
    """Models by theta, each with its 95 % interval and the range of ranks those intervals allow: a model is
    surely ahead of another only when its interval lies wholly above the other's."""
    ab = irt_abilities(bank, irt_model)
    rows = []
    for model, r in ab.items():
        ahead = sum(o["theta_low"] > r["theta_high"] for m, o in ab.items() if m != model)
        not_behind = sum(o["theta_high"] >= r["theta_low"] for m, o in ab.items() if m != model)
        rows.append({"model": model, **r, "rank_best": ahead + 1, "rank_worst": not_behind + 1})
    rows.sort(key=lambda r: (-r["theta"], r["model"]))
    for i, r in enumerate(rows, start=1):
        r["rank"] = i
    return rows


def paired_comparison(bank: QuestionBank, irt_model: str, first: str, second: str) -> dict[str, Any]:
    """theta(first) - theta(second) with its 95 % interval (the two estimates come from separate answers, so
    their variances add) and the same on the expected-score scale (delta method); ``distinguishable`` only when
    the interval excludes 0."""
    ab = irt_abilities(bank, irt_model)
    for name in (first, second):
        if name not in ab:
            raise InputError(
                f"model {name!r} has no judged answer on a calibrated question; models: {', '.join(sorted(ab))}",
                field="--compare",
            )
    params = load_params(bank, irt_model)
    assert params is not None
    a, b = ab[first], ab[second]
    diff, se = a["theta"] - b["theta"], (a["se"] ** 2 + b["se"] ** 2) ** 0.5

    def slope(theta: float) -> float:  # d expected score / d theta
        h = 1e-4
        return (
            expected_score(theta + h, params.a, params.b, params.stars_correct, params.stars_wrong)
            - expected_score(theta - h, params.a, params.b, params.stars_correct, params.stars_wrong)
        ) / (2 * h)

    s_diff = a["expected_S"] - b["expected_S"]
    s_se = ((slope(a["theta"]) * a["se"]) ** 2 + (slope(b["theta"]) * b["se"]) ** 2) ** 0.5
    low, high = diff - Z95 * se, diff + Z95 * se
    distinguishable = low > 0 or high < 0
    verdict = (
        f"{first if diff > 0 else second} is ahead (95 % interval of the difference excludes 0)"
        if distinguishable
        else f"cannot distinguish {first} and {second}: the 95 % interval of the difference contains 0; "
        "more questions (a lower --target-se) are needed to tell them apart"
    )
    return {
        "first": first,
        "second": second,
        "theta_diff": diff,
        "theta_diff_se": se,
        "theta_diff_low": low,
        "theta_diff_high": high,
        "S_diff": s_diff,
        "S_diff_low": s_diff - Z95 * s_se,
        "S_diff_high": s_diff + Z95 * s_se,
        "distinguishable": distinguishable,
        "verdict": verdict,
        "responses": [a["responses"], b["responses"]],
    }
