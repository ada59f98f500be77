"""Config precedence, role defaults, model references, secret masking, bad config files."""

from __future__ import annotations

import pytest

from runtime.config_loader import load_config
from runtime.errors import InputError
from state.config import RunConfig


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_flags_beat_env_beat_file_beat_defaults(tmp_path):
    cfg_file = _write(tmp_path, "c.toml", """
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
""")
    env = {"DYNEVAL_EVALUATOR": "fileB", "DYNEVAL_SEED": "11"}
    cfg = load_config("toy", config_file=cfg_file, environ=env,
                      flags={"roles": {"target": "local"}, "concurrency": None, "params": {}})
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


@pytest.mark.parametrize("text, needle", [
    ("roles = [1", "not valid TOML"),
    ("[roles]\nboss = 'local'\n", "unknown role"),
    ("[roles]\ntarget = 'nonsense'\n", "unknown model 'nonsense'"),
    ("[models.m]\nbase_url = 'http://x'\n", "needs `model`"),
    ("[models.m]\nmodel = 'x'\ntemperature = 9\n", "models.m.temperature"),
    ("concurrency = 0\n", "concurrency"),
])
def test_bad_config_is_one_input_error_naming_the_file_and_field(tmp_path, text, needle):
    path = _write(tmp_path, "bad.toml", text)
    with pytest.raises(InputError) as err:
        load_config("toy", config_file=path, environ={}, flags={})
    message = str(err.value)
    assert "bad.toml" in message and needle in message and "\n" not in message


def test_unreadable_config_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read config file"):
        load_config("toy", config_file=str(tmp_path / "missing.toml"), environ={}, flags={})


def test_masked_config_hides_dsn_password_and_never_holds_keys():
    cfg = RunConfig(protocol="x", stores={"postgres_dsn": "postgresql://bob:s3cret@db:5432/ev"},
                    models={"m": {"model": "gpt", "base_url": "https://api.example/v1", "api_key_env": "MY_KEY"}},
                    roles={"target": "m"})
    dumped = str(cfg.masked())
    assert "s3cret" not in dumped and "bob:***@db:5432" in dumped
    assert "MY_KEY" in dumped
