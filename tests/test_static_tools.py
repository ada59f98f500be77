"""Static tools resolve ``dyneval.*`` the way Python does: the editable install is a path entry to the repository
(no import hook), and ``dyneval/<folder>`` links to each of the card's folders, so mypy (and an editor's language
server) finds every module from outside the repository, where only the installed package can lead it.

The probe runs in a folder of its own, so nothing but the installed package can resolve its imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MYPY = Path(sys.executable).with_name("mypy")
PROBE = "import dyneval.runtime.runner\nfrom dyneval.nodes.interview.grader import grade\n"


def mypy_on(source: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """mypy on one file in ``folder`` with this environment's packages; imported modules are resolved, not checked
    (``--follow-imports=skip``: ``make lint`` checks the package itself)."""
    (folder / "probe.py").write_text(source, encoding="utf-8")
    command = [str(MYPY), "--python-executable", sys.executable, "--follow-imports=skip", "--no-incremental",
               "--config-file", "", "probe.py"]  # fmt: skip
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


def test_mypy_outside_the_repository_resolves_dyneval_modules_through_the_install(tmp_path):
    found = mypy_on(PROBE, tmp_path)
    assert found.returncode == 0 and "Success" in found.stdout, found.stdout + found.stderr
    missing = mypy_on(PROBE + "import dyneval.runtime.no_such_module\n", tmp_path)  # the check can fail
    assert missing.returncode == 1 and 'module named "dyneval.runtime.no_such_module"' in missing.stdout, missing.stdout
    assert "dyneval.runtime.runner" not in missing.stdout and "dyneval.nodes" not in missing.stdout
