"""LLMEval-3 (seed 002) state, structured-output schemas and run context.

One graph thread = one exam session of one model (section 2.2): sample the
questions, deliver them in the fixed order to the target, optionally replay the
same questions to a reference model (equation 2), judge every answer 0-3
(Figure 11) and score (equation 1).

The questions, the reference answers and the examinee's answers live in the
question bank (:mod:`stores.question_bank`), not in the graph state: the state
only carries ids and counts, so nothing the target could read holds an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic, and so Studio's forms, read it on Python < 3.12

from dyneval.state.config import MAX_CONCURRENCY
from dyneval.state.context import BaseContext, described
from dyneval.state.graph_io import GraphInput

Paradigm = Literal["zero-shot", "few-shot", "cot"]
PARADIGMS: tuple[str, ...] = get_args(Paradigm)
#: --paradigm: one paradigm, or all = a session of each.
ParadigmChoice = Literal["zero-shot", "few-shot", "cot", "all"]
IrtModel = Literal["1pl", "2pl"]
#: Question types of the bank (section 2.1).
QTYPES = ("mcq", "true_false", "fill_blank", "short_answer", "term", "material", "open")
#: Maximum stars of the Figure 11 rubric (s_max of equation 1).
S_MAX = 3


class LLMEvalState(TypedDict, total=False):
    """State of one exam session (ids and counts only; questions and answers stay in the bank)."""

    session_id: str
    model: str
    paradigm: str
    reference_session_id: str
    allocated: int
    answered: int
    reference_answered: int
    judged: int
    ungraded: int  # answers the judge could not rate (no stars; resume re-judges them)
    reference_ungraded: int  # the same for the reference model's replay
    scores: dict[str, Any]
    reference_scores: dict[str, Any]
    relative: float | None
    adaptive: bool  # an adaptive (IRT) session: one question chosen at a time
    stopped: str  # why an adaptive session ended: target_se / max_items / bank
    theta: float  # its running ability estimate (EAP) and standard error
    se: float


class LLMEvalInput(GraphInput):
    """What one exam session is given; everything is optional (the questions are sampled from the bank)."""

    session_id: str = Field(
        "",
        description="The session's id in the question bank: an existing id reopens its "
        "session where it stopped; empty = the thread's unit id.",
    )
    paradigm: Paradigm | None = Field(
        None, description="zero-shot, few-shot (Figure 9) or cot (Figure 10); empty = the context's paradigm."
    )
    model: str = Field(
        "",
        description="Name the examinee is filed under in the bank (its leaderboard row; a "
        "model never meets a question twice until the bank is exhausted); empty = "
        "the target role's model.",
    )


class LLMEvalOutput(TypedDict, total=False):
    """What a finished session gives (the fields its unit record is made of); answers stay in the bank."""

    session_id: Annotated[str, Field(description="The session's id in the question bank.")]
    model: Annotated[str, Field(description="The examinee the session is filed under.")]
    paradigm: Annotated[str, Field(description="Prompting paradigm of the session.")]
    reference_session_id: Annotated[str, Field(description="The reference model's replay of the same questions.")]
    allocated: Annotated[int, Field(description="Questions allocated to the session.")]
    answered: Annotated[int, Field(description="Questions answered.")]
    reference_answered: Annotated[int, Field(description="Questions the reference model answered.")]
    judged: Annotated[int, Field(description="Answers the judge rated.")]
    ungraded: Annotated[int, Field(description="Answers the judge could not rate (no stars; resume re-judges them).")]
    reference_ungraded: Annotated[int, Field(description="The same for the reference model's replay.")]
    scores: Annotated[
        dict[str, Any],
        Field(description="Absolute score S (equation 1) with its n, star counts and per-discipline scores."),
    ]
    reference_scores: Annotated[
        dict[str, Any], Field(description="The reference model's scores on the same questions.")
    ]
    relative: Annotated[float | None, Field(description="Relative score R = S / S_ref x 100 (equation 2).")]
    adaptive: Annotated[bool, Field(description="Whether the session was adaptive (IRT).")]
    stopped: Annotated[str, Field(description="Why an adaptive session ended: target_se, max_items or bank.")]
    theta: Annotated[float, Field(description="An adaptive session's ability estimate (EAP).")]
    se: Annotated[float, Field(description="Its standard error.")]


class JudgeRating(BaseModel):
    """The judge's verdict on one answer (Figure 11): stars 0-3 and the reason for them."""

    rating: int = Field(ge=0, le=3, description="stars: 0, 1, 2 or 3")
    reason: str = Field(description="why this rating was given, in one or two sentences")


class TFStatements(BaseModel):
    """True/false statements derived from a material-analysis question (appendix A.2 rewrite)."""

    statements: list[str] = Field(description="self-contained statements about the material, 2 to 5")
    truths: list[bool] = Field(description="for each statement in order: is it true?")


@dataclass(kw_only=True)
class LLMEvalContext(BaseContext):
    """Parameters of an LLMEval-3 exam session (section 2.2, 2.3, appendix B)."""

    questions: int = described(
        1000, "Questions per exam session (the paper samples N = 1000).", minimum=1, maximum=100_000, metavar="N"
    )
    paradigm: ParadigmChoice = described(
        "zero-shot",
        "Prompting paradigm: zero-shot, few-shot (Figure 9) or cot (Figure 10); all = a session of each (batch runs).",
    )
    stratified: bool = described(False, "Sample each discipline in proportion to its share of the bank.")
    reference_model: str = described(
        "",
        "Reference (SOTA) model replaying the same questions for the relative "
        "score R = S / S_ref x 100 (equation 2); empty = no relative score.",
        metavar="REF",
    )
    fewshot_k: int = described(
        3, "Worked examples in a few-shot prompt, drawn from outside the session.", minimum=0, maximum=20
    )
    answer_batch: int = described(
        20, "Questions answered per graph step (progress is kept in the bank).", minimum=1, maximum=1000
    )
    judge_concurrency: int = described(
        4, "Answers judged at once (judge calls are independent).", minimum=1, maximum=MAX_CONCURRENCY
    )
    judge_jury: list[str] | None = described(
        None,
        "Judge models rating every answer instead of the evaluator, "
        "combined by majority vote of the stars; no majority leaves the "
        "answer unscored with status split.",
        metavar="MODEL",
    )
    sample_if_empty: bool = described(
        True, "Import the shipped sample bank when the bank is empty (Studio).", cli=False
    )
    adaptive: bool = described(
        False,
        "Adaptive session (IRT): each next question has the most Fisher information "
        "at the current ability among calibrated questions the model has not met "
        "(randomesque exposure control); stops at --target-se or --max-items.",
    )
    irt_model: IrtModel = described("2pl", "IRT model of calibration and adaptive sessions: 1pl (Rasch, a = 1) or 2pl.")
    target_se: float = described(
        0.3, "Adaptive sessions stop once the ability's standard error is at most this.", minimum=0.01, metavar="SE"
    )
    max_items: int = described(
        100, "Adaptive sessions ask at most this many questions.", minimum=1, maximum=100_000, metavar="N"
    )
    exposure_k: int = described(
        5,
        "Randomesque exposure control: the next question is drawn among the K most "
        "informative ones (1 = always the most informative).",
        minimum=1,
        metavar="K",
    )
    min_responses: int = described(
        10,
        "Calibration: a question needs this many judged answers (models) to get IRT "
        "parameters; fewer = uncalibrated, sampled as in normal sessions.",
        minimum=2,
        metavar="N",
    )
    bank_db: str = described(
        "",
        "Question bank: SQLite file or postgresql:// DSN; empty = the configured "
        "PostgreSQL DSN, else <out>/_cache/llmeval_bank.sqlite.",
        metavar="DB",
    )


class SessionResult(TypedDict, total=False):
    session_id: str
    model: str
    paradigm: str
    n: int
    S: float
    disciplines: dict[str, float]
    R: float | None
    S_ref: float | None
