"""JudgeAgent (seed 000, section 3; appendices B, C, F, G): state, schemas, difficulty control, context.

One graph thread = one batch of base questions (Algorithm 1, lines 7-33):
Benchmark Grading -> ``rounds`` x Interactive Extension (knowledge path over the
context graph, question at the current difficulty, target answer, judgement,
running score, next difficulty) -> Evaluation Feedback (Table 13) -> Validation
(Algorithm 2, Table 14).

Roles: the JudgeAgent core LLM is the ``evaluator`` (entity extraction, question
generation, free-form judging, feedback); the model under test is the ``target``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic, and so Studio's forms, read it on Python < 3.12

from dyneval.samples import sample
from dyneval.state.context import BaseContext, described
from dyneval.state.graph_io import GraphInput

#: The knowledge base a run without --kb (and without reference texts) uses.
SAMPLE_KB = sample("judgeagent", "kb")

Difficulty = Literal["easy", "medium", "hard"]
#: Bounds of a knowledge path's hops and of a candidate set (the run's options and the retrieval tools' arguments).
MAX_HOPS, MAX_K = 10, 50
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")
#: How the target answers base questions without options: auto (chosen from the references), phrase, free.
AnswerFormat = Literal["auto", "phrase", "free"]
ANSWER_FORMATS: tuple[str, ...] = ("auto", "phrase", "free")


# -- difficulty control (Appendix B) -----------------------------------------------------------


class DifficultyConfigError(ValueError):
    """Gains / thresholds that break the conditions of Appendix B, Eq. 4."""


@dataclass(frozen=True)
class DifficultyControl:
    """The linear difficulty-control mechanism of section 3.1 / Appendix B.

    ``avg_s = sum(c_i * n_it) / sum(n_it + n_if)``; next difficulty is easy when
    ``avg_s <= t12``, medium when ``avg_s <= t23``, else hard. A question without
    a difficulty label gains ``c2`` when answered correctly (rule R2).
    """

    gains: tuple[float, float, float] = (1.0, 1.5, 2.0)
    thresholds: tuple[float, float] = (0.5, 1.0)

    def __post_init__(self) -> None:
        self.check()

    def check(self, tol: float = 1e-9) -> None:
        """Refuse a configuration that breaks Appendix B, Eq. 4 (R1-R4)."""
        c1, c2, c3 = self.gains
        t12, t23 = self.thresholds
        problems = []
        if not (c1 < c2 < c3):
            problems.append(f"gains must increase (c1 < c2 < c3), got {c1}, {c2}, {c3}")
        if abs(c1 + c3 - 2 * c2) > tol:
            problems.append(f"balance rule R1 needs c1 + c3 = 2*c2, got {c1} + {c3} != 2*{c2}")
        if abs(t12 - c2 / 3) > tol:
            problems.append(f"threshold t12 must be c2/3 = {c2 / 3:.6g}, got {t12}")
        if abs(t23 - 2 * c2 / 3) > tol:
            problems.append(f"threshold t23 must be 2*c2/3 = {2 * c2 / 3:.6g}, got {t23}")
        if not c1 > t12:
            problems.append(f"improvability rule R3 needs c1 > t12, got {c1} <= {t12}")
        if not c2 > t23:
            problems.append(f"improvability rule R3 needs c2 > t23, got {c2} <= {t23}")
        if problems:
            raise DifficultyConfigError("; ".join(problems))

    def gain(self, difficulty: str | None) -> float:
        """Score gain ``c_it`` of a correct answer at ``difficulty`` (``c2`` when unlabeled)."""
        if difficulty in DIFFICULTIES:
            return self.gains[DIFFICULTIES.index(difficulty)]
        return self.gains[1]

    def next_difficulty(self, score: float, answered: int) -> str:
        """DECIDE_DIFFICULTY of Algorithm 1: the level for the next generated question."""
        avg = score / answered if answered else 0.0
        if avg <= self.thresholds[0]:
            return "easy"
        if avg <= self.thresholds[1]:
            return "medium"
        return "hard"

    @classmethod
    def parse(cls, gains: str, thresholds: str) -> DifficultyControl:
        """From ``"1,1.5,2"`` and ``"0.5,1"`` (raises :class:`DifficultyConfigError`)."""
        try:
            g = tuple(float(x) for x in gains.split(","))
            t = tuple(float(x) for x in thresholds.split(","))
        except ValueError as exc:
            raise DifficultyConfigError(f"gains/thresholds must be comma-separated numbers: {exc}") from None
        if len(g) != 3 or len(t) != 2:
            raise DifficultyConfigError("need three gains (easy,medium,hard) and two thresholds (t12,t23)")
        return cls(gains=g, thresholds=t)


# -- base questions ----------------------------------------------------------------------------


class BaseQuestion(BaseModel):
    """One question of the base benchmark (Algorithm 1 input: question, answer, difficulty)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="the question's id")
    question: str = Field(description="the question as the target sees it")
    answer: str = Field(description="gold answer: an option letter for multiple choice, else free text")
    options: list[str] | None = Field(None, description="multiple-choice options, in order (none = free-form)")
    difficulty: Difficulty | None = Field(
        None, description="easy, medium or hard (Appendix B's gains); none = unlabeled, which gains c2"
    )
    references: list[str] = Field(default_factory=list, description="reference texts (knowledge base source)")

    @property
    def is_choice(self) -> bool:
        return bool(self.options)


# -- structured outputs (kept small and flat for the 135M model) --------------------------------


class ChunkEntities(BaseModel):
    """Entities of one numbered text (Table 11: entity list per sentence group)."""

    n: int = Field(description="number of the text")
    entities: list[str] = Field(description="named entities and key concepts in that text")


class EntityLabels(BaseModel):
    """Table 11 output: one entry per numbered text."""

    labeled: list[ChunkEntities]


class ExtendedQuestion(BaseModel):
    """Table 12 output: one generated question with a concise answer."""

    question: str
    answer: str = Field(description="a word or short phrase")


class Verdict(BaseModel):
    """Free-form judgement (Algorithm 1, lines 13 and 23): does the response give the reference answer, and why.

    The reason comes first so a judge states it before deciding; it is evidence for the reader of a verdict (the
    paper's judge answers only correct or not), so a judge that gives none still gives a verdict.
    """

    reason: str = Field(default="", description="one or two sentences: why the response is or is not correct")
    correct: bool


class Feedback(BaseModel):
    """Table 13 output fields."""

    flaws_knowledge: str = Field(description="missing background knowledge")
    flaws_capability: str = Field(description="flaws in logic and capability")
    comprehensive_performance: str = Field(description="overall performance on all questions")
    suggestions: str = Field(description="guidance that helps answer the same questions better")


# -- graph state -------------------------------------------------------------------------------


class JudgeAgentState(TypedDict, total=False):
    """One batch (Algorithm 1, loop body)."""

    batch: list[dict[str, Any]]  # BaseQuestion dicts
    answer_format: str  # phrase | free: how base questions without options are asked and judged
    base: list[dict[str, Any]]  # per base question: reply, verdict (correct/wrong/ungraded), correct, how
    score: float  # sc_B, running
    answered: int  # RND_total: graded answers only (an ungraded answer counts neither way)
    difficulty: str  # d_e for the next generated question
    trajectory: list[dict[str, Any]]  # [{"after": "base"|k, "avg": .., "next": ..}]
    question_entities: list[dict[str, str]]  # [{"entity", "question", "source"}]
    path: dict[str, Any]  # current round's sampled knowledge path
    generated: dict[str, Any] | None  # current round's question + answer
    rounds: Annotated[list[dict[str, Any]], operator.add]
    feedback: dict[str, Any]
    validation: list[dict[str, Any]]
    # adaptive Benchmark Grading (--irt-runs; nodes/judgeagent/adaptive.py): without ``irt`` none of these is set.
    # With it, ``batch`` starts as the pool the questions are chosen from and becomes the asked ones.
    irt: dict[str, list[float]]  # question id -> [a, b] of its calibrated item
    pick: str | None  # the question chosen to ask next (None: grading is over)
    irt_trace: list[dict[str, Any]]  # per choice: ability (theta, se) before it, the question, its information
    ability: dict[str, Any]  # final theta +/- se, asked questions, the IRT-decided first difficulty


class JudgeAgentInput(GraphInput):
    """What one batch is given (Algorithm 1's input): its base questions, and item parameters for adaptive
    grading."""

    batch: list[BaseQuestion] = Field(
        min_length=1,
        description="The batch's base questions (Benchmark Grading, section 3.1), each with its gold answer.",
    )
    irt: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]] | None = Field(
        None,
        description="Adaptive grading (--irt-runs): question id -> [a, b], its calibrated discrimination and "
        "difficulty; the batch is then the pool the asked questions are chosen from by "
        "information. Empty = every question is asked.",
    )


class JudgeAgentOutput(TypedDict, total=False):
    """What a finished batch gives (the fields its unit record is made of); the whole state stays in the thread."""

    batch: Annotated[
        list[dict[str, Any]],
        Field(description="The base questions asked (with adaptive grading, the ones chosen from the pool)."),
    ]
    answer_format: Annotated[
        str, Field(description="How questions without options were asked and judged: phrase or free.")
    ]
    base: Annotated[
        list[dict[str, Any]],
        Field(
            description="Benchmark Grading: per base question the target's "
            "reply and its verdict (correct / wrong / ungraded)."
        ),
    ]
    score: Annotated[
        float, Field(description="sc_B: the capability score, the gains of the correct answers (Appendix B).")
    ]
    answered: Annotated[
        int, Field(description="RND_total: the graded answers the score is over (ungraded ones count neither way).")
    ]
    trajectory: Annotated[
        list[dict[str, Any]],
        Field(description="Difficulty trajectory: the running average and the next difficulty after each step."),
    ]
    rounds: Annotated[
        list[dict[str, Any]],
        Field(
            description="Interactive Extension rounds: knowledge path, "
            "generated question, the target's answer, verdict."
        ),
    ]
    question_entities: Annotated[
        list[dict[str, str]],
        Field(description="Entities of the base questions that seed the knowledge paths (Algorithm 4)."),
    ]
    feedback: Annotated[
        dict[str, Any],
        Field(
            description="Evaluation Feedback (Table 13): flaws in knowledge and "
            "capability, overall performance, suggestions."
        ),
    ]
    validation: Annotated[
        list[dict[str, Any]],
        Field(description="Validation (Algorithm 2): per question the verdicts before and after the suggestions."),
    ]
    irt: Annotated[dict[str, list[float]], Field(description="Adaptive grading's item parameters, as given.")]
    ability: Annotated[
        dict[str, Any],
        Field(
            description="Adaptive grading: the final ability (theta +/- SE), "
            "the asked questions and the first difficulty."
        ),
    ]
    irt_trace: Annotated[
        list[dict[str, Any]],
        Field(description="Adaptive grading: each choice with the ability before it and the question's information."),
    ]


# -- context -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class JudgeAgentContext(BaseContext):
    """Parameters of one JudgeAgent batch (section 4 defaults: N_B = 3, RND_e = 3)."""

    kb: str = described(
        "",
        "Knowledge base: a .txt/.md file, a JSONL/JSON/CSV/TSV file of documents, or a folder "
        "of such files; empty = shipped sample.",
    )
    kb_fields: str = described("", "Field mapping of knowledge-base records, e.g. text=body,title=name,id=doc_id.")
    rounds: int = described(3, "RND_e: interactive extension rounds per batch (Algorithm 1).", minimum=0, maximum=20)
    hops: int = described(3, "H: hops of a sampled knowledge path (Algorithm 4).", minimum=1, maximum=MAX_HOPS)
    top_k: int = described(
        5, "Candidate set size of Algorithm 4 (5 nearest neighbours / chunks).", minimum=1, maximum=MAX_K
    )
    gains: str = described("1,1.5,2", "Score gains c1,c2,c3 for easy,medium,hard (Appendix B).")
    thresholds: str = described("0.5,1", "Thresholds t12,t23 between difficulty levels (Appendix B).")
    extract_batch: int = described(
        5, "Chunks per entity-extraction call (Table 11 labels many texts at once).", minimum=1, maximum=100
    )
    no_context_graph: bool = described(False, "Ablation: random knowledge-base chunks instead of graph paths.")
    no_difficulty_adaptation: bool = described(False, "Ablation: every generated question at fixed_difficulty.")
    fixed_difficulty: Difficulty = described("medium", "Difficulty used when difficulty adaptation is off.")
    no_extension: bool = described(False, "Ablation: no interactive extension (grading -> feedback).")
    no_validation: bool = described(False, "Skip the Algorithm 2 re-answer with suggestions.")
    answer_format: AnswerFormat = described(
        "auto",
        "Answers to base questions without options: phrase (a word or a phrase, judged as the same "
        "fact), free (free-form, judged against the full reference), or auto (free as soon as a "
        "reference answer is longer than a few words or one sentence).",
    )
    judge_jury: list[str] | None = described(
        None,
        "Judge models deciding every answer the evaluator would judge "
        "(grading, extension, validation), combined by majority vote; "
        "no majority leaves the answer ungraded as a split (counted, "
        "never correct or wrong).",
        metavar="MODEL",
    )

    irt_items: int = described(
        3,
        "With --irt-runs: base questions asked per batch, each chosen from the batch's "
        "pool by maximum information at the target's current ability.",
        minimum=1,
    )
    irt_exposure_k: int = described(
        1,
        "With --irt-runs: the next base question is drawn at random (seeded) among "
        "this many most informative ones (randomesque exposure control; 1 = the "
        "most informative).",
        minimum=1,
    )

    def control(self) -> DifficultyControl:
        return DifficultyControl.parse(self.gains, self.thresholds)
