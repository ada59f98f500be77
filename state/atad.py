"""ATAD (seed 003) state, task catalogue, structured-output schemas and run context.

Task types T1-T7 follow section 3.2 and Appendix C of the paper: Table 6 fixes the
input/output structure of every task, Table 7 its reasoning type, challenge factors
and domain topics. Answers are 1-based option numbers everywhere (``answer`` = 3
means the third sentence / choice), except T2 whose answer is a boolean
(``coherent``: is the order of the sentences as shown coherent?).

Schemas given to models are deliberately small and flat (the embedded 135M model
must be able to fill them); every count, index and duplicate is checked in code
(:mod:`nodes.atad.problems`), never left to an LLM.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic, and so Studio's forms, read it on Python < 3.12

from dyneval.state.context import BaseContext, described
from dyneval.state.graph_io import GraphInput

TaskId = Literal["T1", "T2", "T3", "T4", "T5", "T6", "T7"]
TASK_IDS: tuple[str, ...] = ("T1", "T2", "T3", "T4", "T5", "T6", "T7")


@dataclass(frozen=True)
class TaskSpec:
    """One anomaly task type (Tables 6 and 7)."""

    id: str
    name: str
    reasoning: str
    #: Table 6 structure: "sentences" (T1, T5-T7), "order" (T2), "blank" (T3), "bridge" (T4).
    kind: str
    min_sentences: int
    max_sentences: int
    #: what the anomaly is, in the teacher's and the student's words
    anomaly: str
    challenge_factors: tuple[str, ...]
    topics: tuple[str, ...]


TASKS: dict[str, TaskSpec] = {
    "T1": TaskSpec(
        "T1",
        "Sentence Context Anomaly",
        "contextual reasoning",
        "sentences",
        5,
        6,
        "one sentence drifts away from the paragraph's main theme (semantically inconsistent or "
        "conceptually off-topic) while staying grammatical",
        ("minor topic shift", "semantic deviation"),
        ("philosophy", "society", "psychology"),
    ),
    "T2": TaskSpec(
        "T2",
        "Paragraph Order Consistency",
        "discourse coherence",
        "order",
        5,
        5,
        "the sentences may be in an order that breaks topic flow or causal and temporal dependencies",
        ("sentence reordering",),
        ("science", "economics", "politics"),
    ),
    "T3": TaskSpec(
        "T3",
        "Blank-based Choice Anomaly",
        "lexical and pragmatic reasoning",
        "blank",
        1,
        1,
        "one of five candidate words or phrases for the blank is grammatical but contextually inappropriate",
        ("lexical fit", "collocation"),
        ("literature", "psychology", "philosophy"),
    ),
    "T4": TaskSpec(
        "T4",
        "Bridge Sentence Evaluation",
        "logical bridging and topic shift detection",
        "bridge",
        5,
        5,
        "one of five candidate bridge sentences fails to connect the two paragraphs coherently",
        ("weak logical connection", "abrupt topic shift"),
        ("economics", "society", "policy"),
    ),
    "T5": TaskSpec(
        "T5",
        "Referential Ambiguity",
        "coreference resolution",
        "sentences",
        5,
        5,
        "one sentence uses a pronoun or referring expression whose referent is ambiguous or misleading",
        ("ambiguous pronouns", "unclear referents"),
        ("psychology", "literature", "philosophy"),
    ),
    "T6": TaskSpec(
        "T6",
        "Logical Contradiction",
        "causal and contradiction reasoning",
        "sentences",
        5,
        5,
        "one sentence contradicts the others, e.g. a violated cause-effect relation or a correlation "
        "misread as causation",
        ("contradictory claims", "causal reversal"),
        ("science", "economics", "politics"),
    ),
    "T7": TaskSpec(
        "T7",
        "Tone / Style Violation",
        "stylistic reasoning",
        "sentences",
        5,
        5,
        "one sentence breaks the paragraph's tone or register (e.g. informal in a formal text)",
        ("tone shift", "register mismatch"),
        ("literature", "philosophy"),
    ),
}

#: Number of choices of T3 and T4 (Table 6).
N_CHOICES = 5


# -- teacher output schemas (Table 6), one per task type ----------------------------------------
# Upper bounds (max items / characters) are part of the schemas on purpose: a grammar-constrained
# decoder (llama.cpp) then cannot run on repeating list items until max_tokens, and other endpoints
# get the bound back as a validation error through the repair attempt. Lower bounds, indices,
# duplicates and blanks are checked in code (nodes/atad/problems.py) so they come with clear reasons.

Line = Annotated[str, StringConstraints(max_length=300)]
Para = Annotated[str, StringConstraints(max_length=900)]
Note = Annotated[str, StringConstraints(max_length=600)]


class T1Problem(BaseModel):
    """T1 Sentence Context Anomaly: a 5-6 sentence paragraph with one off-topic sentence."""

    sentences: list[Line] = Field(max_length=6, description="the paragraph, one sentence per item (5 or 6 items)")
    answer: int = Field(description="number of the anomalous sentence, 1 = first")


class T2Problem(BaseModel):
    """T2 Paragraph Order Consistency: 5 sentences, shown in a coherent order or not."""

    sentences: list[Line] = Field(max_length=5, description="5 sentences, in the order shown to the solver")
    coherent: bool = Field(description="true if this order is coherent, false if it is scrambled")


class T3Problem(BaseModel):
    """T3 Blank-based Choice Anomaly: a sentence with a blank (___) and 5 candidate fillers."""

    sentence: Line = Field(description="one sentence containing a blank written as ___")
    choices: list[Line] = Field(max_length=5, description="5 different words or phrases for the blank")
    answer: int = Field(description="number of the inappropriate choice, 1 = first")


class T4Problem(BaseModel):
    """T4 Bridge Sentence Evaluation: two paragraphs and 5 candidate bridge sentences."""

    first: Para = Field(description="the first paragraph")
    second: Para = Field(description="the second paragraph")
    choices: list[Line] = Field(max_length=5, description="5 different candidate bridge sentences")
    answer: int = Field(description="number of the bridge that does not connect the paragraphs, 1 = first")


class T5Problem(BaseModel):
    """T5 Referential Ambiguity: 5 sentences, one with an ambiguous reference."""

    sentences: list[Line] = Field(max_length=5, description="the paragraph, exactly 5 sentences")
    answer: int = Field(description="number of the ambiguous sentence, 1 = first")


class T6Problem(BaseModel):
    """T6 Logical Contradiction: 5 sentences, one logically inconsistent with the rest."""

    sentences: list[Line] = Field(max_length=5, description="the paragraph, exactly 5 sentences")
    answer: int = Field(description="number of the contradicting sentence, 1 = first")


class T7Problem(BaseModel):
    """T7 Tone / Style Violation: 5 sentences, one breaking the tone or register."""

    sentences: list[Line] = Field(max_length=5, description="the paragraph, exactly 5 sentences")
    answer: int = Field(description="number of the sentence in the wrong tone, 1 = first")


PROBLEM_SCHEMAS: dict[str, type[BaseModel]] = {
    "T1": T1Problem,
    "T2": T2Problem,
    "T3": T3Problem,
    "T4": T4Problem,
    "T5": T5Problem,
    "T6": T6Problem,
    "T7": T7Problem,
}


# -- orchestrator, student and reviewer schemas (Appendix D) ------------------------------------


class Verdict(BaseModel):
    """Orchestrator validation (D.2.1 / D.2.3): approved, or feedback for the teacher."""

    approved: bool = Field(description="true only if the problem passes every criterion")
    feedback: Note = Field("", description="empty if approved; otherwise what is wrong and how to fix it")


class EscalationFeedback(BaseModel):
    """Orchestrator feedback after a student success (D.2.2)."""

    analysis: Note = Field(description="what the student found easy")
    suggestions: list[Line] = Field(default_factory=list, max_length=4, description="specific ways to make it harder")
    increase: Line = Field("", description="summary of how to increase the difficulty")


class IndexAnswer(BaseModel):
    """A student's answer to an index task (T1, T3-T7)."""

    answer: int = Field(description="the number of the sentence or choice you pick, 1 = first")
    explanation: Line = Field("", description="one or two sentences explaining why")


class OrderAnswer(BaseModel):
    """A student's answer to T2."""

    coherent: bool = Field(description="true if the sentences are in a coherent order")
    explanation: Line = Field("", description="one or two sentences explaining why")


class Review(BaseModel):
    """A reviewer's quality scores of one problem (Table 3)."""

    validity: int = Field(description="1-5: well-formed and complete")
    coherence: int = Field(description="1-5: logically consistent and true to the task type")
    fairness: int = Field(description="1-5: one clear, unambiguous answer")
    approved: bool = Field(description="would you accept this problem into a benchmark")


# -- graph state -----------------------------------------------------------------------------

Acceptance = Literal["student_failed", "student_loop_cap", "escalation_rejected"]

ACCEPTANCE_TEXT: dict[str, str] = {
    "student_failed": "student failed (final problem exposes an error)",
    "student_loop_cap": "student loop cap reached (student solved every level)",
    "escalation_rejected": "harder variant rejected; last validated problem kept",
}


class AtadState(TypedDict, total=False):
    """One problem's journey (one graph thread). Inputs first, then progress, then outcome."""

    # inputs (set by the plan)
    task: str
    topic: str
    challenge: str | None
    style: str
    target_coherent: bool | None  # T2 only: the label the shown order should have (seeded 50/50)
    # progress
    phase: Literal["init", "escalate"]
    level: int  # index into the difficulty ladder
    successes: int  # consecutive student successes so far
    attempts: int  # teacher attempts in the current phase / level
    candidate: dict[str, Any] | None
    candidate_errors: list[str]
    candidate_unusable: bool  # the teacher's reply could not be read as a problem
    teacher_error: str | None
    approved: bool | None  # the orchestrator's latest verdict
    feedback: str  # latest rejection feedback for the teacher
    escalation: dict[str, Any] | None
    current: dict[str, Any] | None  # last validated problem
    current_level: int
    base: dict[str, Any] | None  # the validated base problem
    student_loops: int
    last_correct: bool | None
    last_explanation: str
    history: Annotated[list[dict[str, Any]], operator.add]
    # outcome
    ungraded: str | None  # why the unit stopped unjudged (the orchestrator gave no usable verdict); resume redoes it
    status: Literal["finalized", "discarded"]
    acceptance: str | None
    discard_reason: str | None


class EvalState(TypedDict, total=False):
    """One evaluation unit: one model answers (or reviews) one benchmark problem."""

    kind: Literal["answer", "review"]
    model: str
    task: str
    problem: dict[str, Any]
    # results
    correct: bool | None
    predicted: Any
    explanation: str
    parse_error: str | None
    review: dict[str, Any] | None


class AtadInput(GraphInput):
    """What one generation thread is given: the problem to write (section 2.2.1; Tables 6 and 7)."""

    task: TaskId = Field(
        description="Task type of the problem, T1-T7 (Table 6): T1 sentence context anomaly, T2 "
        "paragraph order, T3 blank-based choice, T4 bridge sentence, T5 referential "
        "ambiguity, T6 logical contradiction, T7 tone / style violation."
    )
    topic: str = Field("", description="Domain topic of the problem (Table 7); empty = the task's first topic.")
    challenge: str | None = Field(
        None, description="Challenge factor the anomaly is built on (Table 7); empty = none in particular."
    )
    style: str = Field("", description="Exam style the problem is written in; empty = GRE.")
    target_coherent: bool | None = Field(
        None,
        description="T2 only: whether the order shown should be coherent "
        "(batch runs draw it 50/50); empty = the teacher's "
        "choice.",
    )


class AtadOutput(TypedDict, total=False):
    """What a finished generation thread gives (its benchmark item is made of these); the whole state stays in the
    thread."""

    task: Annotated[str, Field(description="Task type of the problem (T1-T7).")]
    topic: Annotated[str, Field(description="Domain topic, as given.")]
    challenge: Annotated[str | None, Field(description="Challenge factor, as given.")]
    style: Annotated[str, Field(description="Exam style, as given.")]
    status: Annotated[
        Literal["finalized", "discarded"],
        Field(
            description="finalized (a validated problem the benchmark keeps) or discarded (no valid base problem "
            "within max_init_loops)."
        ),
    ]
    acceptance: Annotated[
        str | None,
        Field(
            description="Why a finalized problem was accepted: student_failed, student_loop_cap or escalation_rejected."
        ),
    ]
    discard_reason: Annotated[str | None, Field(description="Why the item was discarded.")]
    ungraded: Annotated[
        str | None,
        Field(
            description="Why the thread stopped unjudged (the orchestrator gave no "
            "usable verdict); resume redoes that validation."
        ),
    ]
    current: Annotated[
        dict[str, Any] | None, Field(description="The final problem: the last one validated, with its answer.")
    ]
    current_level: Annotated[
        int, Field(description="Difficulty tier of the final problem (index into the difficulty ladder).")
    ]
    base: Annotated[dict[str, Any] | None, Field(description="The validated base problem the escalation started from.")]
    student_loops: Annotated[int, Field(description="Student attempts made (one per validated problem).")]
    successes: Annotated[int, Field(description="The student's consecutive successes, which set the difficulty tier.")]
    history: Annotated[
        list[dict[str, Any]],
        Field(description="Every step: candidates, structure checks, validations, student answers, escalations."),
    ]


class EvalInput(GraphInput):
    """What one evaluation unit is given: a model and one benchmark problem (section 2.2.3; Table 3 review)."""

    kind: Literal["answer", "review"] = Field(
        "answer", description="answer: the model solves the problem; review: it scores the problem (Table 3)."
    )
    model: str = Field(
        min_length=1,
        description="The evaluated model or reviewer: 'local', a name from the config "
        "file, openai/MODEL or MODEL@BASE_URL.",
    )
    task: TaskId = Field(description="Task type of the problem, T1-T7 (Table 6).")
    problem: dict[str, Any] = Field(
        description="The problem in its task's Table 6 fields, with its answer (a benchmark item's problem)."
    )

    @field_validator("problem")
    @classmethod
    def _fields_of_its_task(cls, problem: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The problem has its task's fields with their types (kept as given)."""
        task = info.data.get("task")
        if task in PROBLEM_SCHEMAS:
            try:
                PROBLEM_SCHEMAS[task].model_validate(problem)
            except ValidationError as exc:
                error = exc.errors()[0]
                raise PydanticCustomError(
                    "problem_fields",
                    "{field}: {msg} (a {task} problem's fields)",
                    {"field": ".".join(str(part) for part in error["loc"]), "msg": error["msg"], "task": task},
                ) from None
        return problem


class EvalOutput(TypedDict, total=False):
    """What an evaluation unit gives."""

    kind: Annotated[Literal["answer", "review"], Field(description="answer or review, as given.")]
    model: Annotated[str, Field(description="The evaluated model or reviewer, as given.")]
    correct: Annotated[bool | None, Field(description="Whether the answer is right (checked in code).")]
    predicted: Annotated[Any, Field(description="The model's answer: a 1-based option number, or T2's coherent.")]
    explanation: Annotated[str, Field(description="The model's explanation of its answer.")]
    parse_error: Annotated[str | None, Field(description="Why the model's reply was unusable, if it was.")]
    review: Annotated[
        dict[str, Any] | None,
        Field(description="Review units: validity, coherence, fairness (1-5) and approval (Table 3)."),
    ]


# -- context -----------------------------------------------------------------------------------

DEFAULT_LADDER = "easy:0,hard:1,extreme:2,impossible:4"


@dataclass(kw_only=True)
class AtadContext(BaseContext):
    """ATAD protocol parameters (section 2.2): loop caps, difficulty ladder, orchestrator switch."""

    max_init_loops: int = described(
        3,
        "Teacher attempts for a base problem before the item is discarded (section 2.2.1, max_init_loops).",
        minimum=1,
        maximum=20,
    )
    max_student_loops: int = described(
        5,
        "Student attempts before the item is finalized even if the student keeps succeeding (max_student_loops).",
        minimum=1,
        maximum=50,
    )
    max_level_attempts: int = described(
        2,
        "Harder variants the teacher may write for one escalation step (first try plus slightly easier "
        "retries within the tier) before the last validated problem is finalized (section 2.2.2).",
        minimum=1,
        maximum=20,
    )
    difficulty_ladder: str = described(
        DEFAULT_LADDER,
        "Difficulty tiers as NAME:MIN_CONSECUTIVE_SUCCESSES, comma separated; the first is the base level.",
        check=lambda text: parse_ladder(text),
    )
    lenient_escalation: bool = described(
        True, "Validate difficulty-scaled problems with the lenient prompt of Appendix D.2.3."
    )
    no_orchestrator: bool = described(
        False,
        "Ablation of section 4.4: skip orchestrator validation (structure is still checked in code) "
        "and give the teacher the student's explanation directly as escalation feedback.",
    )


@dataclass(kw_only=True)
class EvalContext(BaseContext):
    """Context of the evaluation graph (the evaluated model is named in each unit's state)."""


def parse_ladder(text: str) -> list[tuple[str, int]]:
    """``"easy:0,hard:1"`` -> ``[("easy", 0), ("hard", 1)]``; thresholds strictly increasing, first 0."""
    levels: list[tuple[str, int]] = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, sep, threshold = part.partition(":")
        if not sep or not name.strip() or not threshold.strip().isdigit():
            raise ValueError(f"bad ladder entry {part!r}: use NAME:MIN_SUCCESSES, e.g. hard:1")
        levels.append((name.strip(), int(threshold)))
    if not levels:
        raise ValueError("the difficulty ladder is empty")
    if levels[0][1] != 0:
        raise ValueError("the first ladder level must start at 0 successes")
    thresholds = [t for _, t in levels]
    if any(b <= a for a, b in zip(thresholds, thresholds[1:])):
        raise ValueError(f"ladder thresholds must increase strictly: {thresholds}")
    return levels


def level_for(ladder: list[tuple[str, int]], successes: int) -> int:
    """Index of the ladder level reached after ``successes`` consecutive student successes."""
    index = 0
    for i, (_, threshold) in enumerate(ladder):
        if successes >= threshold:
            index = i
    return index
