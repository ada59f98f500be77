"""What a terminal shows after a program's output: a small model of a VT100 screen for the codes rich writes.

Text overwrites at the cursor (with the deferred wrap of xterm at the right margin); ``\\r``, ``\\n`` (a new line,
as a terminal's default output translation makes it), cursor up, down, left, right and to a column move it;
erase-in-line clears the line (or its part). Colours, styles and the cursor's visibility change nothing here. Any
other escape sequence fails the test that feeds it, so a display that starts using one is noticed, not misread.
"""

from __future__ import annotations

import re

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen_lines(output: str, width: int = 80) -> list[str]:
    """The lines a ``width``-column terminal shows after ``output`` (scrollback included), right-trimmed."""
    lines: list[list[str]] = [[]]
    row = col = 0
    pending_wrap = False
    i = 0
    while i < len(output):
        ch = output[i]
        if ch == "\x1b":
            m = _CSI.match(output, i)
            assert m, f"unknown escape sequence at {i}: {output[i : i + 12]!r}"
            params, code = m.group(1), m.group(2)
            n = int(params) if params.isdigit() else 1
            if code == "A":
                row = max(0, row - n)
            elif code == "B":
                row += n
            elif code == "C":
                col = min(width - 1, col + n)
            elif code == "D":
                col = max(0, col - n)
            elif code == "G":
                col = n - 1
            elif code == "K":
                while len(lines) <= row:
                    lines.append([])
                line = lines[row]
                if params in ("", "0"):
                    del line[col:]
                elif params == "1":
                    line[: col + 1] = [" "] * min(len(line), col + 1)
                else:
                    line.clear()
            else:
                assert code in "mhl", f"unexpected control {m.group(0)!r}"
            pending_wrap = False
            i = m.end()
            continue
        if ch == "\r":
            col, pending_wrap = 0, False
        elif ch == "\n":  # a terminal's output translation (onlcr) makes every line feed a new line
            row, col, pending_wrap = row + 1, 0, False
        else:
            if pending_wrap:
                row, col, pending_wrap = row + 1, 0, False
            while len(lines) <= row:
                lines.append([])
            line = lines[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            if col == width - 1:
                pending_wrap = True
            else:
                col += 1
        i += 1
        while len(lines) <= row:
            lines.append([])
    return ["".join(line).rstrip() for line in lines]
