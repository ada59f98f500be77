"""The per-call path made faster (issue 14) keeps what it promises: durability across a kill, identical requests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_checkpoint_committed_before_a_kill_9_is_read_back_after_it(tmp_path):
    """``synchronous=NORMAL`` drops the fsync per commit but not a commit: a process killed right after its
    checkpoint write leaves it in the WAL, and the next open of the run's checkpointer finds it."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from langgraph.checkpoint.base import empty_checkpoint
        from dyneval.stores.checkpoints import open_checkpointer

        with open_checkpointer(Path({str(tmp_path)!r})) as saver:
            assert saver.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {{"answer": "kept"}}
            saver.put({{"configurable": {{"thread_id": "u1", "checkpoint_ns": ""}}}}, checkpoint,
                      {{"step": 1}}, {{}})
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint of the WAL into the main file
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    assert (tmp_path / "checkpoints.sqlite-wal").stat().st_size > 0

    from dyneval.stores.checkpoints import open_checkpointer

    with open_checkpointer(tmp_path) as saver:
        saved = saver.get_tuple({"configurable": {"thread_id": "u1", "checkpoint_ns": ""}})
    assert saved is not None and saved.checkpoint["channel_values"] == {"answer": "kept"}


def test_a_structured_call_sends_what_langchains_with_structured_output_sends_and_parses_the_same(tmp_path):
    """The call layer runs the bound model without LangSmith's ``ls_structured_output_format`` and the parser
    through ``parse_result``: the request body and the parsed object equal LangChain's own chain's."""
    from langchain_openai import ChatOpenAI

    from dyneval.prompts import load_prompt
    from dyneval.runtime.events import EventLog
    from dyneval.runtime.llm import RoleLLM
    from dyneval.state.atad import IndexAnswer
    from tests.golden_runs import respond
    from tests.standin_endpoint import StandIn

    bodies: list[dict] = []

    def logged(body: dict) -> dict | None:
        bodies.append(body)
        return respond(body)

    standin = StandIn(respond=logged)
    try:
        chat = ChatOpenAI(model="student", base_url=standin.url, api_key="sk-none", max_retries=0)
        messages = load_prompt("atad/student_solve").render(
            task_name="ordering",
            question="Which option is odd?",
            problem="A. one\nB. two\nC. banana",
            answer_format="the index of the option",
        )
        ours = RoleLLM(role="student", model_label="student", chat=chat, events=EventLog(tmp_path / "events.jsonl"))
        got = ours.structured(IndexAnswer, messages, step="student:solve")
        theirs = chat.with_structured_output(IndexAnswer, method="function_calling", include_raw=True).invoke(messages)
    finally:
        standin.close()
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert bodies[0]["tools"][0]["function"]["name"] == "IndexAnswer"
    assert got == theirs["parsed"]
