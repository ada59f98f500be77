"""Judge check: state, schemas and context of measuring a judging step against human labels.

One graph thread = one human-labelled item, judged by the chosen judging step (:data:`JUDGES`) of each
judge model (the evaluator role's model, or every ``jury`` member), ``repeats`` times, and for a pairwise
judge in both presentation orders (position swap). A verdict is a value on the judge's own scale
(:data:`SCALES`) or ``None`` when the judge gave no usable verdict (ungraded). A jury's verdict per
(repeat, order) is the majority of its graded members, or ``split`` when no value has the most votes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic, and so Studio's forms, read it on Python < 3.12

from dyneval.state.config import ModelSpec, parse_model_ref
from dyneval.state.context import BaseContext, described
from dyneval.state.errors import InputError
from dyneval.state.graph_io import GraphInput

#: The judging steps that can be checked, by name: ``protocol.step``, plus the pairwise preference judge.
Judge = Literal[
    "llmeval.judge", "interview.grader", "judgeagent.judge", "atad.orchestrator", "atad.reviewer", "pairwise"
]
JUDGES: tuple[str, ...] = get_args(Judge)
#: Each judge's verdict scale, as label strings: 0-3 stars (LLMEval-3 Figure 11), correct/wrong, or the
#: approved/rejected (ATAD's orchestrator, Appendix D.2), 1-5 (one of ATAD's reviewer scores, Table 3), or the
#: better output of a pair in the original order (``1``, ``2``) or ``tie``.
SCALES: dict[str, tuple[str, ...]] = {
    "llmeval.judge": ("0", "1", "2", "3"),
    "interview.grader": ("correct", "wrong"),
    "judgeagent.judge": ("correct", "wrong"),
    "atad.orchestrator": ("approved", "rejected"),
    "atad.reviewer": ("1", "2", "3", "4", "5"),
    "pairwise": ("1", "2", "tie"),
}
#: Judges whose scale is ordinal (quadratic-weighted kappa and Spearman apply).
ORDINAL = frozenset({"llmeval.judge", "atad.reviewer"})
#: Judges of generated problems (ATAD), not of answers: an item is a problem of a task type.
PROBLEM_JUDGES = frozenset({"atad.orchestrator", "atad.reviewer"})
#: The reviewer's scores (Table 3); ``aspect`` picks the one compared with the labels.
Aspect = Literal["validity", "coherence", "fairness"]
ASPECTS: tuple[str, ...] = get_args(Aspect)
#: A jury without a majority (no value has the most votes): counted, never turned into a win.
SPLIT = "split"
ORDERS = ("original", "swapped")

_ALIASES = {
    "pairwise": {
        "1": "1",
        "2": "2",
        "a": "1",
        "b": "2",
        "output_1": "1",
        "output_2": "2",
        "model_a": "1",
        "model_b": "2",
        "tie": "tie",
    },
    "correct": {
        "correct": "correct",
        "true": "correct",
        "yes": "correct",
        "1": "correct",
        "right": "correct",
        "wrong": "wrong",
        "incorrect": "wrong",
        "false": "wrong",
        "no": "wrong",
        "0": "wrong",
    },
    "approved": {
        "approved": "approved",
        "approve": "approved",
        "accept": "approved",
        "accepted": "approved",
        "valid": "approved",
        "true": "approved",
        "yes": "approved",
        "1": "approved",
        "rejected": "rejected",
        "reject": "rejected",
        "invalid": "rejected",
        "false": "rejected",
        "no": "rejected",
        "0": "rejected",
    },
}


def _spelling(value: Any) -> str:
    """A label value as compared: stripped, lower case (a boolean as ``true``/``false``)."""
    return str(value).lower() if isinstance(value, bool) else str(value).strip().lower()


def normalize_label(judge: str, value: Any, label_map: dict[str, str] | None = None) -> str:
    """A human label on ``judge``'s scale (see :data:`SCALES`); ``ValueError`` naming the accepted values.

    With ``label_map`` (:func:`parse_label_map`) only its values are accepted, mapped as the user said: a value
    such as PandaLM's tie ``0`` means nothing on its own, so no alias guesses it."""
    if label_map is not None:
        if _spelling(value) in label_map:
            return label_map[_spelling(value)]
        raise ValueError(f"{value!r} is not a value of --label-map (it maps {', '.join(label_map)})")
    try:
        return _on_scale(judge, value)
    except ValueError as exc:
        raise ValueError(f"{exc}; map other values with --label-map VALUE=LABEL,...") from None


def _on_scale(judge: str, value: Any) -> str:
    """``value`` as a label of ``judge``'s scale, by its accepted spellings (``A`` = ``1``, ``yes`` = ``correct``)."""
    text = _spelling(value)
    if judge in ORDINAL:
        if text in SCALES[judge]:
            return text
        raise ValueError(f"needs one of {', '.join(SCALES[judge])}, got {value!r}")
    aliases = _ALIASES[{"pairwise": "pairwise", "atad.orchestrator": "approved"}.get(judge, "correct")]
    if text in aliases:
        return aliases[text]
    raise ValueError(f"needs one of {', '.join(sorted(aliases))}, got {value!r}")


def split_label_map(spec: str) -> dict[str, str]:
    """``"0=tie,1=1,2=2"`` -> ``{"0": "tie", "1": "1", "2": "2"}`` (file value -> label, compared as
    :func:`normalize_label` compares); ``ValueError`` on a part without ``=``, an empty side or a value given twice."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        value, sep, label = (s.strip() for s in part.partition("="))
        if not sep or not value or not label:
            raise ValueError(f"bad entry {part!r}; use VALUE=LABEL,... e.g. 0=tie,1=1,2=2")
        if _spelling(value) in out:
            raise ValueError(f"value {value!r} is mapped twice")
        out[_spelling(value)] = label
    return out


def parse_label_map(spec: str | None, judge: str) -> dict[str, str] | None:
    """``--label-map`` for ``judge``: each target must be a label of the judge's scale (or one of its spellings,
    e.g. ``A`` for ``1``); InputError naming the flag, before anything is created or spent."""
    if spec is None:
        return None
    try:
        return {value: _on_scale(judge, label) for value, label in split_label_map(spec).items()}
    except ValueError as exc:
        raise InputError(
            f"{spec!r}: {exc} (the {judge} judge's labels: {', '.join(SCALES[judge])})", field="--label-map"
        ) from None


def majority(values: list[str | None]) -> str | None:
    """Majority vote (the jury papers' max voting): the value most graded votes share; :data:`SPLIT` when
    several share the most, so a tie in the vote is never turned into a win; ``None`` when none is graded."""
    counts = Counter(v for v in values if v is not None).most_common()
    if not counts:
        return None
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return SPLIT
    return counts[0][0]


def check_jury(refs: list[str] | None, models: dict[str, ModelSpec], flag: str) -> None:
    """Every jury member is a model reference (``local``, a config name, ``MODEL@BASE_URL``); else InputError
    naming ``flag``, before anything is created or spent."""
    for ref in refs or []:
        try:
            parse_model_ref(ref, models)
        except ValueError as exc:
            raise InputError(str(exc), field=flag) from None


def jury_vote(results: list[dict[str, Any]]) -> tuple[str | None, dict[str, Any], str]:
    """A jury inside a protocol (``--judge-jury``): the majority (:func:`majority`) of pointwise results, each
    with a ``verdict`` correct / wrong / ungraded; an ungraded member does not vote. Returns the vote (a verdict,
    :data:`SPLIT`, or None when no member graded), the result to keep (the first member's that gave the vote,
    else the first member's) and the tally (``correct, wrong, ungraded``, in member order)."""
    votes = [None if r.get("verdict") == "ungraded" else r.get("verdict") for r in results]
    vote = majority(votes)
    keep = next((r for r, v in zip(results, votes) if v is not None and v == vote), results[0])
    return vote, keep, ", ".join(v or "ungraded" for v in votes)


class Turn(BaseModel):
    """One turn of a multi-turn pair's conversation (MT-Bench's ``conversation_a`` / ``conversation_b``)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"] = Field(description="who speaks: user or assistant")
    content: str = Field(description="what is said (an assistant's may be empty: an empty answer)")


class LabelledItem(BaseModel):
    """One human-labelled item: what the judge sees and the human label (on the judge's scale)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="the item's id")
    category: str = Field("", description="category the measures are broken down by")
    question: str = Field("", description="the question or instruction (a pair's input)")
    response: str = Field("", description="pointwise: the answer to judge")
    output_1: str = Field("", description="pairwise: the first output")
    output_2: str = Field("", description="pairwise: the second output")
    conversation_1: list[Turn] = Field(
        default_factory=list,
        description="multi-turn pairwise: the first side's conversation (user and assistant turns)",
    )
    conversation_2: list[Turn] = Field(
        default_factory=list, description="multi-turn pairwise: the second side's conversation (the same user turns)"
    )
    reference: str = Field("", description="reference answer (an option letter for multiple choice)")
    solution: str = Field("", description="interview: reference solution (worked steps)")
    explanation: str = Field("", description="llmeval: explanation of the reference answer")
    options: list[str] = Field(default_factory=list, description="multiple-choice options")
    qtype: str = Field("", description="llmeval question type (inferred when empty)")
    task: str = Field(
        "generic", description="interview task type (math, factual, instruction, generic) or ATAD task type (T1-T7)"
    )
    problem: dict[str, Any] = Field(default_factory=dict, description="ATAD: the problem (Table 6 fields)")
    level: str = Field("", description="ATAD: the difficulty tier of a scaled problem; empty = a base problem")
    label: str = Field(
        description="the human label, on the checked judge's scale (0-3 stars, correct / wrong, "
        "approved / rejected, 1-5, or 1 / 2 / tie)"
    )


class PairwiseVerdict(BaseModel):
    """The pairwise judge's choice between the two outputs as shown (A first, B second)."""

    winner: Literal["A", "B", "tie"] = Field(description="A, B, or tie when neither is better")
    reason: str = Field(description="one or two sentences explaining the choice")


class JudgeCheckState(TypedDict, total=False):
    """One labelled item and every verdict on it.

    ``verdicts``: one per (member, repeat, order) with ``value`` (None = ungraded), ``reason``, ``how`` and the
    call ``cost`` (calls, tokens, seconds, from the event log); ``jury``: one per (repeat, order) with the
    members' ``votes``, the majority ``value`` (``split`` without one) and, on an ordinal scale, the mean
    ``score``.
    """

    item: dict[str, Any]
    verdicts: list[dict[str, Any]]
    jury: list[dict[str, Any]]


class JudgeCheckInput(GraphInput):
    """What one judge-check thread is given: one human-labelled item."""

    item: LabelledItem = Field(description="The item the judges decide on, with its human label.")


class JudgeCheckOutput(TypedDict, total=False):
    """What a judged item gives: every verdict on it and, with a jury, the majority per repeat and order."""

    item: Annotated[dict[str, Any], Field(description="The labelled item, as given.")]
    verdicts: Annotated[
        list[dict[str, Any]],
        Field(
            description="One per judge model, repeat and order: the value "
            "on the judge's scale (none = ungraded), reason, "
            "cost."
        ),
    ]
    jury: Annotated[
        list[dict[str, Any]],
        Field(
            description="With a jury: per repeat and order the members' votes "
            "and the majority value (split without one)."
        ),
    ]


@dataclass(kw_only=True)
class JudgeCheckContext(BaseContext):
    """Which judging step to check, with which judges, how often and in which orders."""

    judge: Judge = described(
        "pairwise",
        "Judging step to check: llmeval.judge (0-3 stars), interview.grader and "
        "judgeagent.judge (correct/wrong), pairwise (1, 2 or tie).",
    )
    jury: list[str] | None = described(
        None,
        "Judge models combined by majority vote (local, a config name or "
        "MODEL@BASE_URL each); default: the evaluator role's model alone.",
        metavar="MODEL",
    )
    repeats: int = described(
        1,
        "Judge every item K times per judge and order (repeat consistency; needs a temperature above 0 to differ).",
        minimum=1,
        maximum=20,
    )
    swap: bool = described(True, "Pairwise: judge each pair in both orders (position-swap consistency).")
    aspect: Aspect = described(
        "validity",
        "atad.reviewer: the Table 3 score compared with the labels (read from the "
        "column of that name unless --fields maps label).",
    )
    lenient_escalation: bool = described(
        True,
        "atad.orchestrator: judge problems with a level with the lenient "
        "prompt of Appendix D.2.3, as ATAD does by default.",
    )
