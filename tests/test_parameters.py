"""One parameter source: every protocol's flags, help, defaults and checks come from its declared fields."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from dyneval.cli import build_parser, main
from dyneval.protocols import REGISTRY, protocol_class
from dyneval.runtime.config_loader import ParamSchema, load_config
from dyneval.runtime.protocol import Protocol
from dyneval.runtime.runner import open_run
from dyneval.state.config import RunConfig
from dyneval.state.context import BaseContext, options
from dyneval.state.errors import InputError

#: The batch-only flags (input files, modes, how units are planned): everything else is a graph option.
BATCH_ONLY = {
    "atad": {"per_task", "tasks", "problem_style", "challenge_prob", "evaluate", "benchmark", "fields", "review"},
    "judgeagent": {
        "data",
        "fields",
        "choices",
        "answer_form",
        "hf_dataset",
        "hf_split",
        "batch_size",
        "build_kb_only",
        "irt_runs",
        "irt_model",
        "irt_min_responses",
    },
    "interview": {"data", "fields", "hf_dataset", "hf_split", "task", "repeats", "bootstrap_resamples"},
    "llmeval": {
        "bank",
        "hf_dataset",
        "hf_split",
        "fields",
        "discipline",
        "answer_form",
        "skip_invalid",
        "augment",
        "rewrite",
        "near_dup_threshold",
        "import_only",
        "sessions",
        "serve",
        "port",
        "workers",
        "admin_token",
        "rate_limit",
        "leaderboard",
        "stability",
        "sizes",
        "trials",
        "kappa",
        "contamination",
        "export",
        "export_layout",
        "calibrate",
        "compare",
        "max_request_body",
        "max_request_headers",
    },
    "judgecheck": {
        "labels",
        "fields",
        "label_map",
        "skip_invalid",
        "skip_empty",
        "label_vote",
        "invalid_verdict",
        "bootstrap_resamples",
    },
}
#: Context fields Studio shows but the command line does not offer.
STUDIO_ONLY = {"llmeval": {"sample_if_empty"}}


def _flags(name: str) -> dict[str, object]:
    """The protocol's flags as ``run.py`` builds them: dest -> argparse action."""
    parser, _ = build_parser(name)
    group = next(g for g in parser._action_groups if g.title == f"{name} options")
    return {a.dest: a for a in group._group_actions}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_flags_are_exactly_the_declared_context_fields_and_the_documented_batch_options(name):
    cls = protocol_class(name)
    shared = {f.name for f in dataclasses.fields(BaseContext)}
    context_fields = {f.name for f in dataclasses.fields(cls.context_cls)} - shared
    batch_fields = {f.name for f in dataclasses.fields(cls.batch_cls)}
    assert batch_fields == BATCH_ONLY[name]
    assert set(_flags(name)) == (context_fields - STUDIO_ONLY.get(name, set())) | batch_fields
    assert cls.add_arguments.__func__ is Protocol.add_arguments.__func__  # no hand-written flag


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_flag_carries_its_fields_description_default_and_choices(name):
    flags = _flags(name)
    for option in protocol_class(name).options():
        if not option.cli:
            continue
        action = flags[option.name]
        assert action.option_strings[0] == option.flag
        assert action.help.startswith(option.description.replace("%", "%%"))
        assert action.default is None  # not given on the command line: the config file or the default holds
        assert (list(action.choices) if action.choices else None) == (list(option.choices) if option.choices else None)
        if option.type is not bool and option.default not in (None, ""):
            assert f"(default: {option.default}" in action.help
        if option.maximum is not None:  # a declared range is in the help, as the check states it
            assert f"{option.maximum:g}" in action.help.rsplit("(", 1)[-1], action.help


def test_help_lists_every_protocols_options_with_their_real_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in REGISTRY:
        assert f"{name} options" in out
        for option in protocol_class(name).options():
            if option.cli:
                assert option.flag in out
    assert "--per-task PER_TASK problems per task type (default: 10; 1 to 10000)" in out
    assert "(default: GRE)" in out and "--history-chars" in out


def _open(tmp_path, protocol: str, params: dict) -> object:
    config = RunConfig(protocol=protocol, out=str(tmp_path / "runs"), params=params)
    return open_run(protocol_class(protocol)(), config, run_id=None, console=Console(quiet=True))


def test_defaults_come_from_the_declaration_and_given_values_win(tmp_path):
    atad = protocol_class("atad")()
    defaults = atad.batch(_open(tmp_path, "atad", {}))
    assert (defaults.per_task, defaults.problem_style, defaults.challenge_prob) == (10, "GRE", 0.5)
    units = atad.plan(_open(tmp_path, "atad", {"tasks": "T1"}))
    assert len(units) == 10 and {u.input["style"] for u in units} == {"GRE"}
    given = atad.plan(_open(tmp_path, "atad", {"tasks": "T1", "per_task": 2, "problem_style": "SAT"}))
    assert len(given) == 2 and {u.input["style"] for u in given} == {"SAT"}
    ctx = protocol_class("interview")().context(_open(tmp_path, "interview", {"max_retries": 4}))
    assert (ctx.max_retries, ctx.max_questions) == (4, 2)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_declared_minimum_is_enforced_and_names_the_flag(tmp_path, name):
    proto = protocol_class(name)()
    bounded = [o for o in proto.options() if o.minimum is not None]
    assert bounded
    for option in bounded:
        proto.check_params({option.name: option.minimum})
        with pytest.raises(InputError, match=f"{option.flag}.*at least {option.minimum}|{option.flag}.*between"):
            proto.check_params({option.name: option.minimum - 1})


def test_flag_beats_config_and_a_bad_value_is_blamed_on_its_real_source(tmp_path):
    schema = ParamSchema.of(protocol_class("atad"))
    path = tmp_path / "c.toml"
    path.write_text("[params]\nper_task = 3\nchallenge_prob = 0.25\n")
    cfg = load_config("atad", config_file=str(path), environ={}, flags={"params": {"per_task": 5}}, params=schema)
    assert cfg.params == {"per_task": 5, "challenge_prob": 0.25}
    path.write_text("[params]\nchallenge_prob = 1.5\n")
    with pytest.raises(InputError, match=r"c.toml: \[params\] challenge_prob: must be between 0 and 1"):
        load_config("atad", config_file=str(path), environ={}, flags={}, params=schema)
    with pytest.raises(InputError, match=r"^--max-student-loops: must be between 1 and 50 \(got 0\)"):
        load_config("atad", config_file=None, environ={}, flags={"params": {"max_student_loops": 0}}, params=schema)
    with pytest.raises(InputError, match=r"^--tasks: unknown task\(s\) \['T9'\]"):
        load_config("atad", config_file=None, environ={}, flags={"params": {"tasks": "T1,T9"}}, params=schema)


def test_a_studio_only_field_has_no_flag_but_is_accepted_in_params(tmp_path):
    llmeval = protocol_class("llmeval")
    assert "sample_if_empty" not in _flags("llmeval")
    path = tmp_path / "c.toml"
    path.write_text("[params]\nsample_if_empty = false\n")
    cfg = load_config("llmeval", config_file=str(path), environ={}, flags={}, params=ParamSchema.of(llmeval))
    assert cfg.params == {"sample_if_empty": False}


def test_booleans_that_default_on_or_are_declared_negatable_get_a_no_flag():
    flags = _flags("interview")
    assert flags["modify"].option_strings == ["--modify", "--no-modify"]
    assert flags["retry_followups"].option_strings == ["--retry-followups", "--no-retry-followups"]
    assert _flags("atad")["no_orchestrator"].option_strings == ["--no-orchestrator"]
    parser, dests = build_parser("interview")
    args = parser.parse_args(["--protocol", "interview", "--no-modify"])
    assert args.modify is False and args.followups is None  # not given: the config or the default decides


def test_options_read_the_declaration_in_order_without_the_shared_fields():
    names = [o.name for o in options(protocol_class("atad").context_cls)]
    assert names == [
        "max_init_loops",
        "max_student_loops",
        "max_level_attempts",
        "difficulty_ladder",
        "lenient_escalation",
        "no_orchestrator",
    ]
    fixed = next(o for o in options(protocol_class("judgeagent").context_cls) if o.name == "fixed_difficulty")
    assert fixed.choices == ("easy", "medium", "hard")  # from the field's Literal type
