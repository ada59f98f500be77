"""The shipped samples (package data ``dyneval.samples``): small hand-written inputs for every protocol, used when
a run names no data of its own, in the repository and in an installed wheel alike."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def sample(*parts: str) -> Path:
    """The shipped file or folder ``samples/<parts...>``."""
    return ROOT.joinpath(*parts)


def shown(path: Path) -> str:
    """``path`` as the user reads it: ``samples/...`` for a shipped sample (an installed wheel's absolute path
    would name a site-packages folder), else as given."""
    try:
        return str(Path("samples") / path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
