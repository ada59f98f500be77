"""The command line: ``dyneval --protocol NAME [options]`` (also ``python -m dyneval`` and, in the repository,
``python run.py``).

Every option is listed by ``dyneval --help``. Exit codes are :data:`EXIT_CODES`; bad input exits with code 2 and one
line naming the file, record and field.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from rich.console import Console  # noqa: E402
from rich.text import Text  # noqa: E402

from dyneval.gate import (  # noqa: E402
    EXIT_BAD_INPUT,
    EXIT_BELOW_THRESHOLD,
    EXIT_BUDGET,
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNITS_FAILED,
    Threshold,
    parse_thresholds,
    unfinished_units,
)
from dyneval.protocols import REGISTRY, available, protocol_class  # noqa: E402
from dyneval.results.rescore import check_rescore, source_dir  # noqa: E402
from dyneval.runtime import stop  # noqa: E402
from dyneval.runtime.config_loader import ParamSchema, check_resume_unchanged, load_config, read_config_file  # noqa: E402
from dyneval.runtime.executors.ray_address import REACH_S  # noqa: E402
from dyneval.runtime.protocol import FINAL_STATUSES, Protocol, Run  # noqa: E402
from dyneval.runtime.signals import stopped_line  # noqa: E402
from dyneval.runtime.stop import RunInterrupted  # noqa: E402
from dyneval.state.config import ROLES, RunConfig  # noqa: E402
from dyneval.state.errors import InfraError, InputError  # noqa: E402
from dyneval.stores.rundir import RunDir  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """Argument errors are bad input like any other: one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise InputError(message)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Real defaults shown (not "None": those come from the config or the protocol), epilog kept as laid out."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _common_parser(own: frozenset[str] = frozenset(), **kwargs: Any) -> argparse.ArgumentParser:
    """The options every protocol shares, but one a protocol's ``own`` options name alike (llmeval's ``--trials``:
    its ``--stability`` resamples; llmeval repeats no unit)."""
    parser = _Parser(
        prog="dyneval",
        description="Evaluate LLMs with dynamic protocols (JudgeAgent, ATAD, LLM-as-an-Interviewer, LLMEval-3). "
        "Without --protocol, 'dyneval --compare RUN_A RUN_B ... [--out DIR]' writes one page comparing "
        "finished runs of one protocol, and 'dyneval --export RUN [--format csv|jsonl|parquet] "
        "[--out DIR]' writes a run's units (and items) as tables in RUN/export/ (run ids under --out, or "
        "run folders), 'dyneval --detect D --pilot RUN' prints the units per target that separate a "
        "difference D in each headline metric, from the pilot run's variance, 'dyneval --index DIR' "
        "writes DIR/index.html listing every run in DIR, 'dyneval --review RUN [--sample N] [--reviewer NAME] "
        "[--host H] [--port P]' serves a page where people label a sample of a run's judged answers, and "
        "'dyneval --leaderboard [--out DIR] [--protocol P] [--latest]' prints the models ranked by their "
        "finished runs (pooled; --latest: each model's latest run), per protocol, data set and judge.",
        formatter_class=_HelpFormatter,
        **kwargs,
    )
    parser.add_argument("--protocol", required=True, help=f"one of: {', '.join(REGISTRY)}")
    parser.add_argument("--version", action="version", version=f"dyneval {metadata.version('dyneval')}")
    parser.add_argument("--config", help="TOML or YAML config file (models, roles, stores, params)")
    roles = parser.add_argument_group("models per role (local | NAME from the config | openai/MODEL | MODEL@BASE_URL)")
    for role in ROLES:
        agent = " (or an agent: graph:MODULE:ATTR, docs/agents.md)" if role in ("target", "student") else ""
        roles.add_argument(f"--{role}", help=f"model for the {role} role{agent}")
    run = parser.add_argument_group("run")
    run.add_argument(
        "--limit",
        type=int,
        help="process at most this many units (interview: seed questions, each with all its --repeats)",
    )
    default = {name: f.default for name, f in RunConfig.model_fields.items()}
    run.add_argument("--concurrency", type=int, help=f"units in flight at once (default {default['concurrency']})")
    run.add_argument("--seed", type=int, help=f"seed for every random choice (default {default['seed']})")
    if "trials" not in own:
        run.add_argument(
            "--trials",
            type=int,
            metavar="K",
            help="run each unit K times, each on fresh threads, and report pass^1..pass^K (the chance that k trials of "
            "an item all succeed) and the flip rate (items whose verdict differs between trials), for the protocols "
            "whose units have a binary verdict (docs/agents.md)",
        )
    run.add_argument(
        "--state-check",
        metavar="MODULE:FN",
        help="with an agent target: FN(state, item) checks the agent's final state on each of its threads "
        "(MODULE:FN or path/to/file.py:FN), recorded beside the protocol's verdicts (docs/agents.md)",
    )
    run.add_argument(
        "--max-calls",
        type=int,
        metavar="N",
        help="budget: start no request once the run sent N "
        f"(then stop like Ctrl-C: partial report, exit code {EXIT_BUDGET}, resumable with a higher "
        "budget)",
    )
    run.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="budget: start no request once the run's requests used N prompt + completion tokens (as --max-calls)",
    )
    run.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="budget: start no request once the run's requests "
        "cost USD, priced by --pricing (as --max-calls; refused if a model has no price)",
    )
    run.add_argument(
        "--max-tokens-per-role",
        metavar="ROLE=N,...",
        help="budget per role (as logged, e.g. "
        "evaluator=100000): stop as --max-tokens once one role's requests used N tokens",
    )
    run.add_argument("--max-cost-per-role", metavar="ROLE=USD,...", help="budget per role in USD (as --max-cost)")
    run.add_argument("--out", help=f"folder holding run directories (default {default['out']})")
    run.add_argument("--resume", metavar="RUN_ID", help="continue the run in OUT/RUN_ID, skipping finished units")
    run.add_argument(
        "--rescore",
        metavar="RUN_ID",
        help="a new run that re-judges run OUT/RUN_ID with the judging "
        "role(s) given (e.g. --evaluator), replaying every other role's recorded replies (no target "
        "call); a unit the new verdicts lead elsewhere ends 'diverged'",
    )
    run.add_argument(
        "--calibration",
        metavar="LABELS",
        help="with --rescore: human labels (judgecheck's format) for the new judge; the run's judged share correct "
        "is shown raw and judge-calibrated (docs/judges.md). A finished run: dyneval --calibration LABELS --run RUN",
    )
    run.add_argument("--dry-run", action="store_true", help="print the plan (units, models, calls) and exit")
    run.add_argument(
        "--fail-under",
        action="append",
        metavar="METRIC=VALUE",
        help=f"exit {EXIT_BELOW_THRESHOLD} when a headline metric (its name in summary.json's metrics, "
        "e.g. score@1, S, table1.*.avg) is below VALUE or has no value; repeatable",
    )
    run.add_argument("--skip-preflight", action="store_true", help="do not ping each endpoint before the run")
    run.add_argument(
        "--executor",
        choices=("threads", "ray"),
        default="threads",
        help="where units run: threads of this process (default), or Ray tasks on a cluster (needs "
        "--postgres-dsn and the [ray] extra; see docs/scale-out.md)",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster of --executor ray (HOST:PORT or auto; default: a cluster started on this "
        f"machine, on 127.0.0.1); one that does not answer within {REACH_S:g} s stops the run "
        f"before it starts (exit {EXIT_INFRA})",
    )
    stores = parser.add_argument_group("stores")
    stores.add_argument("--chroma-url", help="Chroma server URL (default: on-disk PersistentClient)")
    stores.add_argument("--postgres-dsn", help="PostgreSQL DSN for checkpoints (default: SQLite in the run dir)")
    stores.add_argument(
        "--embedding-model",
        help="sentence-transformers model name or path, or MODEL@BASE_URL (an OpenAI-compatible embeddings endpoint)",
    )
    stores.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse the accepted reply of an identical request from earlier runs (default: off)",
    )
    stores.add_argument("--cache-dir", help="response cache folder (default ~/.cache/dyneval)")
    stores.add_argument("--cache-expiry-hours", type=float, help="ignore cached replies older than this")
    run.add_argument(
        "--prompts",
        metavar="DIR",
        help="folder of prompt files (<protocol>/<role>_<step>.yaml) that replace the shipped prompts of the same name",
    )
    stores.add_argument(
        "--pricing",
        metavar="FILE",
        help="YAML of USD per million input/output tokens per model "
        "(default: the shipped example prices, runtime/pricing.yaml)",
    )
    return parser


def _protocol_group(parser: argparse.ArgumentParser, name: str, cls: type[Protocol]) -> list[str]:
    """Add one protocol's flags (generated from its declared options); return their ``dest`` names."""
    cls.add_arguments(parser.add_argument_group(f"{name} options", cls.description))
    return [o.name for o in cls.options() if o.cli]


def build_parser(protocol: str | None) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser for one protocol, and the ``dest`` names of that protocol's own flags.

    Protocols own their flag names (two may both define ``--data``), so only the
    chosen protocol's options are added. Without a known ``--protocol`` the help
    lists every protocol's options in the epilog, each from its own parser.
    """
    if protocol in REGISTRY:
        with contextlib.suppress(InputError):  # not importable: main() reports it as one line
            cls = protocol_class(protocol)
            parser = _common_parser(own=frozenset(o.name for o in cls.options() if o.cli))
            return parser, _protocol_group(parser, protocol, cls)
    sections = []
    for name, cls in available().items():
        sub = argparse.ArgumentParser(
            prog=f"dyneval --protocol {name}", add_help=False, usage=argparse.SUPPRESS, formatter_class=_HelpFormatter
        )
        _protocol_group(sub, name, cls)
        sections.append(sub.format_help().strip())
    return _common_parser(epilog="\n\n".join(sections)), []


def _chosen_protocol(argv: list[str] | None) -> str | None:
    """``--protocol`` read ahead of the full parse (its options depend on it)."""
    pre = _Parser(add_help=False)
    pre.add_argument("--protocol")
    return pre.parse_known_args(argv)[0].protocol


def _print_leaderboard(args: argparse.Namespace, rest: list[str], console: Console) -> None:
    """``--leaderboard [--out DIR] [--protocol P] [--latest]``: the leaderboards of the runs under ``--out`` on the
    console, each model's runs pooled (``--latest``: its latest run)."""
    latest = "--latest" in rest
    rest = [r for r in rest if r != "--latest"]
    other = [
        f
        for f in ("compare", "export", "format", "detect", "pilot", "index", "review", "calibration", "run")
        if getattr(args, f) is not None
    ]
    if rest or other:
        extra = " ".join(rest) or " ".join(f"--{f}" for f in other)
        raise InputError(
            f"--leaderboard takes --out, --protocol and --latest only, not {extra}", setting="--leaderboard"
        )
    if args.protocol is not None:
        protocol_class(args.protocol)  # an unknown name: exit 2 naming the choices
    folder = Path(args.out)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder of runs", setting="--out")
    from dyneval.results.console_summary import render_leaderboards
    from dyneval.results.leaderboard import boards
    from dyneval.stores.rundir import runs_under

    found = boards(runs_under(folder), args.protocol)
    if not found:
        of = f" of {args.protocol}" if args.protocol else ""
        console.print(f"no finished run{of} under {folder}", markup=False, highlight=False)
    render_leaderboards(found, console, pooled=not latest)


def _finished_run_tools(argv: list[str] | None, console: Console) -> bool:
    """Without ``--protocol``: ``--compare RUN ...`` writes one page comparing finished runs, ``--export RUN
    [--format csv|jsonl|parquet]`` writes a run's results as tables (runs are ids under ``--out``, or folders);
    False when neither is asked for. With ``--protocol`` both are that protocol's own options (llmeval's)."""
    pre = _Parser(add_help=False)
    pre.add_argument("--compare", nargs="+")
    pre.add_argument("--export")
    pre.add_argument("--format")
    pre.add_argument("--detect")
    pre.add_argument("--pilot")
    pre.add_argument("--index")
    pre.add_argument("--review")
    pre.add_argument("--leaderboard", action="store_true")
    pre.add_argument("--calibration")
    pre.add_argument("--run")
    pre.add_argument("--protocol")
    pre.add_argument("--out", default=RunConfig.model_fields["out"].default)
    args, rest = pre.parse_known_args(argv)
    own = args.protocol is not None and any(o.name == "leaderboard" for o in protocol_class(args.protocol).options())
    if args.leaderboard and not own:  # llmeval's --leaderboard is its own (the bank's examinees)
        _print_leaderboard(args, rest, console)
        return True
    if args.protocol is None and (args.calibration is not None or args.run is not None):
        others = [f"--{f}" for f in ("compare", "export", "format", "index", "review") if getattr(args, f)]
        if rest or others or args.calibration is None or args.run is None:
            extra = " ".join(rest + others) or ("no --run" if args.run is None else "no --calibration LABELS")
            raise InputError(
                f"--calibration LABELS takes --run RUN and --out only, not {extra}", setting="--calibration"
            )
        from dyneval.results.calibration.write import calibrate, run_folder

        calibrate(run_folder(args.run, args.out), Path(args.calibration), console)
        return True
    if args.protocol is None and (args.detect is not None or args.pilot is not None):
        if rest or args.compare is not None or args.export is not None or args.format is not None:
            extra = " ".join(rest) or ("--format" if args.format is not None else "--compare/--export")
            raise InputError(f"--detect takes --pilot RUN and --out only, not {extra}", setting="--detect")
        from dyneval.results.detect import print_units_needed

        print_units_needed(args.detect, args.pilot, args.out, console)
        return True
    if args.protocol is None and args.review is not None:
        if others := [f for f in ("compare", "export", "format", "index") if getattr(args, f)]:
            raise InputError(f"--review takes its own options only, not --{others[0]}", setting="--review")
        from dyneval.results.review.command import review_command

        review_command(args.review, args.out, rest, console)
        return True
    if args.protocol is None and args.index is not None:
        if rest or args.compare is not None or args.export is not None:
            extra = " ".join(rest) or "--compare/--export"
            raise InputError(f"--index takes a folder of runs only, not {extra}", setting="--index")
        from dyneval.results.view.index import write_index
        from dyneval.stores.files import writable

        with writable(Path(args.index), "--index"):
            page = write_index(Path(args.index))
        console.print(f"run index: {page}", markup=False, highlight=False, soft_wrap=True)
        return True
    if args.protocol is not None or (args.compare is None and args.export is None):
        return False
    flag = "--compare" if args.compare is not None else "--export"
    if rest or (args.compare is not None and args.export is not None):
        extra = " ".join(rest) or "both --compare and --export"
        raise InputError(
            f"{flag} takes run ids and --out{' and --format' if flag == '--export' else ''} only, not {extra}",
            setting=flag,
        )
    if args.compare is not None:
        from dyneval.results.view.compare import write_compare  # loaded only when a comparison is asked for
        from dyneval.results.view.index import INDEX_FILE, write_index

        console.print(
            f"comparison: {write_compare(args.compare, args.out)}", markup=False, highlight=False, soft_wrap=True
        )
        if (Path(args.out) / INDEX_FILE).is_file():  # the folder's run index lists the new comparison page
            write_index(Path(args.out))
    else:
        from dyneval.results.export import export_run

        for path in export_run(args.export, args.out, args.format or "csv"):
            console.print(f"exported: {path}", markup=False, highlight=False, soft_wrap=True)
    return True


def flags_from_args(args: argparse.Namespace, protocol_dests: list[str]) -> dict[str, Any]:
    return {
        "roles": {r: getattr(args, r) for r in ROLES if getattr(args, r)},
        "limit": args.limit,
        "concurrency": args.concurrency,
        "trials": None if "trials" in protocol_dests else args.trials,  # llmeval's own --trials is its param
        "state_check": args.state_check,
        "seed": args.seed,
        "max_calls": args.max_calls,
        "max_tokens": args.max_tokens,
        "max_cost": args.max_cost,
        "max_tokens_per_role": args.max_tokens_per_role,
        "max_cost_per_role": args.max_cost_per_role,
        "out": args.out,
        "prompts": args.prompts,
        "stores": {
            "chroma_url": args.chroma_url,
            "postgres_dsn": args.postgres_dsn,
            "embedding_model": args.embedding_model,
            "cache": args.cache,
            "cache_dir": args.cache_dir,
            "cache_expiry_hours": args.cache_expiry_hours,
            "pricing": args.pricing,
        },
        "params": {d: getattr(args, d) for d in protocol_dests if getattr(args, d) is not None},
    }


def _check_run_id(run_id: str, flag: str) -> None:
    """A run id names a folder right under ``--out``, never a path that would lead elsewhere (``../x``, ``a/b``)."""
    if run_id in ("", ".", "..") or Path(run_id).name != run_id:
        raise InputError(
            f"{run_id!r} is not a run id: give the name of a run's folder under --out, as the run "
            "printed it, not a path",
            field=flag,
        )


def start(args: argparse.Namespace, dests: list[str], console: Console) -> tuple[Protocol, RunConfig, Run]:
    """The protocol, configuration and run that parsed options ask for: a new run, a ``--resume`` of one (its
    settings unchanged) or a ``--rescore`` of one (another judge). ``InputError`` names where a bad value came from."""
    cls = protocol_class(args.protocol)
    flags = flags_from_args(args, dests)
    config_file = args.config
    if args.resume and args.rescore:
        raise InputError(
            "--rescore makes a new run: it cannot --resume one (a re-score interrupted is "
            "resumed by its own run id alone)",
            field="--rescore",
        )
    if args.resume or args.rescore:
        _check_run_id(args.resume or args.rescore, "--resume" if args.resume else "--rescore")
        out = (
            args.out
            or (read_config_file(args.config).get("out") if args.config else None)
            or RunConfig.model_fields["out"].default
        )
        if args.rescore:
            config_file = str(source_dir(cls, out, args.rescore) / "config.json")
            flags["rescored_from"] = args.rescore
        else:
            config_file = os.path.join(out, args.resume, "config.json")
            if not os.path.exists(config_file):
                raise InputError(f"no run {args.resume!r} under {out}", field="--resume")
            made_by = RunDir(Path(out) / args.resume, flag="--resume").run_config().protocol  # damaged: one line
            if made_by != args.protocol:
                raise InputError(
                    f"run {args.resume!r} is a run of {made_by}, not {args.protocol}; resume it with "
                    f"--protocol {made_by}",
                    field="--resume",
                )
    config = load_config(args.protocol, config_file=config_file, flags=flags, params=ParamSchema.of(cls))
    try:
        if args.resume or args.rescore:
            stored = RunConfig.model_validate_json(Path(config_file).read_text(encoding="utf-8"))
            if args.rescore:
                check_rescore(cls, stored, config)
                if args.calibration is not None:  # refused before the run is made
                    from dyneval.results.calibration.run import check_labels

                    check_labels(Path(args.calibration), cls.name, config)
            else:
                check_resume_unchanged(stored, config, ParamSchema.of(cls))
        from dyneval.runtime.executors.choice import ExecutorChoice
        from dyneval.runtime.runner import open_run  # LangGraph's checkpointers load with a run, not with --help

        protocol = cls()
        executor = ExecutorChoice(args.executor, args.ray_address)
        return protocol, config, open_run(protocol, config, run_id=args.resume, console=console, executor=executor)
    except InputError as exc:
        raise exc.blamed(config.sources) from None


def main(argv: list[str] | None = None) -> int:
    console = Console()
    errors = Console(stderr=True)
    config = run = protocol = None
    try:
        if _finished_run_tools(argv, console):
            return EXIT_OK
        parser, dests = build_parser(_chosen_protocol(argv))
        args = parser.parse_args(argv)
        thresholds = parse_thresholds(args.fail_under, args.protocol)
        if args.calibration is not None and not args.rescore:
            raise InputError(
                "with --protocol, --calibration goes with --rescore; for a finished run: "
                "dyneval --calibration LABELS --run RUN",
                setting="--calibration",
            )
        protocol, config, run = start(args, dests, console)
        from dyneval.runtime.runner import execute, resume_command

        summary = execute(protocol, run, dry_run=args.dry_run, skip_preflight=args.skip_preflight)
        if args.dry_run:
            return EXIT_OK
        if args.calibration is not None:
            from dyneval.results.calibration.write import calibrate
            from dyneval.stores.rundir import RunDir

            calibrate(RunDir(run.run_dir, "--calibration"), Path(args.calibration), console)
        return _verdict(summary, thresholds, protocol.name, resume_command(protocol, run), console)
    except InputError as exc:
        errors.print(
            Text.assemble(("error:", "red"), f" {exc.blamed(config.sources) if config else exc}"),
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_BAD_INPUT
    except InfraError as exc:  # a unit's fault ends that unit; this one stopped the run itself (e.g. a store down)
        errors.print(Text.assemble(("error:", "red"), f" {exc}"), highlight=False, soft_wrap=True)
        if resume := _resume(protocol, run):
            console.print(f"once it is back, resume with: {resume}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_INFRA
    except RunInterrupted as exc:
        assert run is not None  # raised by execute() only, once start() has opened the run
        console.print(
            f"{exc}; the partial report is in {run.run_dir}",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        more = " with a higher --max-calls / --max-tokens / --max-cost" if exc.budget else ""
        console.print(f"resume{more} with: {exc.resume}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_BUDGET if exc.budget else EXIT_TERMINATED if exc.terminated else EXIT_INTERRUPTED
    except KeyboardInterrupt as exc:
        console.print(
            stopped_line(exc, _resume(protocol, run)), style="yellow", markup=False, highlight=False, soft_wrap=True
        )
        return EXIT_TERMINATED if isinstance(exc, stop.Terminated) else EXIT_INTERRUPTED


def _resume(protocol: Protocol | None, run: Run | None) -> str | None:
    """The command that continues ``run``, once its directory exists; ``None`` before."""
    if protocol is None or run is None or not run.run_dir.is_dir():
        return None
    from dyneval.runtime.runner import resume_command  # LangGraph's checkpointers load with a run, not with --help

    return resume_command(protocol, run)


def _verdict(summary: dict[str, Any], thresholds: list[Threshold], protocol: str, resume: str, console: Console) -> int:
    """The exit code of a run that ended, said in a line: a missed ``--fail-under`` threshold first (the
    question a CI job asks), then units that did not finish ok (named by status, with the resume command)."""
    misses = [line for t in thresholds for line in t.misses(summary, protocol)]
    failed = unfinished_units(summary)
    if failed:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(failed.items()))
        retried = sum(n for status, n in failed.items() if status not in FINAL_STATUSES)
        again = f"; {resume} retries {retried} of them" if retried else " (final: resume does not retry them)"
        console.print(
            f"{sum(failed.values())} of {summary.get('units', '?')} units did not finish ok ({counts}); "
            f"each reason is in the report{again}",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for line in misses:
        console.print(f"--fail-under: {line}", style="red", markup=False, highlight=False, soft_wrap=True)
    if misses:
        return EXIT_BELOW_THRESHOLD
    return EXIT_UNITS_FAILED if failed else EXIT_OK
