"""Every kind of bad input, as a user would give it: exit 2, one line, the real culprit named, nothing left behind.

Each case runs ``run.main`` in-process (a few through ``python run.py`` to prove the real exit path) in an empty
working folder, with every role pointed at a stand-in endpoint, and checks:

* exit code 2 and exactly one line on stderr, ``error: ...``, no traceback anywhere;
* the blame: the flag, environment variable, config file and key, or file + record + field the message must name;
* nothing left behind: the working folder holds only the files the case wrote (no run directory under ``--out``,
  no cache, no bank), and the stand-in endpoint received no request (no pre-flight, no tokens spent).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.standin_endpoint import StandIn

REPO = Path(__file__).resolve().parents[1]
SAMPLE_BENCHMARK = REPO / "samples" / "atad" / "benchmark.jsonl"

GOOD_SEED = '{"id": "s1", "task": "math", "question": "What is 2+3?", "solution": "2+3=5", "answer": "5"}\n'
GOOD_QUESTION = '{"id": "q1", "question": "Who lays the eggs?", "options": ["worker", "queen"], "answer": "B"}\n'
GOOD_BANK = (
    '{"discipline": "Engineering", "sub_discipline": "CS", "qtype": "short_answer", '
    '"question": "Name a LIFO structure.", "answer": "a stack"}\n'
)
BENCH_ITEM = (
    '{"id": "T1-x", "task": "T1", "item_status": "finalized", "problem": '
    '{"sentences": ["a.", "b.", "c.", "d.", "e."], "answer": 2}}\n'
)


@dataclass
class Case:
    """One bad input. ``argv`` follows ``--protocol``; ``files`` are written into the working folder first."""

    id: str
    protocol: str
    argv: list[str]
    blame: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    out: bool = True  # False: the case sets the output folder itself (env var or config file)
    links: dict[str, str] = field(default_factory=dict)  # symbolic link -> its target, made after the files

    def __str__(self) -> str:
        return self.id


def c(
    id: str,
    protocol: str,
    argv: str | list[str],
    *blame: str,
    env: dict | None = None,
    files: dict | None = None,
    out: bool = True,
    links: dict | None = None,
) -> Case:
    return Case(
        id,
        protocol,
        argv.split() if isinstance(argv, str) else argv,
        list(blame),
        env or {},
        files or {},
        out,
        links or {},
    )


def nested(levels: int) -> str:
    """A JSON (and TOML, YAML flow) list nested ``levels`` deep."""
    return "[" * levels + "]" * levels


TOO_DEEP = "nested deeper than 100 levels of lists and objects"


TOML_MODEL = "[models.gpt]\nmodel = 'gpt'\nbase_url = 'http://127.0.0.1:9/v1'\n"

CLI = [
    c("concurrency-zero", "interview", "--concurrency 0", "--concurrency:", "greater than or equal to 1"),
    c("concurrency-negative", "interview", "--concurrency -3", "--concurrency:", "(got -3)"),
    c("concurrency-not-int", "interview", "--concurrency many", "argument --concurrency", "'many'"),
    c("limit-zero", "atad", "--limit 0", "--limit:", "greater than or equal to 1"),
    c("limit-negative", "judgeagent", "--limit -1", "--limit:"),
    c("seed-float", "interview", "--seed 1.5", "argument --seed", "'1.5'"),
    c("trials-zero", "interview", "--trials 0", "--trials:", "greater than or equal to 1"),
    c("trials-atad-generation", "atad", "--trials 2", "'--trials'", "(--evaluate MODEL)"),
    c("trials-judgecheck", "judgecheck", "--trials 2", "'--trials'", "--repeats N"),
    c("trials-with-cache", "interview", "--trials 3 --cache", "'--cache'", "every trial the first one's replies"),
    c("trials-llmeval-env", "llmeval", "", "DYNEVAL_TRIALS", "draws new questions", env={"DYNEVAL_TRIALS": "2"}),
    c("state-check-malformed", "interview", "--state-check check_state", "--state-check", "use MODULE:FN"),
    c("state-check-no-module", "interview", "--state-check no_such_mod:fn", "--state-check", "no module named"),
    c("state-check-model-target", "interview", "--state-check json:dumps", "--state-check", "is a model"),
    c(
        "state-check-app-target",
        "interview",
        "--target graph:tests.toy_agents:app --state-check json:dumps",
        "--state-check",
        "whose state dyneval cannot read",
    ),
    c(
        "target-unknown-name",
        "interview",
        "--target nonsense",
        "--target:",
        "unknown model 'nonsense'",
        "under [models] in the config file",
    ),
    c(
        "evaluator-url-no-scheme",
        "interview",
        "--evaluator gpt@localhost:8000",
        "--evaluator:",
        "malformed MODEL@BASE_URL",
        "'localhost:8000'",
    ),
    c("grader-empty-model", "atad", "--grader @http://127.0.0.1:1/v1", "--grader:", "MODEL is empty"),
    c("teacher-port-out-of-range", "atad", "--teacher m@http://127.0.0.1:99999/v1", "--teacher:", "Port out of range"),
    c("student-no-host", "atad", "--student m@http:///v1", "--student:", "malformed MODEL@BASE_URL"),
    c(
        "target-needs-unset-key",
        "interview",
        "--target gpt@https://api.example.com/v1",
        "--target:",
        "OPENAI_API_KEY",
        "is not set",
        env={"OPENAI_API_KEY": None},
    ),
    c(
        "embedding-model-no-folder",
        "judgeagent",
        "--embedding-model models/minilm",
        "--embedding-model:",
        "'models/minilm' is neither a folder nor in the Hugging Face cache",
    ),
    c(
        "embedding-model-env-unknown",
        "llmeval",
        "",
        "DYNEVAL_EMBEDDING_MODEL",
        "'no-such-model'",
        env={"DYNEVAL_EMBEDDING_MODEL": "no-such-model"},
    ),
    c("chroma-url-not-url", "judgeagent", "--chroma-url chroma-host", "--chroma-url:", "Chroma URL"),
    c(
        "postgres-dsn-not-postgres",
        "interview",
        "--postgres-dsn sqlite:///x.db",
        "--postgres-dsn:",
        "not a PostgreSQL DSN",
    ),
    c("unknown-protocol", "nope", "", "--protocol", "unknown protocol 'nope'"),
    c("no-protocol", "", "", "required: --protocol"),
    c("unknown-flag", "interview", "--concurency 2", "unrecognized arguments: --concurency"),
    c("other-protocols-flag", "interview", "--kb docs", "unrecognized arguments: --kb"),
    c("out-is-a-file", "interview", "--out afile", "--out", "Not a directory", files={"afile": "x"}),
    c("config-missing", "interview", "--config none.toml", "none.toml: cannot read config file"),
    c("resume-unknown-run", "interview", "--resume no-such-run", "--resume", "no run 'no-such-run'"),
    c("interview-repeats-zero", "interview", "--repeats 0", "--repeats", "between 1 and 100 (got 0)"),
    c("interview-max-retries-negative", "interview", "--max-retries -1", "--max-retries", "between 0 and 20 (got -1)"),
    c("interview-task-choice", "interview", "--task poetry", "argument --task", "'poetry'"),
    c("atad-per-task-zero", "atad", "--per-task 0", "--per-task", "between 1 and 10000 (got 0)"),
    c(
        "atad-benchmark-without-evaluation",
        "atad",
        "--benchmark b.jsonl",
        "--benchmark",
        "read by the evaluation phase",
        files={"b.jsonl": BENCH_ITEM},
    ),
    c("atad-unknown-task", "atad", "--tasks T1,T9", "--tasks", "T9"),
    c("atad-challenge-prob", "atad", "--challenge-prob 1.5", "--challenge-prob", "between 0 and 1"),
    c("atad-ladder", "atad", "--difficulty-ladder hard", "--difficulty-ladder", "NAME:MIN_SUCCESSES"),
    c("atad-max-init-loops", "atad", "--max-init-loops 0", "--max-init-loops", "between 1 and 20 (got 0)"),
    c(
        "atad-evaluate-unknown-model",
        "atad",
        f"--evaluate nonsense --benchmark {SAMPLE_BENCHMARK}",
        "--evaluate",
        "unknown model 'nonsense'",
    ),
    c("judgeagent-rounds-negative", "judgeagent", "--rounds -1", "--rounds", "between 0 and 20 (got -1)"),
    c("judgeagent-hops-zero", "judgeagent", "--hops 0", "--hops", "between 1 and 10 (got 0)"),
    c("judgeagent-gains", "judgeagent", "--gains 1,2", "--gains"),
    c("judgeagent-batch-size-zero", "judgeagent", "--batch-size 0", "--batch-size"),
    c("llmeval-questions-zero", "llmeval", "--questions 0", "--questions"),
    c("llmeval-paradigm-choice", "llmeval", "--paradigm cot5", "argument --paradigm", "'cot5'"),
    c("llmeval-sizes", "llmeval", "--stability --sizes 10,x", "--sizes"),
    c("llmeval-port", "llmeval", "--serve --port 99999", "--port"),
    c("llmeval-sessions-zero", "llmeval", "--sessions 0", "--sessions"),
    c("llmeval-trials-zero", "llmeval", "--stability --trials 0", "--trials"),
    c("llmeval-sessions-too-many", "llmeval", "--sessions 100000", "--sessions", "between 1 and 1000"),
    c("llmeval-sizes-too-large", "llmeval", "--stability --sizes 10,99999999", "--sizes", "each at most 1000000"),
    c(
        "pricing-yaml-nested-too-deep",
        "interview",
        "--pricing p.yaml",
        "p.yaml (from --pricing)",
        TOO_DEEP,
        files={"p.yaml": f"models: {nested(10_000)}\n"},
    ),
    c("llmeval-answer-batch-zero", "llmeval", "--answer-batch 0", "--answer-batch"),
    c("llmeval-judge-concurrency-zero", "llmeval", "--judge-concurrency 0", "--judge-concurrency"),
    c("llmeval-near-dup-threshold", "llmeval", "--near-dup-threshold 1.5", "--near-dup-threshold"),
    c("llmeval-rate-limit-zero", "llmeval", "--serve --rate-limit 0", "--rate-limit"),
    c("interview-max-questions-zero", "interview", "--max-questions 0", "--max-questions"),
    c("interview-bootstrap-zero", "interview", "--bootstrap-resamples 0", "--bootstrap-resamples"),
    c("judgeagent-extract-batch-zero", "judgeagent", "--extract-batch 0", "--extract-batch"),
    c("judgeagent-thresholds", "judgeagent", "--thresholds 1,x", "--thresholds"),
    c("atad-max-level-attempts", "atad", "--max-level-attempts 0", "--max-level-attempts"),
    c("out-empty", "interview", ["--out", ""], "--out:", "must name the folder", "not ''", out=False),
    c(
        "resume-another-protocols-run",
        "interview",
        "--resume r1",
        "--resume",
        "run 'r1' is a run of atad",
        "--protocol atad",
        files={"runs/r1/config.json": '{"protocol": "atad"}'},
    ),
    c("resume-path-like-run-id", "interview", "--resume ../../etc", "--resume", "'../../etc' is not a run id"),
    c("concurrency-too-many", "interview", "--concurrency 1001", "--concurrency:", "less than or equal to 1000"),
    c("limit-too-many", "atad", "--limit 10000001", "--limit:", "less than or equal to 10000000"),
    c("atad-per-task-too-many", "atad", "--per-task 100000", "--per-task", "between 1 and 10000"),
    c("atad-max-init-loops-too-many", "atad", "--max-init-loops 21", "--max-init-loops", "between 1 and 20"),
    c("interview-repeats-too-many", "interview", "--repeats 101", "--repeats", "between 1 and 100"),
    c("interview-max-retries-too-many", "interview", "--max-retries 21", "--max-retries", "between 0 and 20"),
    c("interview-max-questions-too-many", "interview", "--max-questions 51", "--max-questions", "between 1 and 50"),
    c(
        "interview-bootstrap-too-many",
        "interview",
        "--bootstrap-resamples 100001",
        "--bootstrap-resamples",
        "between 1 and 100000",
    ),
    c("judgecheck-repeats-too-many", "judgecheck", "--repeats 21", "--repeats", "between 1 and 20"),
    c(
        "judgecheck-bootstrap-too-many",
        "judgecheck",
        "--bootstrap-resamples 100001",
        "--bootstrap-resamples",
        "between 100 and 100000",
    ),
    c("judgeagent-batch-size-too-many", "judgeagent", "--batch-size 101", "--batch-size", "between 1 and 100"),
    c("judgeagent-extract-batch-too-many", "judgeagent", "--extract-batch 101", "--extract-batch", "between 1 and 100"),
    c("judgeagent-hops-beyond-the-path-tool", "judgeagent", "--hops 11", "--hops", "between 1 and 10"),
    c("judgeagent-top-k-zero", "judgeagent", "--top-k 0", "--top-k", "between 1 and 50"),
    c("llmeval-questions-too-many", "llmeval", "--questions 100001", "--questions", "between 1 and 100000"),
    c("llmeval-answer-batch-too-many", "llmeval", "--answer-batch 1001", "--answer-batch", "between 1 and 1000"),
]

ENV = [
    c(
        "env-concurrency-not-int",
        "interview",
        "",
        "DYNEVAL_CONCURRENCY:",
        "valid integer",
        "(got 'abc')",
        env={"DYNEVAL_CONCURRENCY": "abc"},
    ),
    c(
        "env-concurrency-zero",
        "interview",
        "",
        "DYNEVAL_CONCURRENCY:",
        "greater than or equal to 1",
        env={"DYNEVAL_CONCURRENCY": "0"},
    ),
    c("env-limit-negative", "atad", "", "DYNEVAL_LIMIT:", "greater than or equal to 1", env={"DYNEVAL_LIMIT": "-2"}),
    c("env-seed-not-int", "judgeagent", "", "DYNEVAL_SEED:", "valid integer", env={"DYNEVAL_SEED": "x"}),
    c("env-target-unknown", "interview", "", "DYNEVAL_TARGET:", "unknown model 'qwen'", env={"DYNEVAL_TARGET": "qwen"}),
    c(
        "env-evaluator-bad-url",
        "interview",
        "",
        "DYNEVAL_EVALUATOR:",
        "malformed MODEL@BASE_URL",
        env={"DYNEVAL_EVALUATOR": "gpt@ftp://host/v1"},
    ),
    c("env-student-unknown", "atad", "", "DYNEVAL_STUDENT:", "unknown model", env={"DYNEVAL_STUDENT": "llama"}),
    c(
        "env-postgres-dsn",
        "interview",
        "",
        "DYNEVAL_POSTGRES_DSN:",
        "not a PostgreSQL DSN",
        env={"DYNEVAL_POSTGRES_DSN": "localhost"},
    ),
    c("env-chroma-url", "judgeagent", "", "DYNEVAL_CHROMA_URL:", "Chroma URL", env={"DYNEVAL_CHROMA_URL": "x"}),
    c(
        "env-name-typo",
        "interview",
        "",
        "DYNEVAL_CONCURENCY:",
        "did you mean DYNEVAL_CONCURRENCY?",
        env={"DYNEVAL_CONCURENCY": "4"},
    ),
    c(
        "env-out-is-a-file",
        "interview",
        "",
        "DYNEVAL_OUT:",
        "Not a directory",
        env={"DYNEVAL_OUT": "afile"},
        files={"afile": "x"},
        out=False,
    ),
    c("env-out-blank", "interview", "", "DYNEVAL_OUT:", "must name the folder", env={"DYNEVAL_OUT": " "}, out=False),
    c(
        "env-concurrency-too-many",
        "interview",
        "",
        "DYNEVAL_CONCURRENCY:",
        "less than or equal to 1000",
        env={"DYNEVAL_CONCURRENCY": "5000"},
    ),
    c(
        "env-key-unset-for-config-model",
        "interview",
        "--config c.toml",
        "c.toml: [models.g] api_key_env:",
        "MY_API_KEY",
        env={"MY_API_KEY": None, "DYNEVAL_TARGET": None},
        files={
            "c.toml": "[models.g]\nmodel = 'g'\nbase_url = 'https://api.example.com/v1'\n"
            "api_key_env = 'MY_API_KEY'\n[roles]\ntarget = 'g'\n"
        },
    ),
]

CONFIG = [
    c(
        "toml-syntax",
        "interview",
        "--config c.toml",
        "c.toml: not valid TOML",
        "line 2",
        files={"c.toml": "seed = 1\nconcurrency = = 2\n"},
    ),
    c(
        "yaml-syntax",
        "interview",
        "--config c.yaml",
        "c.yaml: not valid YAML",
        "line 2",
        files={"c.yaml": "seed: 1\n  concurrency: 2\n"},
    ),
    c(
        "yaml-duplicate-key",
        "interview",
        "--config c.yaml",
        "c.yaml: not valid YAML: duplicate key 'seed'",
        files={"c.yaml": "seed: 1\nseed: 2\n"},
    ),
    c("yaml-top-level-list", "interview", "--config c.yaml", "c.yaml:", "top level", files={"c.yaml": "- 1\n"}),
    c(
        "config-not-utf8",
        "interview",
        "--config c.toml",
        "c.toml:",
        "not UTF-8",
        "byte offset 7",
        files={"c.toml": b"seed = \xff\n"},
    ),
    c(
        "config-unknown-top-key",
        "interview",
        "--config c.toml",
        "c.toml: concurency: unknown key",
        "did you mean 'concurrency'?",
        files={"c.toml": "concurency = 2\n"},
    ),
    c(
        "config-model-key-typo",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt] temprature: unknown key",
        "'temperature'",
        files={"c.toml": TOML_MODEL + "temprature = 0.2\n"},
    ),
    c(
        "config-model-temperature-range",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt] temperature:",
        "less than or equal to 2",
        files={"c.toml": TOML_MODEL + "temperature = 5\n"},
    ),
    c(
        "config-model-max-tokens-type",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt] max_tokens:",
        "valid integer",
        files={"c.toml": TOML_MODEL + "max_tokens = 'many'\n"},
    ),
    c(
        "config-model-without-name",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt]:",
        "needs `model`",
        files={"c.toml": "[models.gpt]\nbase_url = 'http://127.0.0.1:9/v1'\n"},
    ),
    c(
        "config-model-base-url",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt] base_url:",
        "must be http://",
        files={"c.toml": "[models.gpt]\nmodel = 'g'\nbase_url = 'localhost:8000'\n"},
    ),
    c(
        "config-role-undefined-model",
        "interview",
        "--config c.toml",
        "c.toml: [roles] evaluator:",
        "unknown model 'qwen'",
        "(defined: gpt)",
        env={"DYNEVAL_EVALUATOR": None},
        files={"c.toml": TOML_MODEL + "[roles]\nevaluator = 'qwen'\n"},
    ),
    c(
        "config-unknown-role",
        "interview",
        "--config c.toml",
        "c.toml: [roles] judge:",
        "unknown role 'judge'",
        files={"c.toml": "[roles]\njudge = 'local'\n"},
    ),
    c(
        "config-concurrency-zero",
        "interview",
        "--config c.toml",
        "c.toml: concurrency:",
        "greater than or equal",
        files={"c.toml": "concurrency = 0\n"},
    ),
    c(
        "config-limit-type",
        "atad",
        "--config c.toml",
        "c.toml: limit:",
        "valid integer",
        files={"c.toml": "limit = 'ten'\n"},
    ),
    c(
        "config-stores-key-typo",
        "judgeagent",
        "--config c.toml",
        "c.toml: [stores] chroma:",
        "unknown key",
        files={"c.toml": "[stores]\nchroma = 'http://127.0.0.1:8001'\n"},
    ),
    c(
        "config-other-protocol",
        "interview",
        "--config c.toml",
        "c.toml: protocol:",
        "'atad'",
        files={"c.toml": "protocol = 'atad'\n"},
    ),
    c(
        "config-out-is-a-file",
        "interview",
        "--config c.toml",
        "c.toml: out:",
        "Not a directory",
        out=False,
        files={"c.toml": "out = 'afile'\n", "afile": "x"},
    ),
    c(
        "config-params-kb-missing",
        "judgeagent",
        "--config c.toml",
        "no-such-kb (from c.toml: [params] kb):",
        "not found",
        files={"c.toml": "[params]\nkb = 'no-such-kb'\n"},
    ),
    c(
        "config-params-typo",
        "atad",
        "--config c.toml",
        "c.toml: [params] per_tsk: unknown parameter of atad",
        "did you mean 'per_task'?",
        files={"c.toml": "[params]\nper_tsk = 3\n"},
    ),
    c(
        "config-params-protocol-check",
        "atad",
        "--config c.toml",
        "c.toml: [params] per_task:",
        "between 1 and 10000 (got 0)",
        files={"c.toml": "[params]\nper_task = 0\n"},
    ),
    c(
        "config-params-type",
        "interview",
        "--config c.toml",
        "c.toml: [params] repeats:",
        "valid integer",
        files={"c.toml": "[params]\nrepeats = 'twice'\n"},
    ),
    c(
        "config-params-choice",
        "interview",
        "--config c.toml",
        "c.toml: [params] task:",
        "'poetry'",
        files={"c.toml": "[params]\ntask = 'poetry'\n"},
    ),
    c(
        "config-params-flag-list",
        "atad",
        "--config c.toml",
        "c.toml: [params] benchmark:",
        "valid list",
        files={"c.toml": "[params]\nbenchmark = 'b.jsonl'\nevaluate = ['local']\n"},
    ),
    c(
        "yaml-model-range",
        "interview",
        "--config c.yaml",
        "c.yaml: models.gpt.timeout_s:",
        "greater than 0",
        files={"c.yaml": "models:\n  gpt:\n    model: gpt\n    timeout_s: 0\n"},
    ),
    c(
        "env-beats-file-but-blames-env",
        "interview",
        "--config c.toml",
        "DYNEVAL_CONCURRENCY:",
        env={"DYNEVAL_CONCURRENCY": "-1"},
        files={"c.toml": "concurrency = 4\n"},
    ),
    c(
        "config-out-empty",
        "interview",
        "--config c.toml",
        "c.toml: out:",
        "must name the folder",
        out=False,
        files={"c.toml": "out = ''\n"},
    ),
    c(
        "config-model-max-retries-too-many",
        "interview",
        "--config c.toml",
        "c.toml: [models.gpt] max_retries:",
        "less than or equal to 20",
        files={"c.toml": TOML_MODEL + "max_retries = 1000\n"},
    ),
    c(
        "config-params-per-task-too-many",
        "atad",
        "--config c.toml",
        "c.toml: [params] per_task:",
        "between 1 and 10000",
        files={"c.toml": "[params]\nper_task = 100000\n"},
    ),
    c(
        "toml-nested-10000-levels",
        "interview",
        "--config c.toml",
        "c.toml:",
        TOO_DEEP,
        files={"c.toml": f"seed = {nested(10_000)}\n"},
    ),
    c(
        "toml-param-nested-too-deep",
        "interview",
        "--config c.toml",
        "c.toml: [params] task:",
        TOO_DEEP,
        files={"c.toml": f"[params]\ntask = {nested(150)}\n"},
    ),
    c(
        "toml-dotted-key-nested-too-deep",
        "interview",
        "--config c.toml",
        "c.toml: [params] a:",
        TOO_DEEP,
        files={"c.toml": "[params]\n" + ".".join(["a"] * 10_000) + " = 1\n"},
    ),
    c(
        "yaml-nested-10000-levels",
        "interview",
        "--config c.yaml",
        "c.yaml:",
        TOO_DEEP,
        files={"c.yaml": f"params:\n  task: {nested(10_000)}\n"},
    ),
    c(
        "yaml-block-nested-too-deep",
        "interview",
        "--config c.yaml",
        "c.yaml: params.task:",
        TOO_DEEP,
        files={"c.yaml": "params:\n  task:\n" + "".join(" " * (4 + 2 * i) + "-\n" for i in range(120))},
    ),
    c(
        "yaml-alias-cycle",
        "interview",
        "--config c.yaml",
        "c.yaml: params.task:",
        TOO_DEEP,
        files={"c.yaml": "params:\n  task: &a [*a]\n"},
    ),
    c(
        "json-config-nested-10000-levels",
        "interview",
        "--config c.json",
        "c.json:",
        TOO_DEEP,
        files={"c.json": f'{{"params": {{"task": {nested(10_000)}}}}}\n'},
    ),
]

FILES = [
    c("interview-data-missing", "interview", "--data none.jsonl", "none.jsonl", "--data"),
    c(
        "interview-data-no-question",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "record 2",
        "question",
        files={"d.jsonl": GOOD_SEED + '{"id": "s2", "task": "math", "answer": "4"}\n'},
    ),
    c(
        "interview-data-not-utf8",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "byte offset",
        files={"d.jsonl": GOOD_SEED.encode() + b'{"question": "caf\xe9?"}\n'},
    ),
    c("interview-data-empty", "interview", "--data d.jsonl", "d.jsonl", files={"d.jsonl": ""}),
    c(
        "interview-data-bad-json",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "record 2",
        files={"d.jsonl": GOOD_SEED + '{"question": "x",\n'},
    ),
    c(
        "interview-data-number-question",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "record 1",
        "question",
        files={"d.jsonl": '{"id": "s1", "task": "math", "question": 42, "solution": "s", "answer": "5"}\n'},
    ),
    c(
        "judgeagent-data-no-answer",
        "judgeagent",
        "--data q.jsonl --no-extension",
        "q.jsonl",
        "record 1",
        "answer",
        files={"q.jsonl": '{"id": "q1", "question": "Who lays the eggs?", "options": ["a", "b"]}\n'},
    ),
    c(
        "judgeagent-csv-missing-column",
        "judgeagent",
        "--data q.csv --no-extension",
        "q.csv",
        "record 1",
        "field 'question'",
        "this record has: Q, answer",
        files={"q.csv": "Q,answer\nWho lays the eggs?,queen\n"},
    ),
    c(
        "judgeagent-fields-bad-mapping",
        "judgeagent",
        "--data q.jsonl --fields quest=Q --no-extension",
        "--fields",
        "quest",
        files={"q.jsonl": GOOD_QUESTION},
    ),
    c("judgeagent-kb-missing", "judgeagent", "--kb no-such-kb", "no-such-kb", "--kb"),
    c(
        "judgeagent-kb-binary",
        "judgeagent",
        "--kb kb",
        "kb/b.txt",
        "--kb",
        "binary",
        files={"kb/a.md": "Queens lay eggs.\n", "kb/b.txt": b"PK\x03\x04\x00\x01\x02binary"},
    ),
    c(
        "judgeagent-kb-unsupported-type",
        "judgeagent",
        "--kb kb",
        "kb/b.pdf",
        "--kb",
        "'.pdf'",
        files={"kb/a.md": "Queens lay eggs.\n", "kb/b.pdf": "%PDF-1.4\n"},
    ),
    c(
        "judgeagent-kb-single-txt-not-utf8",
        "judgeagent",
        "--kb kb.txt",
        "kb.txt",
        "--kb",
        "byte offset",
        files={"kb.txt": b"Queens lay eggs in \xe9t\xe9.\n"},
    ),
    c(
        "judgeagent-data-duplicate-id",
        "judgeagent",
        "--data q.jsonl --no-extension",
        "q.jsonl",
        "record 2",
        "duplicate",
        files={"q.jsonl": GOOD_QUESTION * 2},
    ),
    c("atad-benchmark-missing", "atad", "--evaluate local --benchmark none.jsonl", "none.jsonl", "--benchmark"),
    c(
        "atad-benchmark-no-problem",
        "atad",
        "--evaluate local --benchmark b.jsonl",
        "b.jsonl",
        "record 1",
        "problem",
        files={"b.jsonl": '{"id": "T1-x", "task": "T1", "item_status": "finalized"}\n'},
    ),
    c(
        "atad-benchmark-unknown-task",
        "atad",
        "--evaluate local --benchmark b.jsonl",
        "b.jsonl",
        "record 1",
        "task",
        files={"b.jsonl": BENCH_ITEM.replace('"T1"', '"T9"')},
    ),
    c(
        "atad-benchmark-not-utf8",
        "atad",
        "--evaluate local --benchmark b.jsonl",
        "b.jsonl",
        "byte offset",
        files={"b.jsonl": b'{"id": "\xff"}\n'},
    ),
    c("llmeval-bank-missing", "llmeval", "--bank none.jsonl --import-only", "none.jsonl", "--bank"),
    c(
        "llmeval-bank-not-utf8",
        "llmeval",
        "--bank b.jsonl --import-only",
        "b.jsonl",
        "byte offset",
        files={"b.jsonl": GOOD_BANK.encode() + b'{"question": "\xff"}\n'},
    ),
    c(
        "llmeval-bank-no-valid-record",
        "llmeval",
        "--bank b.jsonl --import-only",
        "b.jsonl",
        "question",
        files={"b.jsonl": '{"discipline": "Engineering", "qtype": "short_answer", "answer": "x"}\n'},
    ),
    c("llmeval-kappa-missing", "llmeval", "--kappa none.jsonl", "none.jsonl", "--kappa"),
    c("llmeval-contamination-missing", "llmeval", "--contamination pub.csv", "pub.csv", "--contamination"),
    c(
        "interview-data-json-nested-10000-levels",
        "interview",
        "--data d.json",
        "d.json",
        "--data",
        TOO_DEEP,
        files={"d.json": nested(10_000)},
    ),
    c(
        "interview-data-jsonl-line-nested-10000-levels",
        "interview",
        "--data d.jsonl",
        "d.jsonl, record 2:",
        TOO_DEEP,
        "[--data]",
        files={"d.jsonl": GOOD_SEED + nested(10_000) + "\n"},
    ),
    c(
        "interview-data-field-nested-too-deep",
        "interview",
        "--data d.jsonl",
        "d.jsonl, record 1, field 'solution'",
        TOO_DEEP,
        files={"d.jsonl": GOOD_SEED.replace('"2+3=5"', nested(500))},
    ),
    c(
        "interview-data-field-nested-10000-levels",
        "interview",
        "--data d.jsonl",
        "d.jsonl, record 1:",
        TOO_DEEP,
        files={"d.jsonl": GOOD_SEED.replace('"2+3=5"', nested(10_000))},
    ),
    c(
        "judgecheck-labels-nested-too-deep",
        "judgecheck",
        "--judge interview.grader --labels l.jsonl",
        "l.jsonl, record 1, field 'label'",
        TOO_DEEP,
        "[--labels]",
        files={"l.jsonl": f'{{"question": "q", "response": "r", "label": {nested(200)}}}\n'},
    ),
    c(
        "judgecheck-labels-csv-cell-nested-10000-levels",
        "judgecheck",
        "--judge atad.orchestrator --labels l.csv",
        "l.csv, record 1, field 'problem'",
        TOO_DEEP,
        "[--labels]",
        files={"l.csv": f'task,problem,label\nT1,"{nested(10_000)}",approved\n'},
    ),
    c(
        "interview-data-utf16-without-bom",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "--data",
        "UTF-16 text",
        files={"d.jsonl": GOOD_SEED.encode("utf-16-le")},
    ),
    c(
        "judgeagent-csv-utf16",
        "judgeagent",
        "--data q.csv --no-extension",
        "q.csv",
        "--data",
        "UTF-16 text",
        files={"q.csv": "id,question,answer\nq1,Who lays the eggs?,queen\n".encode("utf-16")},
    ),
    c(
        "interview-data-gzip",
        "interview",
        "--data d.jsonl",
        "d.jsonl",
        "--data",
        "binary file (gzip-compressed)",
        "decompress it first",
        files={"d.jsonl": gzip.compress(GOOD_SEED.encode())},
    ),
    c(
        "judgeagent-csv-gzip",
        "judgeagent",
        "--data q.csv --no-extension",
        "q.csv",
        "--data",
        "gzip-compressed",
        files={"q.csv": gzip.compress(b"id,question,answer\nq1,Who lays the eggs?,queen\n")},
    ),
    c(
        "judgeagent-csv-nul-byte",
        "judgeagent",
        "--data q.csv --no-extension",
        "q.csv",
        "--data",
        "NUL byte at line 2 (byte offset 30)",
        files={"q.csv": b"id,question,answer\nq1,Who lays\x00 the eggs?,queen\n"},
    ),
    c(
        "judgeagent-kb-symlink-loop",
        "judgeagent",
        "--kb kb",
        "kb/sub/loop",
        "--kb",
        "symbolic link loop",
        files={"kb/a.md": "Queens lay eggs.\n", "kb/sub/b.md": "Drones do not.\n"},
        links={"kb/sub/loop": ".."},
    ),
    c(
        "judgeagent-kb-broken-link",
        "judgeagent",
        "--kb kb",
        "kb/gone.md",
        "--kb",
        "neither a file nor a folder",
        files={"kb/a.md": "Queens lay eggs.\n"},
        links={"kb/gone.md": "nothing.md"},
    ),
    c(
        "judgeagent-kb-zero-byte-file",
        "judgeagent",
        "--kb kb",
        "kb/b.md",
        "--kb",
        "file is empty",
        files={"kb/a.md": "Queens lay eggs.\n", "kb/b.md": ""},
    ),
    c(
        "interview-data-duplicate-id",
        "interview",
        "--data d.jsonl",
        "d.jsonl, record 2, field 'id'",
        "duplicate id 's1'",
        files={"d.jsonl": GOOD_SEED * 2},
    ),
    c(
        "atad-benchmark-duplicate-id",
        "atad",
        "--evaluate local --benchmark b.jsonl",
        "b.jsonl, record 2, field 'id'",
        "duplicate id",
        files={"b.jsonl": (SAMPLE_BENCHMARK.read_text(encoding="utf-8").splitlines()[0] + "\n") * 2},
    ),
    c(
        "judgecheck-labels-duplicate-id",
        "judgecheck",
        "--judge interview.grader --labels l.jsonl",
        "l.jsonl, record 2, field 'id'",
        "duplicate id 'i1'",
        files={"l.jsonl": '{"id": "i1", "question": "q", "response": "r", "label": "correct"}\n' * 2},
    ),
    c(
        "llmeval-bank-duplicate-uuid",
        "llmeval",
        "--bank b.jsonl --import-only",
        "b.jsonl, record 2, field 'uuid'",
        "already used by record 1",
        files={
            "b.jsonl": '{"uuid": "u1", ' + GOOD_BANK[1:] + '{"uuid": "u1", ' + GOOD_BANK[1:].replace("LIFO", "FIFO")
        },
    ),
]


def _irt_run(questions: str, verdict: str = "correct", protocol: str = "judgeagent") -> dict[str, str]:
    """An earlier run directory ``old/`` for --irt-runs: config, plan and one result on ``questions`` (JSONL)."""
    rows = [json.loads(line) for line in questions.splitlines()]
    base = [{"id": r["id"], "verdict": verdict, "correct": verdict == "correct", "gain": 0.0} for r in rows]
    return {
        "old/config.json": json.dumps({"protocol": protocol, "roles": {"target": "m@http://127.0.0.1:9/v1"}}),
        "old/units.jsonl": json.dumps({"id": "batch-0001", "input": {"batch": rows}, "meta": {}}) + "\n",
        "old/results.jsonl": json.dumps({"unit_id": "batch-0001", "status": "ok", "base": base}) + "\n",
    }


SAMPLE_QUESTION = (REPO / "samples" / "judgeagent" / "questions.jsonl").read_text(encoding="utf-8").splitlines()[0]

IRT = [
    c("judgeagent-irt-runs-missing", "judgeagent", "--irt-runs no-such-run", "--irt-runs", "no such run directory"),
    c(
        "judgeagent-irt-runs-glob-matches-no-run",
        "judgeagent",
        "--irt-runs old*",
        "--irt-runs",
        "matches no run directory",
        files={"old1/notes.txt": "x"},
    ),
    c(
        "judgeagent-irt-runs-other-benchmark",
        "judgeagent",
        "--irt-runs old",
        "--irt-runs",
        "another benchmark",
        files=_irt_run(GOOD_QUESTION.replace('"q1"', '"zz-1"')),
    ),
    c(
        "judgeagent-irt-runs-other-protocol",
        "judgeagent",
        "--irt-runs old",
        "--irt-runs",
        "run of atad",
        files=_irt_run(SAMPLE_QUESTION, protocol="atad"),
    ),
    c(
        "judgeagent-irt-runs-too-few-calibrated",
        "judgeagent",
        "--irt-runs old",
        "--irt-runs",
        "fewer than --irt-items",
        files=_irt_run(SAMPLE_QUESTION),
    ),
    c("judgeagent-irt-model-choice", "judgeagent", "--irt-runs old --irt-model 3pl", "argument --irt-model", "'3pl'"),
    c("judgeagent-irt-items-zero", "judgeagent", "--irt-runs old --irt-items 0", "--irt-items", "at least 1"),
    c(
        "judgeagent-irt-min-responses-one",
        "judgeagent",
        "--irt-runs old --irt-min-responses 1",
        "--irt-min-responses",
        "at least 2",
    ),
    c("judgeagent-irt-items-without-runs", "judgeagent", "--irt-items 2", "--irt-items", "no --irt-runs was given"),
]

CASES = CLI + ENV + CONFIG + FILES + IRT
#: Run through ``python run.py`` (the real interpreter exit path), one per kind of source.
SUBPROCESS = {
    "concurrency-not-int",
    "env-concurrency-zero",
    "yaml-syntax",
    "interview-data-no-question",
    "interview-data-jsonl-line-nested-10000-levels",
}


@pytest.fixture(scope="module")
def standin():
    with StandIn() as server:
        yield server


def _prepare(case: Case, tmp_path: Path, standin: StandIn) -> tuple[list[str], dict[str, str | None]]:
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
    for name, target in case.links.items():
        (tmp_path / name).symlink_to(target)
    out = ["--out", str(tmp_path / "runs")] if case.out else []
    argv = (["--protocol", case.protocol] if case.protocol else []) + out + case.argv
    env = {"DYNEVAL_TARGET": standin.spec("target"), "DYNEVAL_EVALUATOR": standin.spec("evaluator"), **case.env}
    return argv, env


def _check(case: Case, code: int, out: str, err: str, tmp_path: Path, before: set[str], standin: StandIn) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert "Traceback" not in out + err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    for needle in case.blame:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    left = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")} - before
    assert not left, f"left behind: {sorted(left)}"
    assert not standin.requests, f"{len(standin.requests)} LLM request(s) sent"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input_exits_2_with_one_line_blaming_the_source_and_leaves_nothing(
    case, tmp_path, monkeypatch, capsys, standin
):
    from dyneval import cli as run

    argv, env = _prepare(case, tmp_path, standin)
    for name, value in env.items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    before = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")}
    standin.requests.clear()
    if case.id in SUBPROCESS:
        full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        full["PYTHONPATH"] = str(REPO)
        proc = subprocess.run(
            [sys.executable, str(REPO / "run.py"), *argv], env=full, capture_output=True, text=True, timeout=120
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        try:
            code = run.main(argv)
        except SystemExit as exc:  # argparse or a stray sys.exit: must not happen for bad input
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
    _check(case, code, out, err, tmp_path, before, standin)


def test_the_table_covers_every_source_with_at_least_60_cases():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
    assert all(group for group in (CLI, ENV, CONFIG, FILES, IRT))
