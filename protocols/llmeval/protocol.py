"""The llmeval protocol (LLMEval-3, seed 002): batch exam sessions and the non-exam modes.

Batch run (one unit = one exam session of the target, per paradigm and repeat):
``dyneval --protocol llmeval [--bank FILE] [--questions N] [--paradigm zero-shot|few-shot|cot|all]
[--sessions K] [--reference-model REF] [--stratified]``.

Other modes (``custom_run``): ``--serve [--workers N]`` (exam server on 127.0.0.1), ``--leaderboard``,
``--stability``, ``--kappa LABELS``, ``--contamination PUBLIC``, ``--export FILE``, ``--import-only``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyneval.nodes.llmeval.bankio import (
    BATCH,
    ImportReport,
    LoadedFile,
    NearDuplicateIndex,
    SpreadEmbedding,
    export_bank,
    import_file,
    index_name,
    load_file,
)
from dyneval.nodes.llmeval.common import bank_location, bank_of, chroma_folder
from dyneval.protocols.llmeval.metrics import intervals, mean, population_variance
from dyneval.protocols.llmeval.options import LLMEvalBatch, pair, sizes
from dyneval.results.headline import report_blocks as headline_blocks
from dyneval.results.report import bar_chart, figure_path, heatmap, write_report
from dyneval.results.view.adapters import LLMEVAL
from dyneval.runtime.protocol import Protocol, Run, Unit, with_results
from dyneval.runtime.spread import in_order
from dyneval.samples import sample, shown
from dyneval.state.blocks import Block, Code, Figure, Heading, Table, Text
from dyneval.state.errors import InputError
from dyneval.state.llmeval import PARADIGMS, LLMEvalContext
from dyneval.stores.bank_sessions import question_text
from dyneval.stores.files import write_atomic
from dyneval.stores.private_files import FILE_MODE, FOLDER_MODE, private_file, write_private
from dyneval.stores.rundir import JUDGED

if TYPE_CHECKING:
    from fastapi import FastAPI
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph
    from rich.console import Console

    from dyneval.protocols.llmeval.server import ExamServer

SAMPLE_BANK = sample("llmeval", "bank.jsonl")  # same file as nodes.llmeval.common.SAMPLE_BANK
BANK_NOTE = "bank_source.txt"
#: The modes other than the batch (``custom_run``), in the order they run: the exam server last.
MODES = (
    "serve",
    "admin_token",
    "import_only",
    "export",
    "leaderboard",
    "stability",
    "kappa",
    "contamination",
    "calibrate",
    "compare",
)
#: What an adaptive session adds to its result (nodes.llmeval.scoring.adaptive_scores).
ADAPTIVE_FIELDS = (
    "theta",
    "se",
    "expected_S",
    "expected_S_low",
    "expected_S_high",
    "items",
    "stopped",
    "S_asked",
    "irt_model",
)  # where the run's questions came from (shown in the report)


def check_workers(p: dict[str, Any], location: Callable[[], str]) -> None:
    """``--workers N`` > 1 only for ``--serve`` over a PostgreSQL bank (``location()``): SQLite takes one writer
    at a time and its locks do not order the processes' checks and updates, so one process serves it."""
    workers = p.get("workers") or 1
    if workers == 1:
        return
    if not p.get("serve"):
        raise InputError("--workers is the number of exam server processes: it needs --serve", field="--workers")
    if not location().startswith(("postgresql://", "postgres://")):
        raise InputError(
            f"{workers} server processes need a PostgreSQL bank (--bank-db postgresql://... or "
            "--postgres-dsn); a SQLite bank is served by one process",
            field="--workers",
        )


def check_files(p: dict[str, Any]) -> None:
    """The files of ``--kappa`` and ``--contamination`` exist, before anything is imported, created or spent."""
    for name in ("kappa", "contamination"):
        if p.get(name) and not Path(p[name]).is_file():
            raise InputError("file not found", file=str(p[name]), field="--" + name)


def _judged(bank: Any, session_id: str | None) -> list[dict[str, Any]]:
    """A session's judged answers as the run folder keeps them (:data:`stores.rundir.JUDGED`): each question as
    the examinee read it, the bank's answer and explanation, the response, the stars and the judge's reason."""
    fields = ("position", "question_uuid", "discipline", "qtype", "answer", "explanation", "response", "stars")
    return [
        {
            **{k: row[k] for k in fields},
            "question": question_text(str(row["question"]), json.loads(row["options"] or "[]") or None),
            "reason": row["reason"],
            "judge_status": row["judge_status"],
        }
        for row in (bank.judged_items(session_id) if session_id else [])
    ]


def keep_judged(run: Run, bank: Any, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Write ``judged_answers.jsonl`` (every session's judged answers and its reference replay's) into the run
    folder, so the run can be reviewed and its stars calibrated from the folder alone (``--review``,
    ``--calibration``); written whole at each summary, so a resumed run's file holds its re-judged stars. Returns
    it by unit id."""
    kept = {
        r["unit_id"]: {
            "unit_id": r["unit_id"],
            "session_id": r.get("session_id"),
            "answers": _judged(bank, r.get("session_id")),
            "reference": _judged(bank, r.get("reference_session_id")) if r.get("reference_session_id") else None,
        }
        for r in records
        if r.get("session_id")
    }
    lines = (json.dumps(k, ensure_ascii=False) + "\n" for k in kept.values())
    write_atomic(run.run_dir / JUDGED, lines, FILE_MODE)  # the bank's questions and answers: the owner's only
    return kept


def _answers(kept: dict[str, Any]) -> dict[str, Any]:
    """A scored session's answers for its S and R intervals: ``stars`` of the model's scored answers and
    ``pairs`` ``(stars, reference stars)`` of the questions both the model and its reference replay scored."""
    ref = {r["question_uuid"]: r["stars"] for r in kept.get("reference") or []}
    return {
        "stars": [r["stars"] for r in kept["answers"] if r["stars"] is not None],
        "pairs": [
            (r["stars"], ref[r["question_uuid"]])
            for r in kept["answers"]
            if r["stars"] is not None and ref.get(r["question_uuid"]) is not None
        ],
    }


class LLMEvalProtocol(Protocol):
    name = "llmeval"
    viewer = LLMEVAL
    description = (
        "LLMEval-3: sampled, non-repeating exam sessions from a private question bank, "
        "anti-cheating delivery, 0-3 LLM judge, absolute and relative scores"
    )
    context_cls = LLMEvalContext
    batch_cls = LLMEvalBatch
    roles = ("target", "evaluator")
    judge_roles = ("evaluator",)
    rescore_note = (
        "The judge's 0-3 scores (seed 002, Sec. 3) are re-judged over the replayed answers, so the "
        "absolute, relative and per-discipline scores are re-scored as-is. An adaptive session "
        "(--adaptive) picks its next question from the scores, so one whose scores changed diverged."
    )
    _loaded: tuple[tuple[Any, ...], LoadedFile] | None = None  # the validated --bank file of this run
    uses_chroma = True  # the bank's near-duplicate index

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.llmeval import builder

        return builder

    def databases(self, run: Run) -> dict[str, str]:
        return {"--bank-db": str(run.params["bank_db"])} if run.params.get("bank_db") else {}

    # -- bank ------------------------------------------------------------------------------------
    def context(self, run: Run) -> LLMEvalContext:
        ctx = super().context(run)
        assert isinstance(ctx, LLMEvalContext)
        ctx.sample_if_empty = False  # the CLI imports --bank (or the sample) itself, with a report
        return ctx

    def _ctx(self, run: Run) -> LLMEvalContext:
        return self.context(run)

    def load_bank_file(self, run: Run) -> LoadedFile | None:
        """``--bank`` read and validated (types, format, ``--fields``, ``--discipline``) before anything is written;
        cached."""
        p = run.params
        if p.get("bank") and p.get("hf_dataset"):
            raise InputError("give --bank or --hf-dataset, not both", field="--hf-dataset")
        if not (p.get("bank") or p.get("hf_dataset")):
            given = next((flag for flag in ("fields", "skip_invalid", "discipline") if p.get(flag)), None)
            given = given or ("answer_form" if p.get("answer_form", "any") != "any" else None)
            if given:
                raise InputError(
                    "--fields, --skip-invalid, --discipline and --answer-form apply to a --bank file or "
                    "--hf-dataset; neither was given",
                    field="--" + given.replace("_", "-"),
                )
            return None
        key = (
            str(p.get("bank")),
            p.get("hf_dataset"),
            p.get("hf_split") or "test",
            p.get("fields"),
            bool(p.get("skip_invalid")),
            p.get("discipline"),
            p.get("answer_form", "any"),
        )
        if self._loaded is None or self._loaded[0] != key:
            self._loaded = (
                key,
                load_file(
                    Path(p["bank"]) if p.get("bank") else None,
                    hf_dataset=p.get("hf_dataset"),
                    hf_split=p.get("hf_split") or "test",
                    fields=p.get("fields"),
                    skip_invalid=bool(p.get("skip_invalid")),
                    discipline=p.get("discipline"),
                    form=p.get("answer_form", "any"),
                ),
            )
        return self._loaded[1]

    def import_bank(self, run: Run, source: Path | LoadedFile, *, sample: bool = False) -> ImportReport:
        """Import one file into the bank (near duplicates checked against this bank only) in batches, with a
        progress bar, and print its report. The shipped ``sample`` (36 distinct hand-written questions) is imported
        without the embedding model: its questions join the near-duplicate index at the bank's next import.

        The texts are embedded where the run's spread works (its Ray workers with ``--executor ray``); which
        question repeats which, and every bank and index write, are decided here in file order from the vectors
        placed by record, so the bank is the same whatever order the workers answer in."""
        ctx = self._ctx(run)
        bank = bank_of(ctx)
        threshold = self.batch(run).near_dup_threshold
        index = None
        if threshold > 0 and not sample:
            svc = run.services
            svc.embeddings()  # a bad --embedding-model stops the import here, before a worker meets it
            index = NearDuplicateIndex(
                svc.chroma(chroma_folder(ctx, svc)), SpreadEmbedding(svc.spread), index_name(bank)
            )
        loaded = source if isinstance(source, LoadedFile) else load_file(source)
        with import_progress(run.console, f"importing {Path(loaded.file).name}", len(loaded.questions)) as advance:
            report = import_file(
                bank,
                loaded,
                index=index,
                threshold=threshold,
                augment=bool(run.params.get("augment")),
                progress=advance,
                defer_index=sample and threshold > 0,
            )
        if run.params.get("rewrite"):
            self._rewrite_material(run, report)
        saved = run.run_dir / "import_report.txt"
        if run.resumed and saved.exists():  # a resume re-imports (all duplicates): the first import's report stands
            run.console.print(
                f"{report.summary()} (imported when this run started: {saved.name})",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        else:
            for line in report.lines():
                run.console.print(line, highlight=False, soft_wrap=True, markup=False)
            saved.write_text("\n".join(report.lines()) + "\n", encoding="utf-8")
        if report.imported == 0 and not report.duplicates:
            raise InputError("no valid record to import", file=report.file, field="--bank")
        return report

    def _rewrite_material(self, run: Run, report: ImportReport) -> None:
        """The teacher's rewrite of each imported material-analysis question (one call each, spread over the run's
        workers); the variants are written here in import order, each as soon as those before it are."""
        from dyneval.nodes.llmeval.augment import rewrite_material

        bank = bank_of(self._ctx(run))
        material = [q for q in map(bank.get, report.imported_ids) if q is not None and q.qtype == "material"]
        for q, (variants, problem) in zip(material, in_order(run.services.spread.map(rewrite_material, material))):
            if problem:
                run.console.print(f"{report.file}: {q.uuid}: {problem}", highlight=False)
                continue
            held = bank.existing_uuids(v.uuid for v in variants)
            bank.add_questions([v for v in variants if v.uuid not in held])
            report.augmented += len(variants)

    def check_inputs(self, run: Run) -> LoadedFile | None:
        """The run's questions checked before anything is created or spent: ``--bank`` read and validated, or
        the bank the user named (``--bank-db``, a PostgreSQL DSN) holds active questions (a missing SQLite
        file is not created)."""
        loaded = self.load_bank_file(run)
        if loaded is not None and not loaded.questions:  # --skip-invalid, and every record was rejected
            raise InputError(f"no valid record to import; the first was rejected: {loaded.rejected[0][1]}")
        named = (
            "--bank-db" if run.params.get("bank_db") else "--postgres-dsn" if run.config.stores.postgres_dsn else None
        )
        if loaded is None and named:
            ctx = self._ctx(run)
            location = bank_location(ctx, run.services)
            if "://" not in location and not Path(location).is_file():
                raise InputError(f"no question bank at {location}; import questions with --bank FILE", field=named)
            if bank_of(ctx).count() == 0:
                raise InputError(
                    f"the question bank {location} is empty; import questions with --bank FILE", field=named
                )
        return loaded

    def ensure_bank(self, run: Run) -> None:
        """Import ``--bank``; the shipped sample only into an empty default bank when no input was given
        (console and report say so); a bank the user named is never replaced."""
        loaded = self.check_inputs(run)  # a bad file stops the run before the bank is even opened
        ctx = self._ctx(run)
        bank = bank_of(ctx)
        location = bank_location(ctx, run.services)
        if loaded is not None:
            self.import_bank(run, loaded)
            flag = "--hf-dataset" if run.params.get("hf_dataset") else "--bank"
            source = f"{loaded.file} ({flag}) imported into {location}"
        elif bank.count() > 0:
            source = f"the existing bank {location} (no --bank given)"
        else:
            source = f"the shipped sample {shown(SAMPLE_BANK)} (no --bank or --bank-db given)"
            run.console.print(f"using {source}", highlight=False, markup=False)
            self.import_bank(run, SAMPLE_BANK, sample=True)
        if bank.count() == 0:
            raise InputError("the question bank holds no active question", field="--bank")
        note = run.run_dir / BANK_NOTE
        if not (run.resumed and note.exists()):  # a resumed run keeps where its questions first came from
            note.write_text(f"{source}; {bank.count()} active questions\n", encoding="utf-8")

    # -- batch -----------------------------------------------------------------------------------
    def plan(self, run: Run) -> list[Unit]:
        ctx, options = self._ctx(run), self.batch(run)
        check_files(run.params)
        paradigms = list(PARADIGMS) if ctx.paradigm == "all" else [ctx.paradigm]
        n = ctx.questions
        self.check_inputs(run)
        if ctx.adaptive and run.params.get("reference_model"):
            raise InputError(
                "an adaptive session has no fixed question set for a reference model to replay; "
                "compare adaptive sessions by theta instead",
                field="--reference-model",
            )
        if run.params.get("reference_model"):
            try:
                run.services.model_label("reference", run.params["reference_model"])
            except ValueError as exc:
                raise InputError(str(exc), field="--reference-model") from None
        units = []
        for k in range(1, options.sessions + 1):
            for p in paradigms:
                uid = f"{p}-{k}"
                units.append(
                    Unit(
                        id=uid,
                        input={"session_id": f"{run.run_dir.name}/{uid}", "paradigm": p},
                        meta={"paradigm": p, "session": k, "questions": n},
                    )
                )
        return units

    def expected_calls(self, run: Run) -> str:
        ctx = self._ctx(run)
        if ctx.adaptive:
            return (
                f"at most {2 * ctx.max_items}: up to {ctx.max_items} answers and judgements, fewer when the "
                f"ability's SE reaches {ctx.target_se}"
            )
        n = ctx.questions
        fewer = "; fewer when the bank holds fewer questions the model has not met (a session never repeats one)"
        if run.params.get("reference_model"):
            return f"at most {4 * n}: {n} answers and {n} judgements each for the target and the reference model{fewer}"
        return f"at most {2 * n}: {n} answers and {n} judgements (plus judge repairs){fewer}"

    def prepare(self, run: Run, units: list[Unit]) -> None:
        self.ensure_bank(run)
        ctx = self._ctx(run)
        if ctx.adaptive:
            fit = self.calibrate(run)
            if not fit.get("items"):
                raise InputError(
                    f"no question has {ctx.min_responses} judged answers yet, so none is calibrated; "
                    "run normal sessions of several models first (or lower --min-responses)",
                    field="--adaptive",
                )

    def calibrate(self, run: Run) -> dict[str, Any]:
        """(Re)fit the IRT item parameters on the bank's judged answers (skipped when nothing is new)."""
        from dyneval.nodes.llmeval.calibration import calibrate_bank

        ctx = self._ctx(run)
        fit = calibrate_bank(bank_of(ctx), ctx.irt_model, min_responses=ctx.min_responses)
        run.console.print(
            f"IRT {ctx.irt_model} calibration ({'refit' if fit['refit'] else 'unchanged'}, "
            f"{fit['fitted_at']}): {fit['items']} calibrated questions from {fit['responses']} "
            f"responses of {fit['examinees']} models",
            highlight=False,
            soft_wrap=True,
        )
        return fit

    def trials_refused(self, run: Run) -> str | None:
        return (
            "--trials repeats a unit's items, but an llmeval session draws new questions each time (no session "
            "repeats one its examinee met, section 3) and rates them 0-3 stars: use --sessions N and --stability"
        )

    def ungraded(self, state: dict[str, Any]) -> int:
        """Answers of the session and of its reference replay that the judge could not rate."""
        return int(state.get("ungraded") or 0) + int(state.get("reference_ungraded") or 0)

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        scores = state.get("scores") or {}
        ref = state.get("reference_scores") or {}
        return {
            "session_id": state.get("session_id"),
            "model": state.get("model"),
            "paradigm": state.get("paradigm"),
            "allocated": state.get("allocated"),
            "answered": state.get("answered"),
            "S": scores.get("S"),
            "N": scores.get("N"),
            "unscored": scores.get("unscored"),
            "ungraded": scores.get("ungraded", 0),
            "reference_ungraded": ref.get("ungraded", 0),
            "disciplines": scores.get("disciplines"),
            "stars": scores.get("stars"),
            "judge_status": scores.get("judge_status"),
            "R": state.get("relative"),
            "S_ref": ref.get("S"),
            "reference_session_id": state.get("reference_session_id"),
            **{k: scores.get(k) for k in ADAPTIVE_FIELDS if k in scores},
        }

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        from dyneval.protocols.llmeval import analyses  # scipy (IRT) loads with the summary, not with dyneval --help

        held = with_results(records)
        kept = keep_judged(run, bank_of(self._ctx(run)), held)
        ok = [r for r in held if r.get("S") is not None]
        adaptive = [r for r in held if r.get("theta") is not None]
        per_paradigm = {
            p: mean([r["S"] for r in ok if r["paradigm"] == p])
            for p in PARADIGMS
            if any(r["paradigm"] == p for r in ok)
        }
        rs = [r["R"] for r in ok if r.get("R") is not None]
        disciplines: dict[str, list[float]] = {}
        for r in ok:
            for d, v in (r.get("disciplines") or {}).items():
                disciplines.setdefault(d, []).append(v)
        extra = (
            {
                "adaptive_sessions": [{k: r.get(k) for k in ("unit_id", "model", *ADAPTIVE_FIELDS)} for r in adaptive],
                "adaptive_questions": sum(r.get("items") or 0 for r in adaptive),
            }
            if adaptive
            else {}
        )
        return {
            **extra,
            "sessions_scored": len(ok),
            "sessions_without_score": len(held) - len(ok) - len(adaptive),
            "sessions_ungraded": sum(1 for r in held if r.get("ungraded") or r.get("reference_ungraded")),
            "S": mean([r["S"] for r in ok]) if ok else None,
            "R": mean(rs) if rs else None,
            "answers_scored": sum(r.get("N") or 0 for r in ok),
            "answers_unscored": sum(r.get("unscored") or 0 for r in held),
            "answers_ungraded": sum(r.get("ungraded") or 0 for r in held),
            "paradigms": per_paradigm,
            "paradigm_variance": population_variance(list(per_paradigm.values())) if len(per_paradigm) > 1 else None,
            "disciplines": {d: mean(v) for d, v in sorted(disciplines.items())},
            "leaderboard": [
                {k: r[k] for k in ("model", "S", "R", "sessions")}
                for r in analyses.leaderboard(bank_of(self._ctx(run)))
            ],
            **intervals([{**r, **_answers(kept[r["unit_id"]])} for r in ok]),
        }

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        from dyneval.protocols.llmeval import analyses  # scipy (IRT) loads with the summary, not with dyneval --help

        metrics = summary["metrics"]
        ok = with_results(records)
        blocks: list[Block] = []
        note = run.run_dir / BANK_NOTE  # where the questions came from (the shipped sample is named as such)
        if note.exists():
            blocks.append(Text(f"Questions: {note.read_text(encoding='utf-8').strip()}."))
        blocks += [
            *headline_blocks(self.name, metrics),
            Table(
                ["session", "model", "paradigm", "N (scored)", "ungraded", "unscored", "S", "S_ref", "R"],
                [
                    [
                        r["unit_id"],
                        r.get("model"),
                        r.get("paradigm"),
                        r.get("N"),
                        r.get("ungraded", 0),
                        r.get("unscored"),
                        "n/a" if r.get("S") is None else r["S"],
                        r.get("S_ref"),
                        r.get("R"),
                    ]
                    for r in ok
                ],
                caption="Sessions: absolute score S (eq. 1) over the N scored answers, reference score and relative "
                "score R (eq. 2). Ungraded = the judge gave no valid rating after retries and one repair: in no "
                "score, re-judged by --resume; unscored = allocated but without stars (ungraded, a split "
                "--judge-jury or unanswered)",
            ),
        ]
        if metrics.get("adaptive_sessions"):
            blocks.append(
                Table(
                    [
                        "session",
                        "model",
                        "questions",
                        "stopped",
                        "theta",
                        "SE",
                        "expected S",
                        "expected S 95 %",
                        "S on the asked questions",
                    ],
                    [
                        [
                            r["unit_id"],
                            r["model"],
                            r["items"],
                            r["stopped"],
                            r["theta"],
                            r["se"],
                            r["expected_S"],
                            f"[{r['expected_S_low']:.1f}, {r['expected_S_high']:.1f}]",
                            r["S_asked"],
                        ]
                        for r in metrics["adaptive_sessions"]
                    ],
                    caption="Adaptive (IRT) sessions: EAP ability theta +/- SE, the expected absolute score (eq. 1) on "
                    "the calibrated bank with the interval implied by theta's 95 % interval, and why the session "
                    "stopped; eq. 1 on the adaptively chosen questions is shown but is no S (no random sample)",
                )
            )
        if metrics.get("answers_ungraded"):
            blocks.append(
                Text(
                    f"{metrics['answers_ungraded']} answer(s) in {metrics.get('sessions_ungraded')} "
                    "session(s) are ungraded and count neither for nor against the model."
                )
            )
        if metrics.get("disciplines"):
            d = metrics["disciplines"]
            path = bar_chart(
                figure_path(run.run_dir, "disciplines"),
                list(d),
                list(d.values()),
                title="Per-discipline score (10-point scale)",
                ylabel="score / 10",
            )
            blocks += [
                Table(list(d), [list(d.values())], caption="Per-discipline scores (10-point scale)"),
                Figure(path, "Per-discipline scores of this run"),
            ]
        blocks += leaderboard_blocks(run, analyses.leaderboard(bank_of(self._ctx(run))))
        return blocks

    # -- other modes -----------------------------------------------------------------------------
    def local_mode(self, run: Run) -> str | None:
        """Every mode but the batch runs in this process: the exam server answers its examinees here, the others
        read or write the bank (the contamination replay's few requests go out from here too); none has units."""
        flags = {o.name: o.flag for o in self.options()}
        return next((flags[m] for m in MODES if run.params.get(m)), None)

    def custom_run(self, run: Run) -> bool:
        p, options = run.params, self.batch(run)
        if p.get("serve"):  # its port before anything else is made: one in use is bad input, not a server failure
            from dyneval.protocols.llmeval.server import bind_port

            with contextlib.closing(bind_port(options.port)) as listener:
                return self._modes(run, listener)
        return self._modes(run, None)

    def _modes(self, run: Run, listener: socket.socket | None) -> bool:
        """The modes asked for, in order (the exam server last, on ``listener``); False when none is."""
        from dyneval.protocols.llmeval import analyses  # scipy (IRT) loads with the summary, not with dyneval --help

        p, options = run.params, self.batch(run)
        check_files(p)
        check_workers(p, lambda: bank_location(self._ctx(run), run.services))
        modes = [m for m in MODES if p.get(m)]
        if not modes:
            return False
        if listener is not None:  # its logs will hold the judge prompts, which quote the reference answers
            run.run_dir.chmod(FOLDER_MODE)
            if run.services.events.path is not None:
                private_file(run.services.events.path)
        if p.get("admin_token"):
            self.print_admin_token(run)
            return True
        blocks: list[Block] = []
        summary: dict[str, Any] = {"run_id": run.run_dir.name, "protocol": self.name, "modes": modes}
        self.ensure_bank(run)  # imports --bank, or the shipped sample into an empty bank
        bank = bank_of(self._ctx(run))
        if p.get("export"):
            count = export_bank(bank, Path(p["export"]), layout=options.export_layout)
            run.console.print(f"exported {count} questions to {p['export']}")
            summary["exported"] = count
        if p.get("leaderboard"):
            rows = analyses.leaderboard(bank)
            print_leaderboard(run, rows)
            summary["leaderboard"] = rows
            blocks += leaderboard_blocks(run, rows)
        if p.get("stability"):
            result = analyses.stability_from_bank(
                bank,
                sizes=sizes(options.sizes),
                trials=options.trials,
                reference=self._reference_label(run),
                seed=run.config.seed,
            )
            summary["stability"] = result
            blocks += stability_blocks(run, result)
        if p.get("kappa"):
            result = analyses.kappa_from_labels(bank, Path(p["kappa"]))
            summary["kappa"] = result
            run.console.print(f"judge vs human labels: {json.dumps(result)}")
            blocks += [
                Heading("Judge agreement (appendix D.2)"),
                Table(list(result), [list(result.values())], caption="Cohen's kappa, judge vs human labels"),
            ]
        if p.get("contamination"):
            public = analyses.public_questions(Path(p["contamination"]))
            ours = [q.question for q in bank.all_questions(active_only=True)]
            result = analyses.contamination_test(
                run.services.llm("target"),
                {"public": public, "bank": ours},
                per_set=self._ctx(run).questions,
                seed=run.config.seed,
            )
            summary["contamination"] = result
            replays = [[name, r["tested"], r["recalled"], r["rate"]] for name, r in result.items()]
            for row in replays:
                run.console.print(f"replay {row[0]}: {row[2]}/{row[1]} recalled ({row[3]:.1%})")
            blocks += [
                Heading("Contamination replay test (Finding 6)"),
                Table(
                    ["set", "tested", "recalled (>=2 of 3)", "rate"],
                    replays,
                    caption=f"Target {run.services.model_label('target')}",
                ),
            ]
        if p.get("calibrate") or p.get("compare"):
            summary["calibration"] = self.calibrate(run)
            irt_model = self._ctx(run).irt_model
            if not summary["calibration"]["items"]:
                raise InputError(
                    f"no question has {self._ctx(run).min_responses} judged answers (from as many "
                    "models) yet, so none is calibrated",
                    field="--min-responses",
                )
            rows = analyses.irt_ranking(bank, irt_model)
            summary["irt_ranking"] = rows
            blocks += irt_blocks(rows)
            for r in rows:
                run.console.print(
                    f"{r['rank']:>3}. {r['model']}: theta {r['theta']:+.2f} +/- {r['se']:.2f} "
                    f"(ranks {r['rank_best']}-{r['rank_worst']}), expected S {r['expected_S']:.1f} "
                    f"[{r['expected_S_low']:.1f}, {r['expected_S_high']:.1f}]",
                    highlight=False,
                    soft_wrap=True,
                )
            if p.get("compare"):
                result = analyses.paired_comparison(bank, irt_model, *pair(p["compare"]))
                summary["comparison"] = result
                run.console.print(
                    f"{result['first']} - {result['second']}: theta {result['theta_diff']:+.2f} "
                    f"[{result['theta_diff_low']:+.2f}, {result['theta_diff_high']:+.2f}], expected S "
                    f"{result['S_diff']:+.1f} [{result['S_diff_low']:+.1f}, {result['S_diff_high']:+.1f}]"
                    f"; {result['verdict']}",
                    highlight=False,
                    soft_wrap=True,
                )
                blocks += [
                    Heading("Paired comparison (IRT)"),
                    Text(result["verdict"] + "."),
                    Table(
                        ["difference", "estimate", "95 % low", "95 % high"],
                        [
                            ["theta", result["theta_diff"], result["theta_diff_low"], result["theta_diff_high"]],
                            ["expected S", result["S_diff"], result["S_diff_low"], result["S_diff_high"]],
                        ],
                        caption=f"{result['first']} minus {result['second']}",
                    ),
                ]
        if listener is not None:
            summary["authenticated_requests"] = self.serve(run, listener)
        (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        if blocks:
            write_report(run.run_dir, f"llmeval {', '.join(modes)} {run.run_dir.name}", blocks)
            run.console.print(f"report: {run.run_dir / 'report.md'}")
        return True

    def _reference_label(self, run: Run) -> str | None:
        ref = run.params.get("reference_model")
        return run.services.model_label("reference", ref) if ref else None

    def exam_server(self, run: Run) -> ExamServer:
        """The exam server of this run's bank and options (one per serving process)."""
        from dyneval.protocols.llmeval.server import ExamServer

        options = self.batch(run)
        return ExamServer(
            self._ctx(run),
            rate=options.rate_limit,
            max_body=options.max_request_body,
            max_headers=options.max_request_headers,
        )

    def serve(self, run: Run, listener: socket.socket) -> int:
        """The exam server (``--workers`` processes) on ``listener`` until SIGTERM or Ctrl-C, then its access log
        persisted and the bank closed; returns the number of authenticated requests it answered."""
        from dyneval.protocols.llmeval.server import http_server, serve_until_stopped

        self.calibrate(run)  # adaptive sessions choose among the calibrated questions (refit only if new answers)
        workers = self.batch(run).workers
        server = self.exam_server(run)
        token_file = run.run_dir / "admin_token"
        write_private(token_file, server.admin_token() + "\n")
        port = listener.getsockname()[1]
        run.console.print(
            f"exam server on http://127.0.0.1:{port}, {workers} process(es)  (admin token in "
            f"{token_file}; a fresh one: --admin-token)",
            highlight=False,
        )
        if workers > 1:
            from dyneval.protocols.llmeval.workers import serve_workers

            server.bank.close()  # the workers open their own connections
            requests = serve_workers(run, listener, workers, server.max_headers)
        else:
            access_log = run.run_dir / "access_log.jsonl"
            serve_until_stopped(http_server(server, port, partial(server.shut_down, access_log)), listener)
            requests = len(server.log)
        run.console.print(
            f"exam server stopped after {requests} authenticated requests (access log in "
            f"{run.run_dir / 'access_log.jsonl'})",
            highlight=False,
        )
        return requests

    def leaves_no_run(self, run: Run) -> bool:
        return bool(run.params.get("admin_token"))

    def print_admin_token(self, run: Run) -> None:
        """``--admin-token``: a fresh admin token signed with the bank's secret (valid for a running server), printed
        only (:meth:`leaves_no_run`)."""
        from dyneval.protocols.llmeval.server import ExamServer

        server = ExamServer(self._ctx(run))
        run.console.print(
            f"admin token for {server.bank.url.split('://')[0]} bank, valid {server.ttl // 60} minutes:",
            highlight=False,
        )
        print(server.admin_token(), flush=True)


def worker_app() -> FastAPI:
    """The exam server application of one ``--serve --workers N`` process (uvicorn imports it by path:
    :data:`protocols.llmeval.workers.APP`), over the run its supervisor handed over."""
    from dyneval.protocols.llmeval.server import create_app
    from dyneval.protocols.llmeval.workers import access_log_part, worker_run

    run = worker_run()
    server = LLMEvalProtocol().exam_server(run)
    return create_app(server, on_stop=lambda: server.shut_down(access_log_part(run)))


@contextlib.contextmanager
def import_progress(console: Console, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """``advance(records)`` for an import of ``total`` records: a bar with ETA on a terminal; elsewhere, for an
    import of more than one batch, a plain line at every tenth (records, rate, ETA)."""
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        ) as bar:
            task = bar.add_task(label, total=total)
            yield lambda k: bar.advance(task, k)
        return
    started, done, shown = time.monotonic(), 0, 0

    def advance(k: int) -> None:
        nonlocal done, shown
        done += k
        tenth = done * 10 // total
        if total > BATCH and tenth > shown:
            shown = tenth
            rate = done / max(time.monotonic() - started, 1e-9)
            console.print(
                f"{label}: {done}/{total} records ({done / total:.0%}), {rate:.0f}/s, "
                f"ETA {(total - done) / rate:.0f} s",
                highlight=False,
                markup=False,
            )

    yield advance


def print_leaderboard(run: Run, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table as RichTable

    table = RichTable(title="llmeval leaderboard")
    for col in ("#", "model", "R", "S", "sessions", "runs", "answers"):
        table.add_column(col)
    for i, r in enumerate(rows, start=1):
        table.add_row(
            str(i),
            r["model"],
            "-" if r["R"] is None else f"{r['R']:.2f}",
            f"{r['S']:.2f}",
            str(r["sessions"]),
            str(r["runs"]),
            str(r["answers"]),
        )
    run.console.print(table)


def leaderboard_blocks(run: Run, rows: list[dict[str, Any]]) -> list[Block]:
    """Table 1 style (R, S, per discipline) and Table 2 style (per paradigm, mean, variance)."""
    if not rows:
        return [Text("The bank holds no scored session yet.")]
    discs = sorted({d for r in rows for d in r["disciplines"]})
    blocks: list[Block] = [
        Heading("Leaderboard (all models and runs in the bank)"),
        Table(
            ["model", "R", "S", *discs, "sessions", "runs"],
            [
                [r["model"], r["R"], r["S"], *[r["disciplines"].get(d) for d in discs], r["sessions"], r["runs"]]
                for r in rows
            ],
            caption="R: relative score (eq. 2), S: absolute score (eq. 1), disciplines on a 10-point scale",
        ),
    ]
    paras = [p for p in PARADIGMS if any(p in r["paradigms"] for r in rows)]
    blocks.append(
        Table(
            ["model", *paras, "mean", "variance"],
            [
                [r["model"], *[r["paradigms"].get(p) for p in paras], r["paradigm_mean"], r["paradigm_variance"]]
                for r in rows
            ],
            caption="Absolute score per prompting paradigm (Table 2 style; population variance)",
        )
    )
    if discs and len(rows) > 0:
        path = heatmap(
            figure_path(run.run_dir, "leaderboard_disciplines"),
            [r["model"][:30] for r in rows],
            discs,
            [[r["disciplines"].get(d, 0.0) for d in discs] for r in rows],
            title="Per-discipline scores (10-point scale)",
        )
        blocks.append(Figure(path, "Per-discipline scores of every model"))
    return blocks


def irt_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    """The IRT ranking: theta with its 95 % interval, the ranks the intervals allow, expected absolute score."""
    return [
        Heading("IRT ranking (ability with 95 % intervals)"),
        Table(
            [
                "rank",
                "model",
                "theta",
                "SE",
                "95 % interval",
                "possible ranks",
                "expected S",
                "expected S 95 %",
                "responses",
            ],
            [
                [
                    r["rank"],
                    r["model"],
                    r["theta"],
                    r["se"],
                    f"[{r['theta_low']:.2f}, {r['theta_high']:.2f}]",
                    f"{r['rank_best']}-{r['rank_worst']}",
                    r["expected_S"],
                    f"[{r['expected_S_low']:.1f}, {r['expected_S_high']:.1f}]",
                    r["responses"],
                ]
                for r in rows
            ],
            caption="EAP ability from each model's latest judged answers on the calibrated questions; possible ranks: "
            "a model is surely ahead only when its interval lies wholly above the other's; expected S: "
            "equation 1's expected value on the calibrated bank",
        ),
    ]


def stability_blocks(run: Run, result: dict[str, Any]) -> list[Block]:
    from dyneval.results.report import line_chart

    models = sorted(result["full"])
    blocks: list[Block] = [
        Heading("Ranking stability (appendix D.1, Table 9, Figure 5)"),
        Text(
            f"Reference {result['reference']}; questions each model shares with it: "
            f"{json.dumps(result['pools'])}"
            + (f"; skipped (nothing shared): {', '.join(result['skipped'])}" if result["skipped"] else "")
            + "."
        ),
    ]
    rows = []
    for m in models:
        trials = [t[m] for size in result["sizes"].values() for t in size["trials"]]
        rows.append([m, *trials, result["mean"][m], result["variance"][m]])
    heads = [f"n={s['n']} #{i + 1}" for s in result["sizes"].values() for i in range(len(s["trials"]))]
    blocks.append(
        Table(
            ["model", *heads, "mean", "variance"],
            rows,
            caption="Relative scores per resample (sample variance, as in Table 9)",
        )
    )
    sizes = list(result["sizes"].values())
    blocks.append(
        Table(
            ["n", "Spearman (relative)", "Spearman (Elo)"],
            [[s["n"], s["spearman_relative"], s["spearman_elo"]] for s in sizes],
            caption="Rank agreement with the full-pool ranking",
        )
    )
    if len(sizes) > 1 and sizes[0]["spearman_relative"] is not None:
        path = line_chart(
            figure_path(run.run_dir, "stability"),
            {"relative": [s["spearman_relative"] for s in sizes], "Elo": [s["spearman_elo"] for s in sizes]},
            x=[s["n"] for s in sizes],
            title="Ranking agreement vs sample size",
            xlabel="questions",
            ylabel="Spearman rho",
        )
        blocks.append(Figure(path, "Relative ranking vs Elo (Figure 5 style)"))
    blocks.append(Code(json.dumps({"ranking": result["ranking"]}, indent=1)))
    return blocks
