"""Batch runs of the dynamic evaluation protocols.

    python run.py --protocol atad [options]

Every option is listed by ``python run.py --help``. Bad input exits with code 2
and one line naming the file, record and field.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import threading
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# The collector's youngest generation is collected every 20000 allocations, not 700: importing LangChain, LangGraph
# and the OpenAI types makes ~400 collections (0.2 s of a 1.4 s start-up), and a unit's call makes thousands of
# short-lived objects (runtime.runner freezes the start-up heap while units run). Garbage is still collected.
gc.set_threshold(20000, 20, 20)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from rich.console import Console  # noqa: E402
from rich.text import Text  # noqa: E402

from protocols import REGISTRY, available, protocol_class  # noqa: E402
from runtime.config_loader import ParamSchema, check_resume_unchanged, load_config, read_config_file  # noqa: E402
from runtime import stop  # noqa: E402
from runtime.rescore import check_rescore, source_dir  # noqa: E402
from runtime.protocol import Protocol, Run  # noqa: E402
from runtime.stop import RunInterrupted  # noqa: E402
from state.config import ROLES, RunConfig  # noqa: E402
from state.errors import InputError  # noqa: E402


#: Exit code of a run its budget (--max-calls, --max-tokens, --max-cost) stopped; 130 = Ctrl-C, 2 = bad input.
EXIT_BUDGET = 3


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


def _common_parser(**kwargs: Any) -> argparse.ArgumentParser:
    """The options every protocol shares."""
    parser = _Parser(
        prog="run.py",
        description="Evaluate LLMs with dynamic protocols (JudgeAgent, ATAD, LLM-as-an-Interviewer, LLMEval-3). "
                    "Without --protocol, 'run.py --compare RUN_A RUN_B ... [--out DIR]' writes one page comparing "
                    "finished runs of one protocol (run ids under --out, or run folders).",
        formatter_class=_HelpFormatter, **kwargs,
    )
    parser.add_argument("--protocol", required=True, help=f"one of: {', '.join(REGISTRY)}")
    parser.add_argument("--config", help="TOML or YAML config file (models, roles, stores, params)")
    roles = parser.add_argument_group("models per role (local | NAME from the config | MODEL@BASE_URL)")
    for role in ROLES:
        roles.add_argument(f"--{role}", help=f"model for the {role} role")
    run = parser.add_argument_group("run")
    run.add_argument("--limit", type=int, help="process at most this many units")
    default = {name: f.default for name, f in RunConfig.model_fields.items()}
    run.add_argument("--concurrency", type=int, help=f"units in flight at once (default {default['concurrency']})")
    run.add_argument("--seed", type=int, help=f"seed for every random choice (default {default['seed']})")
    run.add_argument("--max-calls", type=int, metavar="N", help="budget: start no request once the run sent N "
                     f"(then stop like Ctrl-C: partial report, exit code {EXIT_BUDGET}, resumable with a higher "
                     "budget)")
    run.add_argument("--max-tokens", type=int, metavar="N", help="budget: start no request once the run's requests "
                     "used N prompt + completion tokens (as --max-calls)")
    run.add_argument("--max-cost", type=float, metavar="USD", help="budget: start no request once the run's requests "
                     "cost USD, priced by --pricing (as --max-calls; refused if a model has no price)")
    run.add_argument("--max-tokens-per-role", metavar="ROLE=N,...", help="budget per role (as logged, e.g. "
                     "evaluator=100000): stop as --max-tokens once one role's requests used N tokens")
    run.add_argument("--max-cost-per-role", metavar="ROLE=USD,...", help="budget per role in USD (as --max-cost)")
    run.add_argument("--out", help=f"folder holding run directories (default {default['out']})")
    run.add_argument("--resume", metavar="RUN_ID", help="continue the run in OUT/RUN_ID, skipping finished units")
    run.add_argument("--rescore", metavar="RUN_ID", help="a new run that re-judges run OUT/RUN_ID with the judging "
                     "role(s) given (e.g. --evaluator), replaying every other role's recorded replies (no target "
                     "call); a unit the new verdicts lead elsewhere ends 'diverged'")
    run.add_argument("--dry-run", action="store_true", help="print the plan (units, models, calls) and exit")
    run.add_argument("--skip-preflight", action="store_true", help="do not ping each endpoint before the run")
    stores = parser.add_argument_group("stores")
    stores.add_argument("--chroma-url", help="Chroma server URL (default: on-disk PersistentClient)")
    stores.add_argument("--postgres-dsn", help="PostgreSQL DSN for checkpoints (default: SQLite in the run dir)")
    stores.add_argument("--embedding-model", help="sentence-transformers model name or path, or MODEL@BASE_URL (an "
                        "OpenAI-compatible embeddings endpoint)")
    stores.add_argument("--cache", action=argparse.BooleanOptionalAction, default=None,
                        help="reuse the accepted reply of an identical request from earlier runs (default: off)")
    stores.add_argument("--cache-dir", help="response cache folder (default ~/.cache/dyneval)")
    stores.add_argument("--cache-expiry-hours", type=float, help="ignore cached replies older than this")
    stores.add_argument("--pricing", metavar="FILE", help="YAML of USD per million input/output tokens per model "
                        "(default: the shipped example prices, runtime/pricing.yaml)")
    return parser


def _protocol_group(parser: argparse.ArgumentParser, name: str, cls: type) -> list[str]:
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
            parser = _common_parser()
            return parser, _protocol_group(parser, protocol, cls)
    sections = []
    for name, cls in available().items():
        sub = argparse.ArgumentParser(prog=f"run.py --protocol {name}", add_help=False, usage=argparse.SUPPRESS,
                                      formatter_class=_HelpFormatter)
        _protocol_group(sub, name, cls)
        sections.append(sub.format_help().strip())
    return _common_parser(epilog="\n\n".join(sections)), []


def _chosen_protocol(argv: list[str] | None) -> str | None:
    """``--protocol`` read ahead of the full parse (its options depend on it)."""
    pre = _Parser(add_help=False)
    pre.add_argument("--protocol")
    return pre.parse_known_args(argv)[0].protocol


def _compare(argv: list[str] | None, console: Console) -> bool:
    """``--compare RUN ...`` (with ``--out``, without ``--protocol``): write the comparison page of finished runs;
    False when not asked for. With ``--protocol`` a ``--compare`` is that protocol's own option (llmeval's)."""
    pre = _Parser(add_help=False)
    pre.add_argument("--compare", nargs="+")
    pre.add_argument("--protocol")
    pre.add_argument("--out", default=RunConfig.model_fields["out"].default)
    args, rest = pre.parse_known_args(argv)
    if args.compare is None or args.protocol is not None:
        return False
    if rest:
        raise InputError(f"--compare takes run ids and --out only, not {' '.join(rest)}", setting="--compare")
    from runtime.view import write_compare  # loaded only when a comparison is asked for

    console.print(f"comparison: {write_compare(args.compare, args.out)}", markup=False, highlight=False,
                  soft_wrap=True)
    return True


def flags_from_args(args: argparse.Namespace, protocol_dests: list[str]) -> dict[str, Any]:
    return {
        "roles": {r: getattr(args, r) for r in ROLES if getattr(args, r)},
        "limit": args.limit,
        "concurrency": args.concurrency,
        "seed": args.seed,
        "max_calls": args.max_calls,
        "max_tokens": args.max_tokens,
        "max_cost": args.max_cost,
        "max_tokens_per_role": args.max_tokens_per_role,
        "max_cost_per_role": args.max_cost_per_role,
        "out": args.out,
        "stores": {"chroma_url": args.chroma_url, "postgres_dsn": args.postgres_dsn,
                   "embedding_model": args.embedding_model, "cache": args.cache, "cache_dir": args.cache_dir,
                   "cache_expiry_hours": args.cache_expiry_hours, "pricing": args.pricing},
        "params": {d: getattr(args, d) for d in protocol_dests if getattr(args, d) is not None},
    }


def start(args: argparse.Namespace, dests: list[str], console: Console) -> tuple[Protocol, RunConfig, Run]:
    """The protocol, configuration and run that parsed options ask for: a new run, a ``--resume`` of one (its
    settings unchanged) or a ``--rescore`` of one (another judge). ``InputError`` names where a bad value came from."""
    cls = protocol_class(args.protocol)
    flags = flags_from_args(args, dests)
    config_file = args.config
    if args.resume and args.rescore:
        raise InputError("--rescore makes a new run: it cannot --resume one (a re-score interrupted is "
                         "resumed by its own run id alone)", field="--rescore")
    if args.resume or args.rescore:
        out = (args.out or (read_config_file(args.config).get("out") if args.config else None)
               or RunConfig.model_fields["out"].default)
        if args.rescore:
            config_file = str(source_dir(cls, out, args.rescore) / "config.json")
            flags["rescored_from"] = args.rescore
        else:
            config_file = os.path.join(out, args.resume, "config.json")
        if not os.path.exists(config_file):
            raise InputError(f"no run {args.resume!r} under {out}", field="--resume")
    config = load_config(args.protocol, config_file=config_file, flags=flags, params=ParamSchema.of(cls))
    try:
        if args.resume or args.rescore:
            stored = RunConfig.model_validate_json(Path(config_file).read_text(encoding="utf-8"))
            if args.rescore:
                check_rescore(cls, stored, config)
            else:
                check_resume_unchanged(stored, config, ParamSchema.of(cls))
        from runtime.runner import open_run  # LangGraph's checkpointers load with a run, not with --help

        protocol = cls()
        return protocol, config, open_run(protocol, config, run_id=args.resume, console=console)
    except InputError as exc:
        raise exc.blamed(config.sources) from None


@dataclass(frozen=True)
class RunResult:
    """What :func:`evaluate` returns: the run's folder, its summary (``summary.json``) and its unit records
    (``results.jsonl``, one per unit in plan order)."""

    run_dir: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def metrics(self) -> dict[str, Any]:
        """The protocol's metrics (``summary["metrics"]``; a mode without units, such as llmeval's
        ``leaderboard=True``, has its figures in ``summary`` itself)."""
        return self.summary.get("metrics", {})

    @property
    def stopped(self) -> dict[str, Any] | None:
        """Why the run stopped before its end (``budget``: what was spent) and how to resume it; ``None`` if it
        ended."""
        return self.summary.get("interrupted")

    @classmethod
    def read(cls, run_dir: Path) -> RunResult:
        """The results in ``run_dir`` (no records for a mode without units)."""
        from runtime.view.data import latest_records, read_json

        return cls(run_dir, read_json(run_dir / "summary.json"), latest_records(run_dir))


def evaluate(protocol: str, *, quiet: bool = True, **options: Any) -> RunResult:
    """Run ``protocol`` from Python, as ``run.py --protocol PROTOCOL`` with the same options, and return its results.

    ``options`` are the command-line options by their Python names: the roles (``target=``, ``evaluator=`` ...,
    each ``local``, a config name or ``MODEL@BASE_URL``), ``config=``, ``out=``, ``limit=``, ``concurrency=``,
    ``seed=``, ``max_calls=``, ``max_tokens=``, ``max_cost=``, ``max_tokens_per_role="evaluator=1000"``,
    ``pricing=``, ``cache=``, ``resume=RUN_ID``, ``rescore=RUN_ID``, ``skip_preflight=`` ..., and the protocol's own
    parameters (``repeats=2``, ``data="seeds.jsonl"``). Bad input raises ``state.errors.InputError`` before anything
    is spent; a run its budget stopped is returned (``result.stopped``); Ctrl-C raises ``KeyboardInterrupt`` after
    the partial report. ``quiet=False`` prints the progress and summary as the command line does.
    """
    parser, dests = build_parser(protocol)
    known = {k: v for k, v in vars(parser.parse_args(["--protocol", protocol])).items()
             if k not in ("protocol", "dry_run")}  # every option by name, with its "not given" default
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(unknown)} of {protocol}; options: {', '.join(sorted(known))}")
    lists = {o.name for o in protocol_class(protocol).options() if typing.get_origin(o.type) is list}
    options = {k: [v] if k in lists and isinstance(v, str) else v for k, v in options.items()}  # one file: a list
    args = argparse.Namespace(**{**known, **options, "protocol": protocol, "dry_run": False})
    chosen, _, run = start(args, dests, Console(quiet=quiet))
    from runtime.runner import execute

    try:
        execute(chosen, run, skip_preflight=args.skip_preflight)
    except RunInterrupted as exc:
        if not exc.budget:
            raise
    return RunResult.read(run.run_dir)


def main(argv: list[str] | None = None) -> int:
    console = Console()
    errors = Console(stderr=True)
    config = run = None
    try:
        if _compare(argv, console):
            return 0
        parser, dests = build_parser(_chosen_protocol(argv))
        args = parser.parse_args(argv)
        protocol, config, run = start(args, dests, console)
        from runtime.runner import execute

        execute(protocol, run, dry_run=args.dry_run, skip_preflight=args.skip_preflight)
    except InputError as exc:
        errors.print(Text.assemble(("error:", "red"), f" {exc.blamed(config.sources) if config else exc}"),
                     highlight=False, soft_wrap=True)
        return 2
    except RunInterrupted as exc:
        console.print(f"{exc}; the partial report is in {run.run_dir}", style="yellow",
                      markup=False, highlight=False, soft_wrap=True)
        more = " with a higher --max-calls / --max-tokens / --max-cost" if exc.budget else ""
        console.print(f"resume{more} with: {exc.resume}", markup=False, highlight=False, soft_wrap=True)
        code = EXIT_BUDGET if exc.budget else 130
        if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
            stop.exit_now(code)  # a request still in flight must not hold the exit up
        return code
    except KeyboardInterrupt:
        from runtime.runner import resume_command

        resumable = run is not None and run.run_dir.is_dir()
        console.print("interrupted" + (f"; resume with: {resume_command(protocol, run)}" if resumable else
                                       " before the run started"), style="yellow", markup=False, highlight=False,
                      soft_wrap=True)
        return 130
    return 0


if __name__ == "__main__":
    code = main()
    gc.freeze()  # exit without the final collections' walk over every library object (1-2 s of a run's end)
    sys.exit(code)
