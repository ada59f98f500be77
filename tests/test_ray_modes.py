"""``--executor ray`` in the protocols' other modes (``custom_run``): ATAD's ``--evaluate`` runs its units on the
Ray runners, as a batch run does, and gives a thread pool's results; a mode with no units (llmeval's exam server
and bank modes, JudgeAgent's ``--build-kb-only``) or whose units need this process (interview's human interviewee
answers on its terminal) refuses the flag in one line, exit 2, before any folder is made.

The evaluation runs on a loopback cluster (a head and one worker node, ``tests/ray_cluster.py``), a throw-away
PostgreSQL and the stand-in endpoint answering from the request content (``tests/golden_runs.respond``), over the
shipped hand-written benchmark (7 problems, 14 answers of two examinees).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from dyneval import cli
from dyneval.gate import EXIT_BAD_INPUT
from tests.golden_runs import REPO, ROLES, respond
from tests.ray_cluster import RayCluster, ray_cluster
from tests.ray_runs import records
from tests.standin_endpoint import StandIn
from tests.test_ray_executor import _results

EXAMINEES = ("examinee_a", "examinee_b")


@pytest.fixture(scope="module")
def cluster() -> Any:
    with ray_cluster(workers=1, cpus_per_worker=1) as made:
        yield made


@pytest.fixture(scope="module")
def standin() -> Any:
    with StandIn(respond=respond, latency_s=0.01) as server:
        yield server


def _evaluate(standin: StandIn, out: Path, *executor: str, evaluated: list[str] | None = None) -> Path:
    """``dyneval --protocol atad --evaluate`` of both examinees (or ``evaluated``) on the shipped benchmark; its run
    folder."""
    code = cli.main(
        [
            "--protocol",
            "atad",
            "--evaluate",
            *(evaluated or [standin.spec(m) for m in EXAMINEES]),
            "--benchmark",
            str(REPO / "samples/atad/benchmark.jsonl"),
            "--concurrency",
            "2",
            "--out",
            str(out),
            *[x for role in ROLES for x in (f"--{role}", standin.spec(role))],
            *executor,
        ]
    )
    assert code == 0
    return next(out.glob("*/summary.json")).parent


def _answers(run_dir: Path) -> list[dict[str, Any]]:
    """The examinees' exchanges in the run's log (the driver's pre-flight pings left out)."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e.get("step") != "preflight"]


def test_atad_evaluation_with_executor_ray_answers_on_the_ray_runners_as_a_thread_pool_does(
    cluster: RayCluster, standin: StandIn, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    threads_dir = _evaluate(standin, tmp_path / "threads")
    ray_dir = _evaluate(
        standin,
        tmp_path / "ray",
        "--postgres-dsn",
        fresh_postgres_db("ray_atad_evaluate"),
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
    )

    # every unit's exchanges were made by a runner (named in the driver's log), none by the driver's threads
    answers = _answers(ray_dir)
    assert len(answers) == len(_answers(threads_dir)) >= 14
    assert all(e.get("worker") for e in answers), [e for e in answers if not e.get("worker")][:2]
    assert {e["unit"] for e in answers} == {r["unit_id"] for r in records(ray_dir)}
    assert all("worker" not in e for e in _answers(threads_dir))

    # the same answers, graded the same, and the same tables
    assert _results(records(ray_dir)) == _results(records(threads_dir))
    ray_metrics = json.loads((ray_dir / "summary.json").read_text())["metrics"]
    assert ray_metrics == json.loads((threads_dir / "summary.json").read_text())["metrics"]


def test_an_agent_graph_is_imported_and_evaluated_on_the_ray_runners_as_on_threads(
    cluster: RayCluster, standin: StandIn, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    """A ``graph:MODULE:ATTR`` agent goes to the runners as its reference, each worker importing it (and the
    ``--state-check`` function): its turns are made there, on the threads a thread pool gives them, and end in the
    same records, the checks' verdicts included."""
    agent, check = ["graph:tests.toy_agents:graph"], ("--state-check", "tests.toy_agents:looked_up")
    threads_dir = _evaluate(standin, tmp_path / "threads", *check, evaluated=agent)
    ray_dir = _evaluate(
        standin,
        tmp_path / "ray",
        *check,
        *("--postgres-dsn", fresh_postgres_db("ray_agent_evaluate"), "--executor", "ray"),
        *("--ray-address", cluster.address),
        evaluated=agent,
    )
    turns = [e for e in _answers(ray_dir) if e.get("agent")]
    assert len(turns) == 7 and all(e.get("worker") for e in turns)  # one per problem, each on a runner
    assert {e["agent"]["thread_id"] for e in turns} == {f"{ray_dir.name}/{r['unit_id']}" for r in records(ray_dir)}
    assert all([m["type"] for m in e["agent"]["emitted"]] == ["ai", "tool", "ai"] for e in turns)
    assert {c["verdict"] for r in records(ray_dir) for c in r["state_checks"].values()} == {"correct"}
    same = [json.loads(json.dumps(records(d)).replace(d.name, "RUN")) for d in (ray_dir, threads_dir)]
    assert _results(same[0]) == _results(same[1])  # the agent's threads, named by the run, and their states too


def test_a_run_started_in_the_users_folder_finds_its_relative_agent_file_and_out_folder_on_the_ray_runners(
    cluster: RayCluster, standin: StandIn, fresh_postgres_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``graph:my_app/agent.py:graph``, ``--state-check my_app.agent:FN`` (a module of that folder) and ``--out
    ray``, named from the user's project folder: the runners, whose nodes were started in another folder, import
    the file and the module the driver means and write to the driver's run folder, and the run ends in a thread
    pool's records, the references in them as the user gave them."""
    project = tmp_path / "project"
    (project / "my_app").mkdir(parents=True)
    shutil.copy(REPO / "tests/toy_agents.py", project / "my_app/agent.py")
    monkeypatch.chdir(project)
    assert Path.cwd() != REPO and not Path("tests/toy_agents.py").exists()  # the cluster's nodes run in REPO
    agent, check = ["graph:my_app/agent.py:graph"], ("--state-check", "my_app.agent:looked_up")
    threads_dir = _evaluate(standin, Path("threads"), *check, evaluated=agent)
    ray_dir = _evaluate(
        standin,
        Path("ray"),
        *check,
        *("--postgres-dsn", fresh_postgres_db("ray_agent_file"), "--executor", "ray"),
        *("--ray-address", cluster.address),
        evaluated=agent,
    )
    assert (project / ray_dir / "library.log").exists() and not (REPO / "ray").exists()
    turns = [e for e in _answers(ray_dir) if e.get("agent")]
    assert len(turns) == 7 and all(e.get("worker") and e["model"] == agent[0] for e in turns)
    assert {c["verdict"] for r in records(ray_dir) for c in r["state_checks"].values()} == {"correct"}
    same = [json.loads(json.dumps(records(d)).replace(d.name, "RUN")) for d in (ray_dir, threads_dir)]
    assert _results(same[0]) == _results(same[1])


def test_relative_prompts_pricing_and_cache_folders_are_the_drivers_on_the_ray_runners(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--prompts mine``, ``--pricing prices.yaml`` and ``--cache-dir cache-...``, named from the user's folder:
    the runners, whose nodes were started in another folder, ask the examinees with the user's prompt (not,
    silently, the shipped one), price their answers from the user's file and cache them in the user's folder, as
    the thread pool does."""
    monkeypatch.chdir(tmp_path)
    marker = "Answer as the user's own prompt asks."
    shipped = (REPO / "prompts/atad/student_solve.yaml").read_text()
    Path("mine/atad").mkdir(parents=True)
    Path("mine/atad/student_solve.yaml").write_text(shipped.replace("You solve", f"{marker} You solve"))
    Path("prices.yaml").write_text("models:\n" + "".join(f"  {m}: {{input: 1.0, output: 2.0}}\n" for m in EXAMINEES))
    solved: list[tuple[str, bool]] = []  # (model, the request carries the marker) of each examinee's answer

    def spy(body: dict[str, Any]) -> dict[str, Any] | None:
        if body.get("model") in EXAMINEES and body.get("tools"):  # not the driver's plain pre-flight ping
            solved.append((body["model"], marker in json.dumps(body["messages"])))
        return respond(body)

    ray = ("--executor", "ray", "--ray-address", cluster.address, "--postgres-dsn", fresh_postgres_db("ray_paths"))
    runs = {}
    with StandIn(respond=spy) as standin:
        for name, executor in (("threads", ()), ("ray", ray)):
            mine = ("--prompts", "mine", "--pricing", "prices.yaml", "--cache", "--cache-dir", f"cache-{name}")
            runs[name] = _evaluate(standin, Path(name), *mine, *executor)
            assert len(solved) == 14 and all(marked for _, marked in solved), solved
            solved.clear()
    assert Path("cache-ray").is_dir() and not (REPO / "cache-ray").exists()
    answers = _answers(runs["ray"])
    assert all(e.get("worker") for e in answers) and all(e["cost_usd"] for e in answers)  # priced from prices.yaml
    assert _results(records(runs["ray"])) == _results(records(runs["threads"]))


def test_a_relative_sqlite_bank_db_is_the_drivers_bank_on_the_ray_runners(
    cluster: RayCluster, standin: StandIn, fresh_postgres_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llmeval's ``--bank-db sqlite:///bank.sqlite`` named from the user's folder: the driver imports ``--bank``
    there and the runners, whose nodes were started in another folder, draw their sessions' questions from that
    bank (not from an empty one made in their own folder), while the run's config and report show it as given."""
    monkeypatch.chdir(tmp_path)
    bank_db = "sqlite:///bank.sqlite"
    stray = REPO / "bank.sqlite"  # where the old runners made their own, empty, bank
    ray = ("--executor", "ray", "--ray-address", cluster.address, "--postgres-dsn", fresh_postgres_db("ray_bank"))
    try:
        code = cli.main(
            [
                *("--protocol", "llmeval", "--questions", "4", "--paradigm", "zero-shot", "--concurrency", "1"),
                *("--bank", str(REPO / "samples/llmeval/bank.jsonl"), "--near-dup-threshold", "0"),
                *("--bank-db", bank_db, "--target", standin.spec("target"), "--evaluator", standin.spec("evaluator")),
                *("--out", "runs", *ray),
            ]
        )
        made_stray = stray.exists()
    finally:
        for left in (stray, *(stray.with_name(stray.name + end) for end in ("-shm", "-wal"))):
            left.unlink(missing_ok=True)
    assert code == 0 and not made_stray
    (run_dir,) = [p.parent for p in Path("runs").glob("*/summary.json")]
    assert [(r["status"], r["allocated"]) for r in records(run_dir)] == [("ok", 4)]
    assert all(e.get("worker") for e in _answers(run_dir))
    assert json.loads((run_dir / "config.json").read_text())["params"]["bank_db"] == bank_db
    assert f"imported into {bank_db};" in (run_dir / "bank_source.txt").read_text()


def test_judgeagent_without_kb_extends_from_the_questions_references_on_the_ray_runners_not_the_sample_kb(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path
) -> None:
    """JudgeAgent with no ``--kb`` and questions that carry references: the driver's preparation makes the knowledge
    base from the references after the runners started, and the runners' extension questions come from its context
    graph (not, silently, from the shipped sample knowledge base, which no request of the run may carry)."""
    marker = "Vellmark tide organ"
    references = [
        f"The {marker} is a row of bronze pipes on the Osterby pier that sound as the tide rises.",
        f"The {marker} was cast by the foundry of Ida Brenne and tuned to the harbour bell.",
    ]
    data = tmp_path / "questions.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"id": f"q{i}", "question": f"Question {i} on the pier?", "answer": "bronze", "references": [ref]}
            )
            + "\n"
            for i, ref in enumerate(references)
        )
    )
    sample_kb = [  # the start of every paragraph of the shipped sample knowledge base
        para[:50]
        for p in sorted((REPO / "samples/judgeagent/kb").glob("*.md"))
        for para in p.read_text().split("\n\n")
        if len(para) > 50 and not para.startswith("#")
    ]
    bodies: list[str] = []

    def spy(body: dict[str, Any]) -> dict[str, Any] | None:
        bodies.append(json.dumps(body["messages"]))
        return respond(body)

    ray = ("--executor", "ray", "--ray-address", cluster.address, "--postgres-dsn", fresh_postgres_db("ray_kb_refs"))
    with StandIn(respond=spy) as standin:
        code = cli.main(
            [
                *("--protocol", "judgeagent", "--data", str(data), "--batch-size", "2", "--rounds", "1"),
                *("--out", str(tmp_path / "runs"), "--skip-preflight"),
                *[x for role in ROLES for x in (f"--{role}", standin.spec(role))],
                *ray,
            ]
        )
    assert code == 0
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/summary.json")]
    assert json.loads((run_dir / "kb_stats.json").read_text())["kb"].endswith("kb_references.jsonl")
    assert not [b for b in bodies if any(text in b for text in sample_kb)]  # the sample KB's chunks: no request
    asked = [b for b in bodies if "Design one question and its correct answer" in b]  # the extension questions
    assert asked and all(marker in b for b in asked)
    assert {e["step"] for e in _answers(run_dir) if e.get("worker")} >= {"generate_question"}  # made on a runner
    assert records(run_dir)[0]["status"] in ("ok", "ungraded")


def test_a_rescore_on_the_ray_runners_replays_its_source_from_a_relative_out_folder(
    cluster: RayCluster, fresh_postgres_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--rescore`` under the default relative ``--out`` (``runs``): each runner reads the source run's log from
    the driver's folder, so no unit diverges and the target is asked nothing."""
    monkeypatch.chdir(tmp_path)
    with StandIn(respond=respond) as judges:
        interview = ["--protocol", "interview", "--limit", "1", "--max-questions", "1", "--skip-preflight"]
        roles = ["--target", judges.spec("target"), "--evaluator", judges.spec("judge1")]
        assert cli.main([*interview, *roles]) == 0
        (source,) = [p for p in Path("runs").iterdir() if p.is_dir() and not p.name.startswith("_")]
        judges.requests.clear()
        ray = ["--executor", "ray", "--ray-address", cluster.address]
        ray += ["--postgres-dsn", fresh_postgres_db("ray_rescore")]
        assert cli.main([*interview, "--rescore", source.name, "--grader", judges.spec("judge2"), *ray]) == 0
        assert {r.model for r in judges.requests} == {"judge1", "judge2"}
    (rescored,) = [p for p in Path("runs").iterdir() if p.is_dir() and p != source and not p.name.startswith("_")]
    assert [r["status"] for r in records(rescored)] == ["ok"]


def test_a_relative_agent_file_missing_on_a_worker_names_the_reference_and_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on a machine without the file (here: a driver's folder without it) says which reference, the path
    it tried and on which machine."""
    from dyneval.runtime import driver_folder
    from dyneval.runtime.agents import reference

    monkeypatch.setattr(driver_folder, "_files_from", tmp_path)
    with pytest.raises(ValueError) as missing:
        reference.attribute("my_app/agent.py", "graph", "agent 'graph:my_app/agent.py:graph'")
    said = str(missing.value)
    assert said.startswith("agent 'graph:my_app/agent.py:graph': no file my_app/agent.py: ")
    assert f"looked for {tmp_path / 'my_app/agent.py'} on {socket.gethostname()}" in said and "\n" not in said


def test_an_agent_object_of_the_python_api_refuses_executor_ray_in_one_line_and_leaves_no_folder(
    tmp_path: Path,
) -> None:
    from dyneval import evaluate
    from dyneval.state.errors import InputError
    from tests import toy_agents

    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"exists in this process only.*name it graph:MODULE:ATTR") as refused:
        evaluate(
            "atad",
            evaluate=[toy_agents.app],
            executor="ray",
            postgres_dsn="postgresql://nobody@127.0.0.1:9/none",
            ray_address="127.0.0.1:9",
            out=str(out),
        )
    assert "\n" not in str(refused.value) and not out.exists()


#: A mode that works in this process only (no units; interview's units need its terminal) -> the flags that ask for
#: it (with what it reads, which need not exist: it is refused first).
LOCAL_MODES = {
    "llmeval --serve": ["--protocol", "llmeval", "--serve"],
    "llmeval --admin-token": ["--protocol", "llmeval", "--admin-token"],
    "llmeval --import-only": ["--protocol", "llmeval", "--import-only"],
    "llmeval --export": ["--protocol", "llmeval", "--export", "bank.jsonl"],
    "llmeval --leaderboard": ["--protocol", "llmeval", "--leaderboard"],
    "llmeval --stability": ["--protocol", "llmeval", "--stability"],
    "llmeval --kappa": ["--protocol", "llmeval", "--kappa", "labels.jsonl"],
    "llmeval --contamination": ["--protocol", "llmeval", "--contamination", "public.jsonl"],
    "llmeval --calibrate": ["--protocol", "llmeval", "--calibrate"],
    "llmeval --compare": ["--protocol", "llmeval", "--compare", "a,b"],
    "judgeagent --build-kb-only": ["--protocol", "judgeagent", "--build-kb-only"],
    "interview --interviewee": ["--protocol", "interview", "--interviewee", "human"],
}


@pytest.mark.parametrize("mode", list(LOCAL_MODES))
def test_a_mode_without_units_refuses_executor_ray_in_one_line_and_leaves_no_folder(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = cli.main(
        [
            *LOCAL_MODES[mode],
            "--out",
            str(out),
            "--postgres-dsn",
            "postgresql://nobody@127.0.0.1:9/none",
            "--executor",
            "ray",
            "--ray-address",
            "127.0.0.1:9",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT
    assert len(err.splitlines()) == 1, err
    flag = mode.split()[1]
    assert flag in err and "--executor" in err, err
    assert not out.exists()
