"""Config precedence, role defaults, model references, secret masking, bad config files."""

from __future__ import annotations

import pytest

from dyneval.runtime.config_loader import load_config
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from tests.golden_runs import REPO


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_flags_beat_env_beat_file_beat_defaults(tmp_path):
    cfg_file = _write(
        tmp_path,
        "c.toml",
        """
concurrency = 3
seed = 7
[roles]
target = "fileA"
evaluator = "fileA"
[models.fileA]
model = "m-a"
base_url = "http://127.0.0.1:9000/v1"
[models.fileB]
model = "m-b"
base_url = "http://127.0.0.1:9001/v1"
""",
    )
    env = {"DYNEVAL_EVALUATOR": "fileB", "DYNEVAL_SEED": "11"}
    cfg = load_config(
        "toy",
        config_file=cfg_file,
        environ=env,
        flags={"roles": {"target": "local"}, "concurrency": None, "params": {}},
    )
    assert cfg.role_ref("target") == "local"  # flag beats file
    assert cfg.role_ref("evaluator") == "fileB"  # env beats file
    assert cfg.seed == 11  # env beats file
    assert cfg.concurrency == 3  # file beats default; an unset flag (None) does not erase it
    assert cfg.spec_for("evaluator").model == "m-b"


def test_yaml_config_is_read_like_toml(tmp_path):
    cfg_file = _write(tmp_path, "c.yaml", "roles:\n  target: gpt@http://127.0.0.1:1234/v1\nlimit: 4\n")
    cfg = load_config("toy", config_file=cfg_file, environ={}, flags={})
    assert cfg.limit == 4
    spec = cfg.spec_for("target")
    assert (spec.model, spec.base_url, spec.api_key_env) == ("gpt", "http://127.0.0.1:1234/v1", "OPENAI_API_KEY")


def test_role_defaults_chain_student_to_target_and_judges_to_evaluator():
    cfg = RunConfig(protocol="x", roles={"target": "a@http://h/v1", "evaluator": "b@http://h/v1"})
    assert cfg.spec_for("student").model == "a"
    assert {cfg.spec_for(r).model for r in ("teacher", "orchestrator", "grader")} == {"b"}
    assert cfg.embedded_judges() == []
    assert RunConfig(protocol="x").embedded_judges() == ["evaluator", "teacher", "orchestrator", "grader"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("seed = 1\nroles = [1 2]\n", "bad.toml: not valid TOML: Unclosed array (at line 2, column 12)"),
        ("[roles]\nboss = 'local'\n", "bad.toml: [roles] boss: unknown role 'boss'"),
        ("[roles]\ntarget = 'nonsense'\n", "bad.toml: [roles] target: unknown model 'nonsense'"),
        ("[models.m]\nbase_url = 'http://x'\n", "bad.toml: [models.m]: an openai-compatible spec needs `model`"),
        ("[models.m]\nmodel = 'x'\ntemperature = 9\n", "bad.toml: [models.m] temperature: Input should be less"),
        (
            "[models.m]\nmodel = 'x'\ntemprature = 0.5\n",
            "[models.m] temprature: unknown key; did you mean 'temperature'?",
        ),
        ("concurrency = 0\n", "bad.toml: concurrency: Input should be greater than or equal to 1 (got 0)"),
    ],
)
def test_bad_config_is_one_input_error_naming_the_file_and_key(tmp_path, text, needle):
    path = _write(tmp_path, "bad.toml", text)
    with pytest.raises(InputError) as err:
        load_config("toy", config_file=path, environ={}, flags={})
    message = str(err.value)
    assert needle in message and "\n" not in message


@pytest.mark.parametrize("source", ["file", "env", "flag"])
def test_a_bad_value_is_blamed_on_the_source_it_came_from(tmp_path, source):
    """The same bad value from the file, an env var or a flag names that source, and only that one."""
    path = _write(tmp_path, "c.toml", "concurrency = 0\n" if source == "file" else "seed = 1\n")
    with pytest.raises(InputError) as err:
        load_config(
            "toy",
            config_file=path,
            environ={"DYNEVAL_CONCURRENCY": "0"} if source == "env" else {},
            flags={"concurrency": 0} if source == "flag" else {},
        )
    blame = {"file": f"{path}: concurrency", "env": "DYNEVAL_CONCURRENCY", "flag": "--concurrency"}[source]
    assert str(err.value).startswith(blame + ": ")


def test_yaml_syntax_error_and_duplicate_key_name_the_line(tmp_path):
    with pytest.raises(InputError, match=r"c.yaml: not valid YAML: .* \(line 2, column 4\)"):
        load_config("toy", config_file=_write(tmp_path, "c.yaml", "a: 1\n  b: 2\n"), environ={}, flags={})
    with pytest.raises(InputError, match=r"d.yaml: not valid YAML: duplicate key 'seed' \(line 2, column 1\)"):
        load_config("toy", config_file=_write(tmp_path, "d.yaml", "seed: 1\nseed: 2\n"), environ={}, flags={})


def test_params_from_the_file_are_typed_like_their_flags_and_typos_rejected(tmp_path):
    from dyneval.protocols import protocol_class
    from dyneval.runtime.config_loader import ParamSchema

    schema = ParamSchema.of(protocol_class("atad"))
    good = _write(
        tmp_path,
        "good.toml",
        "[params]\nper_task = '3'\nno_orchestrator = true\ntasks = 'T1'\nlenient_escalation = false\n",
    )
    cfg = load_config("atad", config_file=good, environ={}, flags={}, params=schema)
    assert cfg.params == {"per_task": 3, "no_orchestrator": True, "tasks": "T1", "lenient_escalation": False}
    for text, needle in [
        ("per_tsk = 3", "[params] per_tsk: unknown parameter of atad; did you mean 'per_task'?"),
        ("per_task = 'ten'", "[params] per_task: Input should be a valid integer"),
        ("benchmark = 'b.jsonl'", "[params] benchmark: Input should be a valid list"),
        ("seed = 3", "[params] seed: unknown parameter"),
    ]:
        bad = _write(tmp_path, "bad.toml", "[params]\n" + text + "\n")
        with pytest.raises(InputError) as err:
            load_config("atad", config_file=bad, environ={}, flags={}, params=schema)
        assert needle in str(err.value)


def test_protocol_errors_named_by_flag_are_reblamed_on_the_file_key_or_env_var(tmp_path):
    path = _write(tmp_path, "c.toml", "[params]\nper_task = 0\n")
    cfg = load_config("toy", config_file=path, environ={"DYNEVAL_LIMIT": "4"}, flags={"seed": 3})
    assert (
        str(InputError("must be at least 1", field="--per-task").blamed(cfg.sources))
        == f"{path}: [params] per_task: must be at least 1"
    )
    assert str(InputError("too many", field="--limit").blamed(cfg.sources)) == "DYNEVAL_LIMIT: too many"
    assert str(InputError("odd", field="--seed").blamed(cfg.sources)) == "field '--seed': odd"  # really a flag


def test_config_naming_another_protocol_is_rejected(tmp_path):
    with pytest.raises(InputError, match="c.toml: protocol: is 'atad', but --protocol is 'toy'"):
        load_config("toy", config_file=_write(tmp_path, "c.toml", "protocol = 'atad'\n"), environ={}, flags={})


def test_missing_api_key_is_blamed_on_the_setting_that_asks_for_it(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(InputError, match="^--target: environment variable OPENAI_API_KEY .* is not set"):
        load_config("toy", config_file=None, environ={}, flags={"roles": {"target": "gpt@https://api.example/v1"}})
    path = _write(
        tmp_path,
        "c.toml",
        "[roles]\nevaluator = 'g'\n[models.g]\nmodel = 'g'\n"
        "base_url = 'https://api.example/v1'\napi_key_env = 'MY_KEY'\n",
    )
    with pytest.raises(InputError, match=r"c.toml: \[models.g\] api_key_env: environment variable MY_KEY"):
        load_config("toy", config_file=path, environ={}, flags={})


def test_studio_context_names_the_env_var_with_a_bad_value(monkeypatch):
    from dyneval.state.context import BaseContext

    monkeypatch.setenv("DYNEVAL_SEED", "abc")
    with pytest.raises(InputError, match="^DYNEVAL_SEED: 'abc' is not a valid int$"):
        BaseContext()


def test_unreadable_config_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read config file"):
        load_config("toy", config_file=str(tmp_path / "missing.toml"), environ={}, flags={})


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://bob:s3cret@db:5432/ev",
        "host=db port=5432 user=bob password=s3cret dbname=ev",
        "postgresql://bob@db:5432/ev?password=s3cret",
    ],
)
def test_masked_config_drops_the_dsn_password_in_every_form_and_never_holds_keys(dsn):
    cfg = RunConfig(
        protocol="x",
        stores={"postgres_dsn": dsn, "chroma_url": "http://ann:s3cret@vectors:8000"},
        models={"m": {"model": "gpt", "base_url": "https://api.example/v1", "api_key_env": "MY_KEY"}},
        roles={"target": "m"},
    )
    masked = cfg.masked()
    assert "s3cret" not in str(masked) and "MY_KEY" in str(masked)
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(masked["stores"]["postgres_dsn"]) == {
        "host": "db",
        "port": "5432",
        "user": "bob",
        "dbname": "ev",
    }
    assert masked["stores"]["chroma_url"] == "http://ann@vectors:8000"


def test_openai_provider_names_resolve_to_openais_api_or_openai_base_url(monkeypatch):
    from dyneval.state.config import OPENAI_URL, parse_model_ref

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = parse_model_ref("openai/gpt-4o-mini", {})
    assert (spec.model, spec.base_url, spec.api_key_env) == ("gpt-4o-mini", OPENAI_URL, "OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert parse_model_ref("openai/gpt-4o-mini", {}).base_url == "http://127.0.0.1:8000/v1"
    with pytest.raises(ValueError, match="for OpenAI's API: openai/gpt-4o-mini"):
        parse_model_ref("gpt-4o-mini", {})  # a bare name is not guessed: the message says how to write it
    with pytest.raises(ValueError, match="MODEL is empty"):
        parse_model_ref("openai/", {})


def test_an_openai_model_is_priced_by_its_bare_name(tmp_path):
    from dyneval.runtime.models import model_label
    from dyneval.runtime.pricing import Pricing
    from dyneval.state.config import RunConfig, parse_model_ref

    pricing = Pricing.for_run(RunConfig(protocol="interview", out=str(tmp_path)))
    assert pricing.price(model_label(parse_model_ref("openai/gpt-4o-mini", {}))) is not None


def test_relative_file_settings_from_the_file_env_and_flags_become_absolute_and_model_names_stay(tmp_path, monkeypatch):
    """What the driver hands its threads, its Ray runners and ``config.json``: every file setting resolved against
    its working folder once, wherever it came from; an embedding model named, not a folder, is left as given."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine/interview").mkdir(parents=True)
    (tmp_path / "mine/interview/grader_math.yaml").write_bytes(
        (REPO / "prompts/interview/grader_math.yaml").read_bytes()
    )
    (tmp_path / "prices.yaml").write_text("models:\n  m: {input: 1.0, output: 2.0}\n")
    (tmp_path / "minilm").mkdir()
    (tmp_path / "eval.toml").write_text('[stores]\npricing = "prices.yaml"\n')
    env = {"DYNEVAL_PROMPTS": "mine", "DYNEVAL_EMBEDDING_MODEL": "minilm"}
    config = load_config("interview", config_file="eval.toml", flags={"stores": {"cache_dir": "c"}}, environ=env)
    stores = config.stores
    assert (config.prompts, stores.pricing) == (str(tmp_path / "mine"), str(tmp_path / "prices.yaml"))
    assert (stores.cache_dir, stores.embedding_model) == (str(tmp_path / "c"), str(tmp_path / "minilm"))
    assert config.out == "runs"  # shown to the user as given (the resume hint); Ray runners resolve it themselves
    named = load_config(
        "interview", config_file=None, flags={"stores": {"embedding_model": "m@http://h/v1"}}, environ={}
    )
    assert named.stores.embedding_model == "m@http://h/v1"
