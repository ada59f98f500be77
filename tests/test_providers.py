"""Models by provider name: ``anthropic/MODEL``, ``gemini/MODEL``, ``ollama/MODEL`` resolve to their LangChain
integration through ``init_chat_model``; ``openai-api/PROVIDER/MODEL`` to an OpenAI-compatible provider; a provider
whose extra is missing is refused in one line naming the extra. Anthropic's Messages API, Gemini's generateContent
and Ollama's chat API are exercised end to end against loopback stand-ins (:mod:`tests.provider_standins`):
structured output, retries, the response cache, pricing and a budget."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from dyneval.runtime.models import build_chat_model, model_label
from dyneval.state.config import parse_model_ref
from tests.provider_standins import provider_standin
from tests.run_files import unit_records
from tests.standin_endpoint import Faults, StandIn


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch):
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_BASE_URL",
        "GOOGLE_GEMINI_BASE_URL",
        "OLLAMA_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue()


def test_each_provider_name_resolves_to_its_integration(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    chat = build_chat_model(parse_model_ref("anthropic/claude-sonnet-4-0", {}))
    assert type(chat).__name__ == "ChatAnthropic" and chat.model == "claude-sonnet-4-0"
    assert (chat.max_retries, chat.max_tokens) == (0, 512)  # our call layer retries; the spec's reply limit
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://127.0.0.1:11434")
    spec = parse_model_ref("ollama/llama3.2", {})
    chat = build_chat_model(spec)
    assert type(chat).__name__ == "ChatOllama" and (chat.model, chat.base_url, chat.num_predict) == (
        "llama3.2",
        "http://127.0.0.1:11434",
        512,
    )
    assert model_label(spec) == "ollama/llama3.2@http://127.0.0.1:11434"
    gemini = parse_model_ref("gemini/gemini-2.5-flash", {})
    assert (gemini.provider, gemini.model, gemini.api_key_env) == ("google_genai", "gemini-2.5-flash", "GOOGLE_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    chat = build_chat_model(gemini)
    assert type(chat).__name__ == "ChatGoogleGenerativeAI" and (chat.max_retries, chat.max_output_tokens) == (1, 512)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")  # google-genai's own variable
    assert model_label(parse_model_ref("gemini/g", {})) == "google_genai/g@http://127.0.0.1:9"
    monkeypatch.setenv("GOOGLE_BASE_URL", "http://127.0.0.1:8")  # inspect_ai's name wins
    assert model_label(parse_model_ref("gemini/g", {})) == "google_genai/g@http://127.0.0.1:8"
    monkeypatch.setenv("TOGETHER_BASE_URL", "https://api.together.xyz/v1")
    together = parse_model_ref("openai-api/together/meta-llama/Llama-3.3-70B", {})
    assert (together.provider, together.model, together.base_url, together.api_key_env) == (
        "openai",
        "meta-llama/Llama-3.3-70B",
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
    )


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("openai-api/groq/llama-3", "needs GROQ_BASE_URL"),
        ("anthropic/", "MODEL is empty"),
        ("anthropic/claude-sonnet-4-0", "environment variable ANTHROPIC_API_KEY"),
    ],
)
def test_a_provider_name_without_what_it_needs_is_refused_in_one_line(tmp_path, ref, said):
    code, err = _cli(["--protocol", "interview", "--target", ref, "--out", str(tmp_path / "runs")])
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("package", "ref", "extra"),
    [
        ("langchain_anthropic", "anthropic/claude-sonnet-4-0", "anthropic"),
        ("langchain_google_genai", "gemini/g", "google"),
    ],
)
def test_a_missing_extra_exits_2_naming_it(tmp_path, monkeypatch, package, ref, extra):
    real = importlib.util.find_spec

    def without(name: str, *args: Any) -> Any:
        return None if name == package else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    code, err = _cli(["--protocol", "interview", "--evaluator", ref, "--out", str(tmp_path / "runs")])
    assert code == 2, err
    assert f"needs the [{extra}] extra" in err and f"pip install 'dyneval[{extra}]'" in err and "--evaluator" in err
    assert not (tmp_path / "runs").exists()


def _run(out: Path, *extra: str) -> tuple[int, str, Path | None]:
    before = set(out.iterdir()) if out.exists() else set()
    argv = ["--protocol", "interview", "--limit", "2", "--max-questions", "2", "--skip-preflight", "--out", str(out)]
    code, err = _cli([*argv, *extra])
    made = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")] if out.exists() else []
    return code, err, made[0] if made else None


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _anthropic_structured(body: dict[str, Any]) -> bool:
    return bool(body.get("tools")) and body["tool_choice"]["type"] in ("tool", "any")


def _gemini_structured(body: dict[str, Any]) -> bool:
    return bool(body.get("tools")) and body["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"


#: Per wire format: the provider prefix, the environment variable that points the client at the stand-in (Gemini:
#: the google-genai SDK's own), the provider's label in the event log, "a request forced to call the schema's tool"
#: and the reply's token limit as the request carries it.
WIRES = {
    "anthropic": ("anthropic", "ANTHROPIC_BASE_URL", "anthropic", _anthropic_structured, lambda b: b["max_tokens"]),
    "gemini": (
        "gemini",
        "GOOGLE_GEMINI_BASE_URL",
        "google_genai",
        _gemini_structured,
        lambda b: b["generationConfig"]["maxOutputTokens"],
    ),
}


@pytest.mark.parametrize("api", sorted(WIRES))
def test_an_interview_run_on_a_providers_own_api_with_retries_cache_pricing_and_budget(tmp_path, monkeypatch, api):
    """Anthropic's Messages API and Gemini's generateContent (REST, as google-genai sends it) end to end."""
    prefix, url_env, provider, forced, reply_limit = WIRES[api]
    pricing = tmp_path / "prices.yaml"
    pricing.write_text("models:\n  model-t: {input: 3.0, output: 15.0}\n  model-j: {input: 1.0, output: 5.0}\n")
    roles = ["--target", f"{prefix}/model-t", "--evaluator", f"{prefix}/model-j", "--pricing", str(pricing)]
    cache = ["--cache", "--cache-dir", str(tmp_path / "cache")]
    with StandIn(faults=Faults(transient=0.2, seed=5)) as standin, provider_standin(standin) as (url, received):
        monkeypatch.setenv(url_env, url)
        code, err, run_dir = _run(tmp_path / "runs", *roles, *cache)
        assert code == 0 and run_dir is not None, err
        sent = len(received)
        standin.faults = Faults()
        again, err, second = _run(tmp_path / "runs", *roles, *cache)
        assert again == 0 and second is not None, err
        assert len(received) == sent  # every reply came from the cache
        code, err, budget = _run(tmp_path / "runs", *roles, "--max-calls", "3")
    assert code == 3, err  # the budget stops the run (exit 3), resumable
    assert {r["api"] for r in received} == {api}
    bodies = [r["body"] for r in received]
    assert {b["model"] for b in bodies} == {"model-t", "model-j"}
    assert any(forced(b) for b in bodies)  # structured output as a forced tool call
    assert {reply_limit(b) for b in bodies} == {512}
    assert [r["status"] for r in unit_records(run_dir).values()] == ["ok", "ok"], unit_records(run_dir)
    events = _events(run_dir)
    failed = [e for e in events if e["error"]]
    # each injected 429/5xx reached the call layer once (the client's own retries are off) and was retried there
    assert failed and len(failed) == sum(
        1 for r in standin.requests if r.status != 200 and r.model in {"model-t", "model-j"}
    )
    assert any(e["attempt"] > 1 for e in events)
    assert {e["model"] for e in events} == {f"{provider}/model-t@{url}", f"{provider}/model-j@{url}"}
    usage = json.loads((run_dir / "summary.json").read_text())["usage"]
    ok = [e for e in events if not e["error"]]
    priced = {"model-t": (3.0, 15.0), "model-j": (1.0, 5.0)}
    want = sum(
        e["prompt_tokens"] * priced[e["model"].split("@")[0].split("/")[1]][0]
        + e["completion_tokens"] * priced[e["model"].split("@")[0].split("/")[1]][1]
        for e in ok
    )
    assert usage["cost_usd"] == pytest.approx(want / 1_000_000, rel=1e-3) and usage["cost_usd"] > 0
    assert unit_records(second) == unit_records(run_dir)
    assert all(e["cached"] for e in _events(second))


def test_an_interview_run_on_ollamas_chat_api(tmp_path, monkeypatch):
    with StandIn() as standin, provider_standin(standin) as (url, received):
        monkeypatch.setenv("OLLAMA_BASE_URL", url)
        code, err, run_dir = _run(tmp_path / "runs", "--target", "ollama/qwen3", "--evaluator", "ollama/llama3.2")
    assert code == 0 and run_dir is not None, err
    assert {r["api"] for r in received} == {"ollama"}
    bodies = [r["body"] for r in received]
    assert {b["model"] for b in bodies} == {"qwen3", "llama3.2"}
    assert any(b.get("tools") for b in bodies) and all(b["options"]["num_predict"] == 512 for b in bodies)
    assert [r["status"] for r in unit_records(run_dir).values()] == ["ok", "ok"], unit_records(run_dir)
