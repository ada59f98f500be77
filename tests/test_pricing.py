"""Money (issue 15): every exchange priced from its model and tokens, summed per run and role, shown where tokens
are; a model without a price is unknown, never 0; ``--max-cost`` stops a run as the other budgets do; failed
attempts per role in the report. Against the stand-in endpoint, which reports 20 prompt + 5 completion tokens per
reply, so costs are computed by hand below.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.run_files import unit_records
from tests.standin_endpoint import Faults, StandIn

#: USD per million tokens of the stand-in's two models: a target reply costs (20*1 + 5*4) / 1e6 = 40e-6 USD,
#: an evaluator reply (20*2 + 5*10) / 1e6 = 90e-6 USD.
PRICES = "models:\n  target: {input: 1.0, output: 4.0}\n  evaluator: {input: 2.0, output: 10.0}\n"
PER_REPLY = {"target": 40e-6, "evaluator": 90e-6}
CONCURRENCY = 2


def _pricing(tmp_path: Path, text: str = PRICES) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _interview(out: Path, standin: StandIn, *extra: str) -> tuple[int, Path | None]:
    from dyneval import cli as run

    before = set(out.iterdir()) if out.exists() else set()
    code = run.main(
        [
            "--protocol",
            "interview",
            "--limit",
            "3",
            "--out",
            str(out),
            "--skip-preflight",
            "--concurrency",
            str(CONCURRENCY),
            "--target",
            standin.spec("target"),
            "--evaluator",
            standin.spec("evaluator"),
            *extra,
        ]
    )
    made = [p for p in set(out.iterdir()) - before if p.is_dir() and not p.name.startswith("_")] if out.exists() else []
    return code, (made[0] if made else None)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_runs_cost_is_each_reply_priced_by_its_model_summed_per_role_and_shown_in_console_and_report(
    tmp_path, capsys
):
    with StandIn() as standin:
        code, run_dir = _interview(tmp_path / "runs", standin, "--pricing", str(_pricing(tmp_path)))
        replies = Counter(r.model for r in standin.ok_requests())
    assert code == 0 and replies["target"] and replies["evaluator"]
    expected = replies["target"] * PER_REPLY["target"] + replies["evaluator"] * PER_REPLY["evaluator"]
    summary = _summary(run_dir)
    assert summary["usage"]["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert summary["usage_by_role"]["target"]["cost_usd"] == pytest.approx(replies["target"] * 40e-6, abs=1e-6)
    judges = [u for role, u in summary["usage_by_role"].items() if role != "target"]  # evaluator, grader ...
    assert sum(u["calls"] for u in judges) == replies["evaluator"]
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    units_cost = sum(r["usage"]["cost_usd"] for r in records)  # the summary's own call is outside the units
    assert summary["unit_usage"]["cost_usd"] == pytest.approx(units_cost) and 0 < units_cost < expected
    shown = f"${summary['usage']['cost_usd']:.6g}"
    assert shown in capsys.readouterr().out
    report = (run_dir / "report.md").read_text()
    assert shown in report and "Calls per role" in report


def test_a_model_without_a_price_makes_the_cost_unknown_not_zero(tmp_path, capsys):
    only_target = _pricing(tmp_path, "models:\n  target: {input: 1.0, output: 4.0}\n")
    with StandIn() as standin:
        _, run_dir = _interview(tmp_path / "runs", standin, "--pricing", str(only_target))
        judged = Counter(r.model for r in standin.ok_requests())["evaluator"]
    usage = _summary(run_dir)["usage"]
    assert usage["cost_usd"] is None and usage["unpriced_calls"] == judged > 0
    assert _summary(run_dir)["usage_by_role"]["target"]["cost_usd"] > 0  # the priced role keeps its cost
    assert f"unknown ({judged} exchange(s) of models without a price" in (run_dir / "report.md").read_text()
    assert "unknown" in capsys.readouterr().out


def test_a_price_in_the_model_spec_overrides_the_pricing_file(tmp_path):
    with StandIn() as standin:
        config = tmp_path / "eval.toml"
        config.write_text(
            f'[models.judge]\nmodel = "evaluator"\nbase_url = "{standin.url}"\nprice_in = 1000.0\nprice_out = 0.0\n',
            encoding="utf-8",
        )
        _, run_dir = _interview(
            tmp_path / "runs",
            standin,
            "--pricing",
            str(_pricing(tmp_path)),
            "--config",
            str(config),
            "--evaluator",
            "judge",
        )
        judged = Counter(r.model for r in standin.ok_requests())["evaluator"]
    judges = [u["cost_usd"] for role, u in _summary(run_dir)["usage_by_role"].items() if role != "target"]
    assert sum(judges) == pytest.approx(judged * 20 * 1000 / 1e6)


def test_cache_hits_cost_nothing_and_count_what_they_saved(tmp_path):
    extra = ("--pricing", str(_pricing(tmp_path)), "--cache", "--cache-dir", str(tmp_path / "cache"))
    with StandIn() as standin:
        _, first = _interview(tmp_path / "runs", standin, *extra)
        _, second = _interview(tmp_path / "runs", standin, *extra)
    paid, reused = _summary(first)["usage"], _summary(second)["usage"]
    assert reused["calls"] == 0 and reused["cost_usd"] == 0.0
    assert reused["cost_saved_by_cache_usd"] == pytest.approx(paid["cost_usd"]) and paid["cost_usd"] > 0
    assert f"${paid['cost_usd']:.6g} saved" in (second / "report.md").read_text()


def test_max_cost_stops_within_one_round_and_a_resume_with_more_ends_as_an_unbudgeted_run(tmp_path, capsys):
    from dyneval import cli as run

    pricing = ("--pricing", str(_pricing(tmp_path)))
    limit = 0.0008  # about 10 replies
    with StandIn(latency_s=0.02) as standin:
        _, full = _interview(tmp_path / "full", standin, *pricing)
        standin.requests.clear()
        code, stopped = _interview(tmp_path / "runs", standin, *pricing, "--max-cost", str(limit))
        assert code == run.EXIT_BUDGET
        summary = _summary(stopped)
        assert limit <= summary["usage"]["cost_usd"] <= limit + CONCURRENCY * max(PER_REPLY.values())
        assert len(standin.requests) == summary["usage"]["calls"] < _summary(full)["usage"]["calls"]
        assert f"--max-cost {limit}" in summary["interrupted"]["budget"]
        assert "--max-cost" in capsys.readouterr().out
        code, _ = _interview(tmp_path / "runs", standin, *pricing, "--resume", stopped.name, "--max-cost", "1")
    assert code == 0 and unit_records(stopped) == unit_records(full)


def test_max_cost_with_a_model_without_a_price_is_refused_before_any_request(tmp_path, capsys):
    from dyneval import cli as run

    with StandIn() as standin:
        code, made = _interview(
            tmp_path / "runs",
            standin,
            "--pricing",
            str(_pricing(tmp_path, "models:\n  target: {input: 1.0, output: 4.0}\n")),
            "--max-cost",
            "1",
        )
        assert standin.requests == []
    err = capsys.readouterr().err.strip()
    assert code == 2 and made is None and len(err.splitlines()) == 1
    assert "--max-cost" in err and "no price for evaluator@" in err
    assert run.main(["--protocol", "interview", "--out", str(tmp_path), "--max-cost", "0"]) == 2


@pytest.mark.parametrize(
    "text, says",
    [("models: [1, 2]\n", "models"), ("models:\n  m: {input: -1, output: 1}\n", "greater than or equal to 0")],
)
def test_a_malformed_pricing_file_is_one_line_naming_its_source_and_exit_2(tmp_path, capsys, monkeypatch, text, says):
    from dyneval import cli as run

    monkeypatch.setenv("DYNEVAL_PRICING", str(_pricing(tmp_path, text)))
    assert run.main(["--protocol", "interview", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DYNEVAL_PRICING" in err and says in err
    assert not (tmp_path / "runs").exists()


def test_one_price_of_two_in_a_model_spec_is_refused_naming_the_key(tmp_path, capsys):
    from dyneval import cli as run

    config = tmp_path / "eval.toml"
    config.write_text(
        '[models.judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\nprice_in = 1.0\n', encoding="utf-8"
    )
    assert run.main(["--protocol", "interview", "--out", str(tmp_path), "--config", str(config)]) == 2
    assert "price_out" in capsys.readouterr().err


def test_failed_attempts_per_role_appear_in_the_report(tmp_path, monkeypatch):
    from dyneval.state.errors import RetryPolicy

    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, exc=None: 0.0)
    with StandIn(faults=Faults(transient=0.2, seed=4)) as standin:
        _, run_dir = _interview(tmp_path / "runs", standin, "--pricing", str(_pricing(tmp_path)))
        failed = Counter(r.model for r in standin.requests if r.status != 200)
    by_role = _summary(run_dir)["usage_by_role"]
    assert sum(failed.values()) > 0
    assert by_role["target"]["failed_calls"] == failed["target"]
    assert sum(u["failed_calls"] for role, u in by_role.items() if role != "target") == failed["evaluator"]
    report = (run_dir / "report.md").read_text()
    for role, u in by_role.items():
        assert f"| {role} | {u['calls']} | {u['failed_calls']} |" in report


@pytest.mark.parametrize(
    "flag, limit", [("--max-tokens-per-role", "target=100"), ("--max-cost-per-role", "target=0.0002")]
)
def test_a_roles_own_budget_stops_the_run_once_that_role_spent_it_and_a_resume_with_more_ends_as_unbudgeted(
    tmp_path, flag, limit
):
    from dyneval import cli as run

    pricing = ("--pricing", str(_pricing(tmp_path)))
    with StandIn(latency_s=0.02) as standin:
        _, full = _interview(tmp_path / "full", standin, *pricing)
        code, stopped = _interview(tmp_path / "runs", standin, *pricing, flag, limit)
        assert code == run.EXIT_BUDGET
        summary = _summary(stopped)
        target = summary["usage_by_role"]["target"]
        spent = target["prompt_tokens"] + target["completion_tokens"] if "tokens" in flag else target["cost_usd"]
        cap, per_reply = float(limit.split("=")[1]), 25 if "tokens" in flag else PER_REPLY["target"]
        assert cap <= spent <= cap + CONCURRENCY * per_reply  # at most the requests already in flight beyond it
        assert "target: " in summary["interrupted"]["budget"] and flag in summary["interrupted"]["budget"]
        code, _ = _interview(tmp_path / "runs", standin, *pricing, "--resume", stopped.name, flag, "target=1000000")
    assert code == 0 and unit_records(stopped) == unit_records(full)


@pytest.mark.parametrize(
    "value, says",
    [
        ("judge=10", "unknown role 'judge'"),
        ("target", "ROLE=LIMIT"),
        ("target=-1", "greater than 0"),
        ("target=lots", "not a number"),
    ],
)
def test_a_bad_per_role_budget_is_one_line_naming_its_flag_and_exit_2(tmp_path, capsys, value, says):
    from dyneval import cli as run

    assert run.main(["--protocol", "interview", "--out", str(tmp_path / "runs"), "--max-tokens-per-role", value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--max-tokens-per-role" in err and says in err
    assert not (tmp_path / "runs").exists()


def test_a_per_role_budget_is_read_from_the_environment(tmp_path, capsys, monkeypatch):
    from dyneval import cli as run

    monkeypatch.setenv("DYNEVAL_MAX_COST_PER_ROLE", "evaluator=0")
    assert run.main(["--protocol", "interview", "--out", str(tmp_path)]) == 2
    assert "DYNEVAL_MAX_COST_PER_ROLE" in capsys.readouterr().err


def test_retries_after_faults_and_repairs_of_malformed_replies_are_counted_with_their_tokens_and_cost(
    tmp_path, monkeypatch
):
    from dyneval.state.errors import RetryPolicy

    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, exc=None: 0.0)
    with StandIn(faults=Faults(transient=0.1, malformed=0.3, seed=5)) as standin:
        _, run_dir = _interview(tmp_path / "runs", standin, "--pricing", str(_pricing(tmp_path)))
        sent = list(standin.requests)
    failed = sum(r.status != 200 for r in sent)
    repairs = sum(r.repair for r in sent) - sum(r.repair and r.status != 200 for r in sent)  # first repair tries
    by_role = _summary(run_dir)["usage_by_role"]
    assert failed and repairs
    assert sum(u["retries"] for u in by_role.values()) == failed + repairs  # every fault was retried once
    retry_tokens = sum(u["retry_tokens"] for u in by_role.values())  # 25 per answered retry, 0 per failed one
    assert retry_tokens % 25 == 0 and 25 * sum(r.repair and r.status == 200 for r in sent) <= retry_tokens
    target = by_role["target"]
    assert target["retry_cost_usd"] == pytest.approx(target["retry_tokens"] / 25 * PER_REPLY["target"])
    report = (run_dir / "report.md").read_text()
    assert "retry cost" in report
    assert f"| target | {target['calls']} | {target['failed_calls']} | {target['retries']} |" in report


def test_a_studio_session_prices_its_calls_like_a_batch_run(tmp_path):
    """Services built from a graph's context fields (Studio, a user's own graph) price every exchange too."""
    from dyneval.runtime.services import services_of
    from dyneval.state.interview import InterviewContext

    svc = services_of(InterviewContext(target="gpt-4o-mini@http://127.0.0.1:9/v1", run_dir=str(tmp_path)))
    svc.events.record(
        unit="u",
        role="target",
        model=svc.model_label("target"),
        step="s",
        messages=[],
        output="x",
        prompt_tokens=1_000_000,
        completion_tokens=0,
        latency_s=0.1,
    )
    assert svc.events.total().cost_usd == pytest.approx(0.15)  # the shipped example price of gpt-4o-mini
