"""The folder a run's relative file settings name files in: this process's working folder, except on a Ray
worker, whose working folder is where its node was started: there, the driver's (:func:`resolve_files_from`, set
as the unit runner starts).

A setting stays as the user gave it (the run's config, records, summary and report show it so); a worker resolves
it where it opens the file (:func:`local_path`): agent and ``--state-check`` files, JudgeAgent's ``--kb``,
llmeval's SQLite ``--bank-db``.
"""

from __future__ import annotations

from pathlib import Path

#: The driver's working folder on a Ray worker, else ``None`` (this process's working directory).
_files_from: Path | None = None


def resolve_files_from(folder: str) -> None:
    """Resolve this process's relative file settings against ``folder`` (a Ray worker sets its driver's)."""
    global _files_from
    _files_from = Path(folder)


def files_from() -> Path | None:
    """The driver's folder this process resolves relative files against, or ``None`` (its working directory)."""
    return _files_from


def local_path(path: str) -> str:
    """``path`` as this process opens it: a relative path under the driver's folder on a Ray worker; else (an
    absolute path, or any path outside a worker) unchanged, so the driver's messages show it as given."""
    if _files_from is None or Path(path).is_absolute():
        return path
    return str(_files_from / path)
