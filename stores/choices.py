"""Multiple-choice answers read against their options (judgeagent's ``--data``, llmeval's ``--bank``).

An answer is read every way it can be - an option letter, a 0-based index, an option's text - and refused when no
reading names an option or two readings name different ones, unless ``--answer-form`` names the one way to read
it. A JSON integer is only an index (MMLU's ``answer: 2``); a text is read every way, a CSV cell included (a CSV
cell is text: its ``2`` is index C, refused when another option's text is ``2``). Texts are compared after
:func:`normalize_answer`, which judgeagent's judge also compares a reply with a reference by.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any, Literal

from dyneval.stores.inputs import scalar_text

#: Option letters: ``A`` names the first option.
LETTERS = string.ascii_uppercase
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_KEY = re.compile(r"[A-Z](?:[\s,;/]*[A-Z])*")


def normalize_answer(text: str) -> str:
    """SQuAD-style answer normalisation: lower case, no punctuation or articles, single spaces (how an answer is
    compared with an option's text here, and a reply with a reference by judgeagent's judge)."""
    text = str(text or "").lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def key_letters(text: str) -> list[str]:
    """The letters of an answer key written as option letters ("C", "A, C", "AC" -> ["C"], ["A", "C"], ["A", "C"]);
    ``[]`` for any other text."""
    key = text.strip().upper()
    return sorted(set(re.findall(r"[A-Z]", key))) if _KEY.fullmatch(key) else []


#: How a multiple-choice answer is read (``--answer-form``): every way (``any``), or only as option letters, a
#: 0-based index or an option's text.
AnswerForm = Literal["any", "letter", "index", "text"]
_FORM_NAMES = {"letter": "an option letter", "index": "a 0-based index", "text": "an option's text"}


def option_letters(value: Any, options: Sequence[str], *, several: bool = False, form: AnswerForm = "any") -> list[str]:
    """The option letters a multiple-choice answer names (``A`` = the first of ``options``), read every way it can be
    (``form="any"``) or only the one way ``form`` names:

    * ``letter``: one letter (``c``), or with ``several`` a key of several (``A, C``, ``AC``);
    * ``index``: a 0-based index; a JSON integer is only ever an index (MMLU's ``answer: 2`` is ``C``), whatever
      ``form`` says; a text of digits is read as an index besides the other ways (a CSV cell is always text);
    * ``text``: the text of exactly one option, compared after :func:`normalize_answer`.

    ``ValueError`` with the reason when no reading names an option, or when readings name different options: the
    text ``1`` among the options ``2, 4, 1, 3`` is index B and option text C, and which was meant is not known
    (``form="index"`` says: B).
    """
    n = len(options)
    if n > len(LETTERS):
        raise ValueError(f"{n} options: option letters name at most {len(LETTERS)}")
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < n:
            return [LETTERS[value]]
        raise ValueError(f"answer {value} is not a 0-based option index (0-{n - 1} for {n} options)")
    text = scalar_text(value).strip()
    readings: dict[tuple[str, ...], str] = {}
    letters = key_letters(text) if form in ("any", "letter") and (several or len(text) == 1) else []
    if letters and all(LETTERS.index(letter) < n for letter in letters):
        readings[tuple(letters)] = "option letters" if len(letters) > 1 else "letter"
    if form in ("any", "index") and text.isascii() and text.isdigit() and int(text) < n:
        readings.setdefault((LETTERS[int(text)],), "0-based index")
    key = normalize_answer(text) if form in ("any", "text") else ""
    hits = [letter for letter, option in zip(LETTERS, options) if key and normalize_answer(option) == key]
    if len(hits) == 1:
        readings.setdefault((hits[0],), "option text")
    if not readings and form != "any":
        raise ValueError(f"answer {text[:40]!r} is not {_FORM_NAMES[form]} of the {n} options (--answer-form {form})")
    if not readings:
        raise ValueError(
            f"answer {text[:40]!r} is not an option letter, 0-based index or option text "
            f"(A-{LETTERS[n - 1]} or 0-{n - 1} for {n} options)"
        )
    if len(readings) > 1:
        raise ValueError(
            f"answer {text[:40]!r} is ambiguous: "
            + ", ".join(f"{how} {' and '.join(found)}" for found, how in readings.items())
            + " (--answer-form letter, index or text says which)"
        )
    return list(next(iter(readings)))
