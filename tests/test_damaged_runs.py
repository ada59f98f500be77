"""Foreign and damaged run folders beside real ones (:class:`stores.rundir.DamagedRun`).

Each damaged folder is a copy of one real interview run (made through the CLI against the stand-in endpoint) with
one file spoiled as a kill, a disk or another tool could spoil it. The run index notes each damaged run it reads
on that run's row and lists the others; a new run beside them ends as it would alone; ``--compare``, ``--export``,
``--detect``, ``--rescore`` and JudgeAgent's IRT calibration of a damaged run stop before writing anything, with one
line naming the file, and the line and field that are wrong (exit code 2).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dyneval.cli import main
from dyneval.stores.rundir import MAX_JSON_BYTES, DamagedRun
from tests.standin_runs import two_unit_interview


def _edit(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")


def _edit_line(path: Path, change: Callable[[dict[str, Any]], Any], *, raw: bool = False) -> None:
    """``change`` applied to the first line of a JSONL file (its result written as JSON, or as is when ``raw``)."""
    first, *rest = path.read_text(encoding="utf-8").splitlines()
    changed = change(json.loads(first))
    path.write_text("\n".join([changed if raw else json.dumps(changed), *rest]) + "\n", encoding="utf-8")


def _first_interval(summary: dict[str, Any]) -> dict[str, Any]:
    intervals = summary["metrics"]["intervals"]
    intervals[next(iter(intervals))] = 0.5
    return summary


#: name -> (how the run's folder is spoiled, the file the one line names, the field it names or None).
DAMAGE: dict[str, tuple[Callable[[Path], None], str, str | None]] = {
    "summary cut short": (
        lambda d: (d / "summary.json").write_bytes((d / "summary.json").read_bytes()[:200]),
        "summary.json",
        None,
    ),
    "summary a list": (lambda d: _edit(d / "summary.json", lambda s: [s]), "summary.json", None),
    "status_counts a list": (
        lambda d: _edit(d / "summary.json", lambda s: s | {"status_counts": [["ok", 2]]}),
        "summary.json",
        "status_counts",
    ),
    "interval a number": (lambda d: _edit(d / "summary.json", _first_interval), "summary.json", "metrics.intervals"),
    "summary of another protocol": (
        lambda d: _edit(d / "summary.json", lambda s: s | {"protocol": "atad"}),
        "summary.json",
        "protocol",
    ),
    "summary nested too deep": (lambda d: (d / "summary.json").write_text("[" * 100_000), "summary.json", None),
    "summary over the bound": (
        lambda d: (d / "summary.json").write_text(json.dumps({"protocol": "interview", "pad": " " * MAX_JSON_BYTES})),
        "summary.json",
        None,
    ),
    "roles a string": (
        lambda d: _edit(d / "config.json", lambda c: c | {"roles": "target=gpt"}),
        "config.json",
        "roles",
    ),
    "config a list": (lambda d: _edit(d / "config.json", lambda c: [c]), "config.json", None),
    "config of another tool": (
        lambda d: (d / "config.json").write_text('{"architectures": ["BertModel"]}'),
        "config.json",
        "protocol",
    ),
    "units.jsonl not JSONL": (lambda d: (d / "units.jsonl").write_text("unit one\nunit two\n"), "units.jsonl", None),
    "plan line a list": (lambda d: _edit_line(d / "units.jsonl", lambda u: [u]), "units.jsonl", None),
    "record without unit_id": (
        lambda d: _edit_line(d / "results.jsonl", lambda r: {k: v for k, v in r.items() if k != "unit_id"}),
        "results.jsonl",
        "unit_id",
    ),
    "answers a string": (
        lambda d: _edit_line(d / "results.jsonl", lambda r: r | {"seed_interactions": "none"}),
        "results.jsonl",
        "seed_interactions",
    ),
    "record cut inside the file": (
        lambda d: _edit_line(d / "results.jsonl", lambda r: json.dumps(r)[:40], raw=True),
        "results.jsonl",
        None,
    ),
}
#: The cases the run index reads for a finished run (its config.json and summary.json).
INDEXED = [name for name, (_, file, _) in DAMAGE.items() if file in ("summary.json", "config.json")]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A finished interview run of two units, made through the CLI."""
    out = tmp_path_factory.mktemp("template")
    assert two_unit_interview(out) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return run_dir


def damaged(template: Path, out: Path, name: str) -> Path:
    """A copy of ``template`` under ``out`` spoiled as ``DAMAGE[name]`` says (named after the case)."""
    run = out / f"20260101-000000-interview-{name.replace(' ', '-')}"
    shutil.copytree(template, run)
    DAMAGE[name][0](run)
    return run


def index_rows(out: Path) -> dict[str, dict[str, Any]]:
    """The rows of ``out/index.html`` by run id, as the page holds them."""
    page = (out / "index.html").read_text(encoding="utf-8")
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    return {row["run_id"]: row for row in json.loads(data.group(1))["runs"]}


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def names_the_damage(err: str, run: Path, name: str) -> bool:
    _, file, field = DAMAGE[name]
    return str(run / file) in err and (field is None or f"field '{field}" in err)


def test_a_new_run_beside_damaged_runs_ends_as_alone_and_its_index_notes_each_damaged_run(template, tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    runs = {name: damaged(template, out, name) for name in DAMAGE}
    assert two_unit_interview(out) == 0
    rows = index_rows(out)
    (new,) = set(rows) - {r.name for r in runs.values()}
    assert rows[new]["status"] == "finished: ok=2" and rows[new]["headline"]
    for name in INDEXED:
        status = rows[runs[name].name]["status"]
        assert status.startswith(f"not readable as a run: ./{runs[name].name}/{DAMAGE[name][1]}"), (name, status)
    for name in set(DAMAGE) - set(INDEXED):  # the index reads no plan or record of a finished run
        assert rows[runs[name].name]["status"] == "finished: ok=2", name


def test_index_lists_damaged_runs_with_a_note_and_a_partial_one_by_its_damaged_plan(template, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    runs = {name: damaged(template, out, name) for name in INDEXED}
    partial = damaged(template, out, "units.jsonl not JSONL")
    (partial / "summary.json").unlink()  # running, or killed: the index counts its plan and records
    assert main(["--index", str(out)]) == 0
    rows = index_rows(out)
    assert set(rows) == {*(r.name for r in runs.values()), partial.name}
    for name, run in runs.items():
        _, file, field = DAMAGE[name]
        status = rows[run.name]["status"]
        assert status.startswith(f"not readable as a run: ./{run.name}/{file}") and "\n" not in status, status
        assert field is None or f"field '{field}" in status
        assert rows[run.name]["headline"] == [] and rows[run.name]["view"] is None
    assert rows[partial.name]["status"].startswith(f"not readable as a run: ./{partial.name}/units.jsonl, record 1")


@pytest.mark.parametrize("name", list(DAMAGE))
def test_compare_and_export_of_a_damaged_run_exit_2_with_one_line_and_write_nothing(template, tmp_path, capsys, name):
    out = tmp_path / "runs"
    out.mkdir()
    good, bad = shutil.copytree(template, out / "good"), damaged(template, out, name)
    before = sorted(out.rglob("*"))
    assert main(["--compare", str(good), str(bad), "--out", str(out)]) == 2
    err = one_line(capsys)
    assert names_the_damage(err, bad, name) and "(from --compare)" in err, err
    assert main(["--export", bad.name, "--out", str(out)]) == 2
    err = one_line(capsys)
    assert names_the_damage(err, bad, name) and "(from --export)" in err, err
    assert sorted(out.rglob("*")) == before  # no page, no export folder


@pytest.mark.parametrize("name", INDEXED)
def test_detect_with_a_damaged_pilot_exits_2_with_one_line(template, tmp_path, capsys, name):
    bad = damaged(template, tmp_path, name)
    assert main(["--detect", "0.1", "--pilot", str(bad)]) == 2
    err = one_line(capsys)
    assert names_the_damage(err, bad, name) and "(from --pilot)" in err, err


@pytest.mark.parametrize(
    "file, change, field",
    [
        ("events.jsonl", lambda e: {k: v for k, v in e.items() if k != "role"}, "role"),
        ("events.jsonl", lambda e: e | {"messages": "hello"}, "messages"),
        ("config.json", None, "roles"),
    ],
)
def test_rescore_of_a_damaged_source_exits_2_with_one_line_and_makes_no_run(
    template, tmp_path, capsys, file, change, field
):
    source = shutil.copytree(template, tmp_path / "runs" / template.name)
    if change is None:
        DAMAGE["roles a string"][0](source)
    else:
        _edit_line(source / file, change)
    before = sorted((tmp_path / "runs").iterdir())
    assert (
        main(
            [
                "--protocol",
                "interview",
                "--rescore",
                source.name,
                "--out",
                str(tmp_path / "runs"),
                "--evaluator",
                "other@http://127.0.0.1:9/v1",
                "--skip-preflight",
            ]
        )
        == 2
    )
    err = one_line(capsys)
    assert str(source / file) in err and f"field '{field}" in err and "(from --rescore)" in err, err
    assert sorted((tmp_path / "runs").iterdir()) == before


def bound_by_permissions(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``dyneval ARGV`` in a process that file permissions bind: root reads and writes anywhere unless it runs
    without the capabilities that override them."""
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*drop, sys.executable, "-m", "dyneval", *argv], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.parametrize("flag", ["--export", "--compare", "--index"])
def test_a_folder_the_command_cannot_write_exits_2_naming_it_and_writes_nothing(template, tmp_path, flag):
    out = tmp_path / "runs"
    out.mkdir()
    run, other = shutil.copytree(template, out / template.name), shutil.copytree(template, out / "other")
    argv, folder, locked = {
        "--export": (["--export", str(run)], run / "export", run),
        "--compare": (["--compare", str(run), str(other), "--out", str(out)], out, out),
        "--index": (["--index", str(out)], out, out),
    }[flag]
    before = sorted(out.rglob("*"))
    locked.chmod(0o555)
    try:
        done = bound_by_permissions(argv, tmp_path)
    finally:
        locked.chmod(0o755)
    err = done.stderr.strip()
    assert done.returncode == 2 and err.startswith("error: ") and "\n" not in err, done.stderr
    assert f"{flag}: cannot write in {folder} (Permission denied)" in err, err
    assert sorted(out.rglob("*")) == before


def test_index_lists_a_folder_it_cannot_look_into_saying_so(template, tmp_path):
    out = tmp_path / "runs"
    run, closed = shutil.copytree(template, out / template.name), out / "20260101-000000-interview-closed"
    shutil.copytree(template, closed)
    closed.chmod(0)
    try:
        done = bound_by_permissions(["--index", str(out)], tmp_path)
    finally:
        closed.chmod(0o755)
    assert done.returncode == 0, done.stderr
    rows = index_rows(out)
    assert rows[closed.name]["status"] == (
        f"not readable as a run: ./{closed.name}/config.json: cannot be read (Permission denied)"
    )
    assert rows[run.name]["status"] == "finished: ok=2"


def test_irt_calibration_from_a_damaged_run_is_refused_naming_its_file(tmp_path):
    from dyneval.protocols.judgeagent.irt import calibrate_runs
    from tests.test_judgeagent_irt import POOL, fake_run, write_run

    qs = POOL[:3]
    cases = {
        "results.jsonl": (lambda r: r | {"base": "qA right"}, "base"),
        "units.jsonl": (lambda u: u | {"input": {"batch": [{"id": "qA", "options": 4}]}}, "input.batch.0.options"),
    }
    for file, (change, field) in cases.items():
        run = write_run(tmp_path / file, "m1@http://127.0.0.1:9/v1", qs, {"qA": "correct"})
        _edit_line(run / file, change)
        with pytest.raises(DamagedRun) as err:
            calibrate_runs(fake_run(tmp_path, "me@http://127.0.0.1:9/v1", irt_runs=str(run)), qs, "2pl", 1)
        assert (err.value.file, err.value.field, err.value.setting) == (str(run / file), field, "--irt-runs")


@pytest.mark.parametrize(
    "protocol, metrics",
    [
        ("atad", {"table1": ["model-a"]}),  # Table 1's accuracy per evaluated model: a mapping in a run
        ("atad", {"table1": "model-a"}),
        ("judgecheck", {"raters": ["m0"]}),  # each judge's measures under its key
    ],
)
def test_a_headline_over_a_mapping_that_is_not_one_has_no_value_instead_of_a_crash(protocol, metrics):
    from dyneval.results.view.adapters import adapter
    from dyneval.results.view.data import headline_metrics

    assert headline_metrics(adapter(protocol), metrics) == []


@pytest.mark.parametrize("config", ["[1, 2]", '{"protocol": "interview", "roles": "target"}', '{"protocol": '])
def test_resume_of_a_run_whose_own_config_is_damaged_is_one_line_and_exit_2(tmp_path, capsys, config):
    """``--resume`` reads the run's ``config.json`` first: a damaged one is named, not a traceback."""
    run = tmp_path / "20260101-000000-interview-00000000"
    run.mkdir()
    (run / "config.json").write_text(config)
    assert main(["--protocol", "interview", "--resume", run.name, "--out", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "config.json" in line and "--resume" in line


def test_a_run_file_removed_between_its_scan_and_its_read_is_a_damaged_run_naming_it(tmp_path):
    from dyneval.stores.rundir import Jsonl
    from dyneval.stores.runfiles import Read

    path = tmp_path / "results.jsonl"
    path.write_text('{"unit_id": "u1"}\n', encoding="utf-8")
    results = Jsonl(path, Read, flag="--resume")
    offsets = [offset for offset, _ in results.scan()]
    path.unlink()
    with pytest.raises(DamagedRun, match="removed") as caught:
        list(results.read(offsets))
    assert caught.value.file == str(path)
