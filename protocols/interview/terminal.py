"""The human interviewee at the terminal: the question, the prompt and the typed answer on their own lines.

A run shows a live progress display while its units work. A live display redraws its rows several times a second
and moves the cursor over them, and while it runs the prompt written by ``input()`` is held back by rich's stdout
proxy until a line ends, so a typed answer would land on the progress row (``...cached 015 km/h``). The display
is therefore stopped while a person reads and types, its last frame left above the question, and started again
below the answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

PROMPT = "your answer> "


def _live_displays(console: Console) -> list[Live]:
    """The live displays active on ``console``, outermost first. rich keeps them in ``Console._live_stack`` and
    has no public accessor (``tests/test_interview_human.py`` checks this against the installed rich)."""
    return list(getattr(console, "_live_stack", ()))


@contextmanager
def live_display_paused(console: Console) -> Iterator[None]:
    """Stop the live displays of ``console`` for the block (each leaves its last frame in place) and start them
    again after it, below whatever the block printed. A console that is not a terminal has nothing live on it
    (rich draws only the final frame there), so nothing is stopped."""
    lives = _live_displays(console) if console.is_terminal else []
    for live in reversed(lives):
        live.stop()
    try:
        yield
    finally:
        for live in lives:
            # A stopped display remembers the height of its last frame and, started again, would move the cursor
            # up over that many lines to redraw them: over the question and the answer printed meanwhile.
            live._live_render._shape = None
            live.start()


def ask(console: Console, head: str, question: str) -> str:
    """Show ``head`` as a rule and ``question``, then read one answer after :data:`PROMPT`, with the run's live
    display paused. A terminal echoes the typed answer; read from a pipe or file it is echoed here, so the console
    transcript shows it on the prompt's line. ``EOFError`` when the input is closed."""
    with live_display_paused(console):
        console.rule(Text(head))  # a Text: the unit id in brackets is no markup
        console.print(question, markup=False, highlight=False)
        answer = console.input(PROMPT, markup=False, emoji=False)
        if not _typed_at_a_terminal():
            console.print(answer, markup=False, highlight=False)
    return answer


def _typed_at_a_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):  # no stdin, a closed one, or a test's stand-in
        return False
