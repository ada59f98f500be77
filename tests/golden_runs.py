"""Golden runs: each protocol run end to end through ``run.main`` against the stand-in endpoint, normalized.

A refactor must not change behaviour. The stand-in (:mod:`tests.standin_endpoint`) answers from the request
content only, so a run's outputs are a function of the code: the same prompts get the same answers. For each
case below this module runs the CLI in-process (every role a distinct model name on one stand-in, so the log
tells roles apart), then keeps what behaviour means and drops what varies between runs:

* ``records``: each unit's result record (status and protocol fields), by unit id;
* ``requests``: per unit (``-`` = outside units: pre-flight, KB build), the sorted ``model:hash`` of every
  exchange's messages from the event log, so a changed prompt or an added or dropped call shows in its unit;
* ``endpoint``: the multiset of the stand-in's content keys (messages and tool schema names) per model;
* ``summary``: ``summary.json``; ``benchmark``: ATAD's generated benchmark.

Wall times, latencies, timestamps and ``llm_seconds`` are dropped; the run id, the run and output folders,
the checkout and the stand-in's URL are replaced by placeholders. Nothing depends on the order units finish in.

Re-recording (``python -m tests.golden_runs --record [CASE ...]``) is legitimate only for an intended
behaviour change (a prompt rewritten on purpose, a fixed bug that changes results); the commit that updates
``tests/golden/`` says which change and why. Never re-record to make a refactor pass.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dyneval import cli
from tests.standin_endpoint import StandIn, _Draw, content_key

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"

#: One role per distinct model name on the stand-in.
ROLES = ("target", "evaluator", "teacher", "orchestrator", "student", "grader")

#: Case name -> protocol arguments (``{URL}`` = the stand-in's base URL, ``{REPO}`` = this checkout).
CASES: dict[str, list[str]] = {
    "atad_generate": ["--protocol", "atad", "--per-task", "1", "--concurrency", "2"],
    "atad_evaluate": [
        "--protocol",
        "atad",
        "--evaluate",
        "examinee_a@{URL}",
        "examinee_b@{URL}",
        "--benchmark",
        "{REPO}/samples/atad/benchmark.jsonl",
        "--concurrency",
        "2",
    ],
    "judgeagent": ["--protocol", "judgeagent", "--limit", "1"],
    "interview": ["--protocol", "interview", "--limit", "4", "--concurrency", "2"],
    # Sessions never repeat a question the model met in an earlier session: one at a time, in plan order.
    "llmeval": [
        "--protocol",
        "llmeval",
        "--questions",
        "4",
        "--paradigm",
        "all",
        "--reference-model",
        "reference@{URL}",
        "--concurrency",
        "1",
    ],
}

#: Keys whose values are timings or clock readings.
VOLATILE = {
    "wall_s",
    "own_wall_s",
    "llm_seconds",
    "latency_s",
    "ts",
    "session_wall_s",
    "unit_wall_s_total",
    "avg_seconds_per_seed_question",
}

_TEACHER_TOOL = re.compile(r"^T[1-7]Problem$")
_NUMBERED = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def _tool_call(body: dict[str, Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_" + content_key(body)[:12],
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def _atad_args(props: dict[str, Any], draw: _Draw) -> dict[str, Any]:
    """A well-formed problem or student answer; answers 1 or 2, so students solve about half and escalate."""
    args: dict[str, Any] = {}
    for key in props:
        if key in ("sentences", "choices"):
            args[key] = [f"{draw.words(3, 6).capitalize()} {i}." for i in range(1, 6)]
        elif key == "sentence":
            args[key] = f"{draw.words(2, 4).capitalize()} ___ {draw.words(2, 4)}."
        elif key in ("first", "second"):
            args[key] = f"{draw.words(6, 10).capitalize()}."
        elif key == "answer":
            args[key] = draw.rng.randint(1, 2)
        elif key == "coherent":
            args[key] = draw.rng.random() < 0.5
        elif key == "explanation":
            args[key] = draw.words() + "."
    return args


def _entity_args(body: dict[str, Any], draw: _Draw) -> dict[str, Any]:
    """Entities copied from each numbered text (none for about one text in five, so both sources occur)."""
    prompt = str(body["messages"][-1].get("content") or "")
    marks = list(_NUMBERED.finditer(prompt))
    labeled = []
    for mark, after in zip(marks, marks[1:] + [None]):
        text = prompt[mark.end() : after.start() if after else len(prompt)].split("\n\n")[0]
        words = sorted({w for w in re.findall(r"[A-Za-z]{6,}", text)})
        if words and draw.rng.random() >= 0.2:
            labeled.append({"n": int(mark.group(1)), "entities": draw.rng.sample(words, min(3, len(words)))})
    return {"labeled": labeled}


def respond(body: dict[str, Any]) -> dict[str, Any] | None:
    """Replies the generic stand-in cannot give, still drawn from the request content only.

    ATAD problems must pass the structure checks (list lengths, answer range, the blank), or every problem is
    discarded before an orchestrator or a student sees it; JudgeAgent's entity labels must occur in their
    texts, or the context graph is built from the keyword fallback alone. Everything else: the generic reply.
    """
    tools = body.get("tools") or []
    name = tools[0]["function"]["name"] if tools else ""
    draw = _Draw(content_key(body))
    if _TEACHER_TOOL.match(name) or name in ("IndexAnswer", "OrderAnswer"):
        return _tool_call(body, name, _atad_args(tools[0]["function"]["parameters"]["properties"], draw))
    if name == "EntityLabels":
        return _tool_call(body, name, _entity_args(body, draw))
    return None


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _model_name(spec: str) -> str:
    return str(spec).split("@", 1)[0]


class _Placeholders:
    """Replaces run-specific strings (paths, run id, URL) in keys and values; drops volatile keys."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = sorted(((old, new) for old, new in pairs if old), key=lambda p: -len(p[0]))

    def text(self, value: str) -> str:
        for old, new in self.pairs:
            value = value.replace(old, new)
        return value

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self.text(str(k)): self(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def collect(run_dir: Path, out: Path, url: str, endpoint: list[tuple[str, str]]) -> dict[str, Any]:
    """The normalized outputs of one finished run."""
    clean = _Placeholders(
        [
            (url, "{URL}"),
            (str(run_dir), "{RUN_DIR}"),
            (str(out), "{OUT}"),
            (str(REPO), "{REPO}"),
            (run_dir.name, "{RUN_ID}"),
        ]
    )
    records = {r["unit_id"]: clean(r) for r in _jsonl(run_dir / "results.jsonl")}
    requests: dict[str, list[str]] = {}
    for event in _jsonl(run_dir / "events.jsonl"):
        messages = [[m.get("role"), m.get("content")] for m in event.get("messages") or []]
        requests.setdefault(event["unit"], []).append(f"{_model_name(event['model'])}:{_digest(clean(messages))}")
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    summary.pop("run_id", None)
    result = {
        "records": dict(sorted(records.items())),
        "requests": {unit: sorted(keys) for unit, keys in sorted(requests.items())},
        "endpoint": {
            model: dict(sorted(Counter(k[:16] for m, k in endpoint if m == model).items()))
            for model in sorted({m for m, _ in endpoint})
        },
        "summary": clean(summary),
    }
    benchmark = _jsonl(run_dir / "benchmark.jsonl")
    if benchmark:
        result["benchmark"] = sorted((clean(r) for r in benchmark), key=lambda r: json.dumps(r, sort_keys=True))
    return result


@contextlib.contextmanager
def _clean_environment() -> Iterator[None]:
    """No ``DYNEVAL_*`` settings from the caller's shell leak into the run."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("DYNEVAL_")}
    try:
        yield
    finally:
        os.environ.update(saved)


def run_cli(name: str, args: list[str], standin: StandIn, out: Path) -> None:
    """``dyneval ARGS`` in-process with every role on ``standin`` and ``--out OUT`` (``{URL}`` and ``{REPO}`` in
    ``args`` filled in), its console captured; a RuntimeError with that console when it does not exit 0."""
    argv = [a.replace("{URL}", standin.url).replace("{REPO}", str(REPO)) for a in args]
    argv += [x for role in ROLES for x in (f"--{role}", standin.spec(role))] + ["--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()) as console, contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    if code != 0:
        raise RuntimeError(f"{name}: run.py exited {code}\n{console.getvalue()}\n{err.getvalue()}")


def run_case(name: str, workdir: Path) -> dict[str, Any]:
    """Run one case in-process against a fresh stand-in; its normalized outputs."""
    out = workdir / name
    with StandIn(respond=respond) as standin, _clean_environment():
        run_cli(name, CASES[name], standin, out)
        endpoint = [(r.model, r.key) for r in standin.ok_requests()]
        runs = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
        if len(runs) != 1:
            raise RuntimeError(f"{name}: expected one run directory under {out}, found {runs}")
        return collect(runs[0], out, standin.url, endpoint)


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.json"


def dump(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def first_difference(golden: Any, actual: Any, path: str = "") -> str | None:
    """The first path at which ``actual`` departs from ``golden``, with both values (None if equal)."""
    if isinstance(golden, dict) and isinstance(actual, dict):
        for key in sorted(set(golden) | set(actual)):
            if key not in actual:
                return f"{path}.{key}: missing (golden has {json.dumps(golden[key])[:300]})"
            if key not in golden:
                return f"{path}.{key}: unexpected (now {json.dumps(actual[key])[:300]})"
            found = first_difference(golden[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(golden, list) and isinstance(actual, list):
        for i, (g, a) in enumerate(zip(golden, actual)):
            found = first_difference(g, a, f"{path}[{i}]")
            if found:
                return found
        if len(golden) != len(actual):
            return f"{path}: golden has {len(golden)} items, now {len(actual)}"
        return None
    if golden != actual:
        return f"{path}: golden {json.dumps(golden)[:300]} != now {json.dumps(actual)[:300]}"
    return None


#: Sections in the order a mismatch is explained: the readable ones first, the request hashes last.
SECTIONS = ("records", "summary", "benchmark", "requests", "endpoint")


def explain(name: str, golden: dict[str, Any], actual: dict[str, Any], lines: int = 60) -> str:
    """A readable account of a mismatch: the first differing path of each section, and a unified diff of the
    first differing section."""
    differing = [(k, first_difference(golden.get(k), actual.get(k), k)) for k in SECTIONS]
    differing = [(k, where) for k, where in differing if where]
    if not differing:
        return f"{name}: unchanged"
    first = differing[0][0]
    diff = list(
        difflib.unified_diff(
            dump(golden.get(first)).splitlines(),
            dump(actual.get(first)).splitlines(),
            f"golden/{name}.json: {first}",
            "this run",
            lineterm="",
            n=2,
        )
    )
    more = f"\n... {len(diff) - lines} more diff lines" if len(diff) > lines else ""
    return "\n".join([f"{name}: behaviour changed", *(f"  at {where}" for _, where in differing), *diff[:lines]]) + more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden_runs", description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help=f"cases to run (default all: {', '.join(CASES)})")
    parser.add_argument("--record", action="store_true", help="write tests/golden/CASE.json (intended changes only)")
    parser.add_argument("--golden-dir", type=Path, default=GOLDEN, help="where the golden files are")
    args = parser.parse_args(argv)
    import dyneval.nodes

    print(f"code under test: {Path(dyneval.nodes.__file__).resolve().parents[1]}", file=sys.stderr)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="dyneval-golden-") as tmp:
        for name in args.cases or CASES:
            actual = run_case(name, Path(tmp))
            path = args.golden_dir / f"{name}.json"
            if args.record:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(dump(actual), encoding="utf-8")
                print(f"recorded {path}", file=sys.stderr)
            elif not path.exists():
                print(f"{name}: no golden file {path}", file=sys.stderr)
                failed += 1
            else:
                golden = json.loads(path.read_text(encoding="utf-8"))
                if golden != actual:
                    print(explain(name, golden, actual), file=sys.stderr)
                    failed += 1
                else:
                    print(f"{name}: unchanged", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
