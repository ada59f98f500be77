"""Files only their owner may read (0600, folders 0700, whatever the umask): the ones holding what an examinee of
the llmeval exam server must never see (the bank's reference answers, the judge prompts that quote them, the
server's signing secret and admin token), as LLMEval-3's anti-cheating design (seed 002, section 2.2) requires."""

from __future__ import annotations

import os
from pathlib import Path

#: Read and write for the owner only.
FILE_MODE = 0o600
#: Read, write and enter for the owner only.
FOLDER_MODE = 0o700


def private_folder(path: Path) -> Path:
    """``path`` as a folder; each folder this call makes (parents too) is its owner's only."""
    made = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for folder in made:
        os.chmod(folder, FOLDER_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path``, made empty and its owner's only unless it exists (in folders made by :func:`private_folder`): what
    is then written into it, by any writer, is never readable by others."""
    private_folder(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken the owner's bits off too
    finally:
        os.close(fd)
    return path


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, its owner's only from the first byte on (an existing file is emptied and made so)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, FILE_MODE)  # an existing file keeps its mode through O_CREAT (emptied, not yet rewritten)
        out.write(text)
