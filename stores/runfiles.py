"""What a run folder's files hold, as the readers read them (:mod:`stores.rundir` validates every file with these).

A model lists the fields the viewer, the run index, ``--compare``, ``--export``, ``--rescore``, ``--detect`` and
JudgeAgent's IRT calibration read, with the types the runner writes; any other field a run holds is kept as it is,
unchecked. A field read with another type makes the file damaged (:class:`stores.rundir.DamagedRun`, naming the
file, line and field) instead of crashing the reader. A unit record and a plan line are checked with their
protocol's model (:func:`record_model`, :func:`plan_model`): the fields its viewer adapter
(:mod:`results.view.adapters`) and the IRT calibration read inside them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Number = int | float
#: A list of JSON objects (a record's answers, verdicts, history ...).
Rows = list[dict[str, Any]]


class Read(BaseModel):
    """The fields a reader uses; the others are kept unchecked (a newer run's fields, a protocol's own)."""

    model_config = ConfigDict(extra="allow")


def shaped(model: type[Read]) -> AfterValidator:
    """A validator that checks a mapping against ``model`` and keeps it as written (a free-form part, such as a
    summary's metrics, whose few fields the readers use must have their types)."""

    def check(value: dict[str, Any]) -> dict[str, Any]:
        model.model_validate(value)
        return value

    return AfterValidator(check)


# -- summary.json and config.json ---------------------------------------------------------------------------


class Interval(Read):
    """A headline metric's 95 % interval (``metrics.intervals[path]``, :mod:`results.stats`)."""

    low: Number | None = None
    high: Number | None = None
    n: int | None = None
    units: int | None = None
    method: str | None = None
    unit: str | None = None
    note: str | None = None


class Separable(Read):
    """The smallest difference a run of this size separates (``metrics.separable[path]``)."""

    sd: Number | None = None
    difference: Number | None = None
    n: int | None = None
    unit: str | None = None
    scale: str | None = None
    note: str | None = None


class Figures(Read):
    """The parts of ``summary["metrics"]`` every protocol writes alike; the protocol's own figures are free-form
    (read through :func:`results.view.adapters.dig`, which finds nothing where a mapping is not one)."""

    intervals: dict[str, Interval] = {}
    separable: dict[str, Separable] = {}


#: A run has a few statuses and roles: more entries are no run's (and would fill the run index with junk).
Few = Field(max_length=64)


class SummaryFile(Read):
    """``summary.json`` (:func:`results.summary.build_summary`; its protocol is config.json's)."""

    protocol: str | None = None
    models: Annotated[dict[str, str], Few] = {}
    units: int | None = None
    status_counts: Annotated[dict[str, int], Few] = {}
    ungraded_verdicts: int | None = None
    interrupted: dict[str, Any] | None = None
    smoke_test_warning: str | None = None
    usage: dict[str, Number | None] = {}
    metrics: Annotated[dict[str, Any], shaped(Figures)] = {}


class StoresFile(Read):
    postgres_dsn: str | None = None


class ConfigFile(Read):
    """``config.json``: the resolved configuration (:class:`state.config.RunConfig`) as the run wrote it."""

    protocol: str = Field(min_length=1)
    roles: Annotated[dict[str, str], Few] = {}
    params: dict[str, Any] = {}
    stores: StoresFile = StoresFile()
    prompt_overrides: dict[str, str] = {}


# -- units.jsonl, results.jsonl, events.jsonl ---------------------------------------------------------------


class PlanLine(Read):
    """A line of ``units.jsonl``: one planned unit."""

    id: str
    input: dict[str, Any] = {}
    meta: dict[str, Any] = {}


class UnitRecord(Read):
    """A line of ``results.jsonl``: a unit's record as it ended (a resumed unit's newer one comes later)."""

    unit_id: str
    status: str
    meta: dict[str, Any] = {}
    usage: dict[str, Number | None] = {}


class Message(Read):
    role: str | None = None


class Exchange(Read):
    """A line of ``events.jsonl``: one LLM exchange (:meth:`runtime.events.EventLog.record`)."""

    unit: str | None = None
    role: str
    model: str | None = None
    messages: list[Message] = []
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class BaseQuestion(Read):
    """A JudgeAgent base question in a plan line's batch (its options are lettered in the viewer)."""

    options: list[Any] | None = None


class JudgeAgentInput(Read):
    batch: list[BaseQuestion] | None = None


class JudgeAgentPlan(PlanLine):
    input: Annotated[dict[str, Any], shaped(JudgeAgentInput)] = {}


class BaseAnswer(Read):
    """A base question's verdict (the IRT calibration keys a response by the question's id)."""

    id: str | None = None


class JudgeAgentRecord(UnitRecord):
    base: list[BaseAnswer] | None = None
    rounds: Rows | None = None
    validation: Rows | None = None
    trajectory: Rows | None = None
    feedback: dict[str, Any] | None = None


class AtadStep(Read):
    """A step of an ATAD problem's history (a candidate's structure errors are listed in the viewer)."""

    structure_errors: list[Any] | None = None


class AtadItem(Read):
    history: list[AtadStep] | None = None


class AtadRecord(UnitRecord):
    item: AtadItem | None = None


class InterviewRecord(UnitRecord):
    seed_interactions: Rows | None = None
    followup_results: Rows | None = None
    seed_scores: list[Any] | None = None
    single_turn: dict[str, Any] | None = None
    feedbacks: Rows | None = None
    transcript: Rows | None = None


class LLMEvalRecord(UnitRecord):
    stars: dict[str, Any] | None = None
    session_id: str | None = None
    reference_session_id: str | None = None


class JudgedAnswer(Read):
    """One judged answer of an LLMEval-3 session, as its question bank holds it (question, reference, stars)."""

    position: int | None = None
    stars: int | None = None
    question: str | None = None
    response: str | None = None


class JudgedSession(Read):
    """A line of ``judged_answers.jsonl``: an LLMEval-3 session's judged answers and its reference replay's."""

    unit_id: str
    answers: list[JudgedAnswer] = []
    reference: list[JudgedAnswer] | None = None


class Verdict(Read):
    """A judge's or jury's verdict (the viewer shows the first repeat of each order)."""

    repeat: int | None = None


class JudgeCheckRecord(UnitRecord):
    verdicts: list[Verdict] | None = None
    jury: list[Verdict] | None = None


_RECORDS: dict[str, type[UnitRecord]] = {
    "judgeagent": JudgeAgentRecord,
    "atad": AtadRecord,
    "interview": InterviewRecord,
    "llmeval": LLMEvalRecord,
    "judgecheck": JudgeCheckRecord,
}
_PLANS: dict[str, type[PlanLine]] = {"judgeagent": JudgeAgentPlan}


def record_model(protocol: str) -> type[UnitRecord]:
    """The model of a unit record of ``protocol`` (a user's own protocol: the fields every record has)."""
    return _RECORDS.get(protocol, UnitRecord)


def plan_model(protocol: str) -> type[PlanLine]:
    """The model of a plan line of ``protocol``."""
    return _PLANS.get(protocol, PlanLine)
