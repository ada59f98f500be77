"""Small defects issue 16 lists: a plan (--dry-run) leaves no run folder; ATAD's report never prints "None s wall"."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import pytest

from dyneval import cli
from tests.golden_runs import ROLES
from tests.standin_endpoint import StandIn

TEACHER_TOOL = re.compile(r"^T[1-7]Problem$")


@pytest.mark.parametrize("protocol", ["atad", "interview", "judgeagent", "llmeval"])
def test_dry_run_prints_the_plan_and_leaves_no_run_folder(protocol, tmp_path):
    out = tmp_path / "runs"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(
            [
                "--protocol",
                protocol,
                "--dry-run",
                "--out",
                str(out),
                *[x for role in ROLES for x in (f"--{role}", "m@http://127.0.0.1:9/v1")],
            ]
        )
    assert code == 0 and "units:" in printed.getvalue()
    assert not out.exists()


def _unusable_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """Every teacher problem fails the code checks (no sentences), so nothing is ever finalized."""
    tools = body.get("tools") or []
    name = tools[0]["function"]["name"] if tools else ""
    if TEACHER_TOOL.match(name):
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}],
        }
    return None


def test_atad_report_without_a_finalized_problem_says_so_instead_of_none(tmp_path):
    with StandIn(respond=_unusable_problem) as standin, contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(
            [
                "--protocol",
                "atad",
                "--per-task",
                "1",
                "--limit",
                "1",
                "--out",
                str(tmp_path),
                *[x for role in ROLES for x in (f"--{role}", standin.spec(role))],
            ]
        )
    assert code == 0
    (report,) = tmp_path.glob("*/report.md")
    text = report.read_text(encoding="utf-8")
    assert "0 finalized" in text and "No problem was finalized" in text and "None s wall" not in text
