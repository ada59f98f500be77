"""LLM-as-an-Interviewer (seed 004): state, structured-output schemas, context and seed records.

One graph thread = one interview session on one seed question (section 3.1,
Algorithm 1 of Appendix B.3): question modification, answer -> grade ->
feedback -> retry up to ``max_retries``, follow-up questions (Table 1) up to
``max_questions``, session summary (Appendix D.3).

Roles (section 3): the *interviewer* is the ``evaluator`` role (question
modification, feedback, follow-ups, summaries), the *grader* is the ``grader``
role (defaults to the evaluator), the *interviewee* is the ``target`` role, or a
person when ``interviewee == "human"`` (LangGraph ``interrupt()``).

Schemas handed to models are small and flat (the embedded 135M model must be
able to fill them); whatever can be checked in code (final numeric answers,
fact labels, answer leaks in feedback) is checked in :mod:`nodes.interview.checks`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic, and so Studio's forms, read it on Python < 3.12

from dyneval.state.context import BaseContext, described
from dyneval.state.graph_io import GraphInput

#: Task families of section 4 (Reasoning = math, Knowledge/Factuality = factual,
#: Instruction Following) plus a generic fallback for any other free-form task.
TaskType = Literal["math", "factual", "instruction", "generic"]
TASK_TYPES: tuple[str, ...] = ("math", "factual", "instruction", "generic")

#: Error types of the MATH grader (Appendix D.2.1).
ERROR_TYPES: tuple[str, ...] = ("Concept", "Misinterpret", "Calculation", "N/A")

#: Follow-up types of Table 1.
FOLLOWUP_TYPES: tuple[str, ...] = (
    "rationale",
    "clarification",
    "additional_facts",
    "modification_of_conditions",
    "additional_explanation",
    "correction",
)

#: Question-modification strategies (section 3.1.1, Appendix C.1 / D.1).
ModificationStrategy = Literal["auto", "math", "factual", "paraphrase", "none"]
MODIFICATION_STRATEGIES: tuple[str, ...] = get_args(ModificationStrategy)
#: Who answers the interviewer: the target role's model, or a person through interrupt().
Interviewee = Literal["model", "human"]

#: Feedback types the MATH feedback generator chooses from (Appendix D.2.1).
FEEDBACK_KINDS: tuple[str, ...] = (
    "conceptual_guidance",
    "error_identification",
    "process_guidance",
    "precision_emphasis",
    "encouragement",
)

#: Long-form status of the STEM feedback generator (Appendix D.2.1).
FACTUAL_STATUSES: tuple[str, ...] = ("complete", "partially_correct", "incorrect")


# -- seed questions ----------------------------------------------------------------------------


class SeedQuestion(BaseModel):
    """One seed question of the benchmark the interview starts from (a record of ``--data``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="the seed question's id (results and reports are filed under it)")
    question: str = Field(description="the question as the benchmark states it (the interviewer may modify it)")
    solution: str = Field("", description="reference solution (worked steps or reference text)")
    answer: str = Field("", description="reference final answer (math: a number or expression)")
    task: TaskType = Field(
        "generic",
        description="task family of section 4: math, factual (long-form "
        "knowledge), instruction (instruction following) or generic",
    )
    level: str | None = Field(None, description="optional difficulty level")


# -- structured outputs (small and flat) -------------------------------------------------------


class ModifiedQuestion(BaseModel):
    """Interviewer output of question modification (Appendix D.1)."""

    question: str = Field(description="the new question shown to the interviewee")
    explanation: str = Field(description="what was changed and, for removed values, what each unknown stands for")


class Grade(BaseModel):
    """Grader verdict for math / instruction / generic answers (Appendix D.2.1, MATH grader)."""

    correct: bool = Field(description="true only if the final answer and the reasoning are right")
    error_type: str = Field(description="one of Concept, Misinterpret, Calculation, N/A")
    reason: str = Field(description="one or two sentences explaining the verdict")


class AtomicFact(BaseModel):
    fact: str = Field(description="one short self-contained claim made by the answer")
    supported: bool = Field(description="true if the reference solution supports the claim")


class FactGrade(BaseModel):
    """Grader output for long-form factual answers: atomic facts with labels (FActScore-style, App. C.1)."""

    facts: list[AtomicFact] = Field(description="every atomic fact in the answer, with its label")
    complete: bool = Field(description="true if the answer covers the main points the question asks for")


class Feedback(BaseModel):
    """Interviewer feedback on a wrong answer (Appendix D.2.1 feedback generators)."""

    feedback: str = Field(description="guidance for the interviewee that does not reveal the answer")
    kind: str = Field(
        description="conceptual_guidance, error_identification, process_guidance, precision_emphasis or encouragement"
    )


class FollowUp(BaseModel):
    """A follow-up question with the answer the interviewer expects (Appendix D.2.2)."""

    question: str = Field(description="the follow-up question for the interviewee")
    answer: str = Field(description="the answer you expect (never shown to the interviewee)")


class FollowUpGrade(BaseModel):
    correct: bool = Field(description="true if the reply answers the follow-up question correctly")
    reason: str = Field(description="one sentence explaining the verdict")


# -- graph state -------------------------------------------------------------------------------


class Turn(TypedDict, total=False):
    """One line of the readable transcript (what Studio shows)."""

    speaker: str  # interviewer | interviewee | grader | system
    kind: str  # question | answer | feedback | follow-up | grade | note
    text: str
    q: int  # question index in the session (0 = seed question)
    attempt: int  # 1-based interaction number for that question


class InterviewState(TypedDict, total=False):
    """State of one interview session (one seed question, one thread).

    ``transcript`` is the readable log; ``interactions`` holds one record per
    answer with its verdict (correct / wrong / ungraded, :mod:`state.verdicts`),
    from which the report computes Score@n and follow-up accuracy.
    """

    unit_id: str
    seed: dict[str, Any]  # SeedQuestion as a dict (original, unmodified)
    modification: dict[str, Any]  # strategy, status, explanation, original question
    current: dict[str, Any]  # the question being asked: q, kind, type, text, expected, attempt
    last_answer: str
    last_grade: dict[str, Any]
    transcript: Annotated[list[Turn], operator.add]
    interactions: Annotated[list[dict[str, Any]], operator.add]
    feedbacks: Annotated[list[dict[str, Any]], operator.add]
    followups: Annotated[list[dict[str, Any]], operator.add]
    seed_solved: bool
    seed_error_type: str
    single_turn: dict[str, Any]  # LLM-as-a-judge on the unmodified question
    session_summary: str
    summary_source: str  # interviewer | code (summaries off, or an empty LLM summary)
    stopped: str  # why the session ended early (an ungraded answer)


class InterviewInput(GraphInput):
    """What one interview session is given: its seed question (Algorithm 1's input)."""

    seed: SeedQuestion = Field(
        description="The seed question the session starts from (section 3.1): modified, "
        "asked, and graded against its solution and answer."
    )
    unit_id: str = Field(
        "",
        description="Name of the session (the batch runner sets its unit id); it seeds the "
        "session's random choices, such as the follow-up types.",
    )


class InterviewOutput(TypedDict, total=False):
    """What a finished session gives (the fields its unit record is made of); the whole state stays in the thread."""

    seed: Annotated[dict[str, Any], Field(description="The seed question, as given.")]
    modification: Annotated[
        dict[str, Any],
        Field(description="How the seed question was modified before it was asked: strategy, status, explanation."),
    ]
    interactions: Annotated[
        list[dict[str, Any]],
        Field(
            description="One record per answer: question, attempt, the answer, its verdict (correct / wrong / "
            "ungraded), score, error type and reason; Score@n and follow-up accuracy are computed from "
            "these."
        ),
    ]
    single_turn: Annotated[
        dict[str, Any], Field(description="LLM-as-a-judge verdict on the unmodified question answered once.")
    ]
    seed_solved: Annotated[bool, Field(description="Whether the seed question was solved within its retries.")]
    seed_error_type: Annotated[
        str,
        Field(
            description="Error type of the seed question's last graded answer "
            "(Concept, Misinterpret, Calculation, N/A)."
        ),
    ]
    feedbacks: Annotated[list[dict[str, Any]], Field(description="Feedback given after wrong answers.")]
    followups: Annotated[
        list[dict[str, Any]], Field(description="Follow-up questions (Table 1) with their types and expected answers.")
    ]
    session_summary: Annotated[str, Field(description="The interviewer's summary of the session (Appendix D.3).")]
    summary_source: Annotated[
        str, Field(description="Who wrote the summary: interviewer, or code (summaries off, or an empty LLM summary).")
    ]
    stopped: Annotated[
        str, Field(description="Why the session ended early (an ungraded answer); empty when it ran to its end.")
    ]
    transcript: Annotated[list[Turn], Field(description="The readable transcript of the session.")]


# -- context -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class InterviewContext(BaseContext):
    """Interview parameters (Algorithm 1 constants and the pluggable interviewer duties of section 3.1)."""

    max_retries: int = described(
        2, "MAX_RETRIES: retries after a wrong answer (Score@n for n = 1..MAX_RETRIES+1).", minimum=0, maximum=20
    )
    max_questions: int = described(
        2, "MAX_QUESTIONS: questions per session, seed question included (1 = no follow-ups).", minimum=1, maximum=50
    )
    modify: bool = described(True, "Interviewer duty 1: modify the seed question before asking it.")
    modification: ModificationStrategy = described(
        "auto",
        "Modification strategy: auto (by task), math (unknowns / omitted values), factual (new question from "
        "the reference), paraphrase, none.",
    )
    feedback: bool = described(
        True, "Interviewer duty 2: write feedback on wrong answers (off = a plain 'not correct, try again' message)."
    )
    followups: bool = described(True, "Interviewer duty 3: ask follow-up questions (Table 1).")
    retry_followups: bool = described(
        False,
        "Give feedback and retries on follow-up questions too (Algorithm 1 "
        "does; off keeps follow-up accuracy a first-answer score).",
        negatable=True,
    )
    summarize: bool = described(True, "Write an LLM session summary (Appendix D.3); off = a summary built in code.")
    single_turn_judge: bool = described(True, "Also score the unmodified question single-turn (LLM-as-a-Judge).")
    interviewee: Interviewee = described(
        "model", "model = the target role answers; human = a person answers through interrupt() (terminal or Studio)."
    )
    history_chars: int = described(
        1500, "Longest text of one earlier turn shown again to the interviewee.", minimum=100, maximum=100_000
    )
    judge_jury: list[str] | None = described(
        None,
        "Grader models judging every answer instead of the grader "
        "role, combined by majority vote; no majority leaves the "
        "answer ungraded as a split (counted, never correct or wrong).",
        metavar="MODEL",
    )
