"""LLMEval's batch-only options (``--bank``, ``--sessions``, ``--serve`` and the other modes): the
``batch_cls`` of :class:`protocols.llmeval.protocol.LLMEvalProtocol`, and the exam server's limits it sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dyneval.state.context import described
from dyneval.stores.choices import AnswerForm


def sizes(text: str) -> list[int]:
    """``"1000,2000"`` -> ``[1000, 2000]`` (``--sizes``); ``ValueError`` unless positive integers."""
    try:
        sizes = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"must be comma-separated integers, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError("needs positive integers")
    if len(sizes) > 20 or max(sizes) > 1_000_000:
        raise ValueError("at most 20 sizes, each at most 1000000")
    return sizes


def pair(text: str) -> tuple[str, str]:
    """``"a,b"`` -> ``("a", "b")`` (``--compare``); ``ValueError`` unless two different names."""
    names = [x.strip() for x in str(text).split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise ValueError(f"needs two different model names separated by a comma, got {text!r}")
    return names[0], names[1]


def _named(value: str) -> None:
    if not str(value).strip():
        raise ValueError("must not be empty")


def _positive(value: float) -> None:
    if value <= 0:
        raise ValueError("must be greater than 0")


@dataclass(kw_only=True)
class LLMEvalBatch:
    """Batch-only options: importing the bank, sessions, and the modes that are not a batch of sessions."""

    bank: str | None = described(
        None,
        "import a JSONL/JSON/CSV/TSV question file into the bank (native or LLMEval record layout) before the run",
        metavar="FILE",
    )
    hf_dataset: str | None = described(
        None,
        "import the questions of a Hugging Face dataset id[:config] (or a local dataset folder) into the bank, as "
        "--bank does a file, read from the local Hugging Face cache (HF_HUB_OFFLINE=0 lets it download); needs the "
        "[hub] extra",
        metavar="ID",
    )
    hf_split: str = described("test", "split of --hf-dataset")
    fields: str | None = described(
        None,
        "column names of --bank or --hf-dataset: NAME=COLUMN,... for uuid, discipline, "
        "sub_discipline, qtype, question, options, answer, explanation, source "
        "(e.g. question=Question,answer=Answer); question may join columns, "
        "e.g. question=passage+question",
        metavar="MAP",
    )
    discipline: str | None = described(
        None,
        "the discipline of every --bank record that has none (a file without a "
        "discipline column, e.g. MMLU-Redux); a record's own discipline wins",
        check=_named,
        metavar="NAME",
    )
    answer_form: AnswerForm = described(
        "any",
        "how a multiple-choice answer of --bank is read: any (an option "
        "letter, a 0-based index or an option's text; refused when two name "
        "different options), or only as letter, index or text",
    )
    skip_invalid: bool = described(
        False,
        "import the valid records of --bank and report each invalid one with its "
        "reason (default: an invalid record stops the run)",
    )
    augment: bool = described(False, "on import, expand each multiple-choice question into true/false variants (A.2)")
    rewrite: bool = described(False, "on import, let the teacher rewrite material-analysis questions into true/false")
    near_dup_threshold: float = described(
        0.95,
        "cosine similarity from which an imported question is a near duplicate (0 = exact-hash check only)",
        minimum=0,
        maximum=1,
        metavar="COS",
    )
    import_only: bool = described(False, "import --bank and exit")
    sessions: int = described(1, "sessions per paradigm", minimum=1, maximum=1000, metavar="K")
    serve: bool = described(False, "start the exam server (FastAPI) on 127.0.0.1 instead of a batch run")
    port: int = described(8765, "exam server port", minimum=1, maximum=65535)
    workers: int = described(
        1,
        "exam server processes sharing the port (--serve); more than 1 needs a PostgreSQL "
        "bank, which holds everything they share",
        minimum=1,
        maximum=64,
        metavar="N",
    )
    admin_token: bool = described(
        False, "print a fresh exam-server admin token for the bank (tokens expire after an hour) and exit"
    )
    rate_limit: float = described(20.0, "exam server requests per second per user", check=_positive)
    max_request_body: int = described(
        1 << 20,
        "exam server: largest request body in bytes (413 beyond, before any parsing or token check)",
        minimum=1024,
        metavar="BYTES",
    )
    max_request_headers: int = described(
        16 << 10, "exam server: largest request line and headers in bytes (431 beyond)", minimum=1024, metavar="BYTES"
    )
    leaderboard: bool = described(False, "print the leaderboard over every model and run in the bank")
    stability: bool = described(False, "ranking stability by resampling (variance, Spearman, Elo)")
    sizes: str = described("1000,2000,4000", "resample sizes for --stability", check=sizes, metavar="N,N,..")
    trials: int = described(3, "resamples per size for --stability", minimum=1, maximum=1000)
    kappa: str | None = described(None, "Cohen's kappa of the judge against human labels", metavar="LABELS")
    contamination: str | None = described(None, "replay test: a public question set vs the bank", metavar="PUBLIC")
    export: str | None = described(None, "export the bank to JSONL or CSV and exit", metavar="FILE")
    export_layout: Literal["native", "llmeval"] = described("native", "layout of --export JSONL")
    calibrate: bool = described(
        False,
        "fit the IRT item parameters (--irt-model) on every judged answer in the "
        "bank, store them, print the IRT ranking and exit",
    )
    compare: str | None = described(
        None,
        "paired comparison of two models by IRT ability: the difference with its "
        "95 percent interval, or that they cannot be distinguished",
        check=pair,
        metavar="MODEL_A,MODEL_B",
    )
