"""No absolute path of the machine on a page: every absolute path in a text is written relative.

A page is shared; a path such as ``/home/alice/data/questions.jsonl`` says who ran it and where. Each absolute path
in any text or key of a page (a questions file in a unit's meta, the inputs of ``summary.json``, an error message)
becomes, in this order:

* relative to the run's folder, with a leading ``./`` or ``../``, when it lies in the run's ``--out`` folder
  (``./events.jsonl``, ``../_cache/llmeval_bank.sqlite``);
* relative to the working directory the page was written from, with no leading dot, when it lies there
  (``samples/judgeagent/questions.jsonl``);
* relative to the run's folder otherwise (``../../data/questions.jsonl``).

A candidate is a ``/`` that starts a word or follows a dot joining dotted keys (``table2.model./data/b.jsonl``),
not inside a URL, a relative path (``./x``, ``../x``) or a fraction, and whose first folder exists on this machine
(``/v1/chat/completions`` in an error message stays as it is).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Mapping keys remembered with how they are shown (field names repeat in every unit of a page).
_KEYS = 4096

#: A character of a path's part (a path ends at a space, a quote, a bracket, a separator of a list ...).
_PART = r"[^\s/\"'`<>|:;,()\[\]{}]"


@lru_cache(maxsize=1)
def _absolute() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """An absolute POSIX path whose first folder is a top-level folder of this machine (``/tmp``, ``/home`` ...):
    a ``/`` not preceded by a word character, a colon, a slash or a tilde; and a quick test for a text that may
    hold one (most texts hold none: only those are scanned)."""
    roots = sorted((n for n in os.listdir("/") if os.path.isdir("/" + n)), key=len, reverse=True)
    names = "|".join(map(re.escape, roots)) or r"(?!)"
    return re.compile(f"/(?:{names})"), re.compile(rf"(?<![\w:/~-])/(?:{names})(?!{_PART})(?:/{_PART}*)*")


class Relative:
    """Texts with their absolute paths made relative (see the module docstring) to the run folder ``run_dir``; a
    page of several runs (the comparison, the run index) passes its own folder as ``run_dir`` and as ``out``."""

    def __init__(self, run_dir: Path, out: Path | None = None, cwd: Path | None = None) -> None:
        self.run = Path(os.path.abspath(run_dir))
        self.out = Path(os.path.abspath(out)) if out is not None else self.run.parent
        self.cwd = Path(os.path.abspath(cwd or os.getcwd()))
        self._seen: dict[str, str] = {}  # path as found -> as shown (a page repeats few paths many times)
        self._keys: dict[str, str] = {}  # mapping key -> as shown (a page repeats few keys many times)
        self._maybe, self._absolute = _absolute()

    def path(self, path: str) -> str:
        """One absolute path, relative."""
        if path not in self._seen:
            self._seen[path] = self._relative(path)
        return self._seen[path]

    def _relative(self, path: str) -> str:
        p = Path(os.path.normpath(path))
        if p == self.out or self.out in p.parents:
            rel = os.path.relpath(p, self.run)
            return rel if rel.startswith("..") else "./" + rel if rel != "." else "./"
        if self.cwd != Path("/") and (p == self.cwd or self.cwd in p.parents):
            return os.path.relpath(p, self.cwd)
        return os.path.relpath(p, self.run)

    def text(self, text: str) -> str:
        if not self._maybe.search(text):
            return text

        def sub(m: re.Match[str]) -> str:
            at, found = m.start(), m.group()
            if at and text[at - 1] == "." and (at < 2 or not text[at - 2].isalnum()):  # ./x or ../x
                return found
            return self.path(found)

        return self._absolute.sub(sub, text)

    def _key(self, key: Any) -> Any:
        """A mapping key as shown; the first :data:`_KEYS` texts are remembered (field names repeat in every unit)."""
        if not isinstance(key, str):
            return key
        shown = self._keys.get(key)
        if shown is None:
            shown = self.text(key)
            if len(self._keys) < _KEYS:
                self._keys[key] = shown
        return shown

    def __call__(self, value: Any, each: Callable[[str], str] | None = None) -> Any:
        """``value`` with every text and mapping key in it relative (other values as they are); ``each`` is applied
        to every text (not key) first, in the same walk (which visits every value of a page's every unit: JSON's
        own types are told apart by identity, other types by ``isinstance``)."""
        kind = type(value)
        if kind is not str and kind is not dict and kind is not list:
            if isinstance(value, str):
                kind = str
            elif isinstance(value, dict):
                kind = dict
            elif isinstance(value, (list, tuple)):
                kind = list
            else:
                return value
        if kind is str:
            return self.text(each(value) if each else value)
        if kind is dict:
            return {self._key(k): self(v, each) for k, v in value.items()}
        return [self(v, each) for v in value]
