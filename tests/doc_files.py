"""The files a docs page shows: every ```python (and ```ini) block whose first line names it
(`# ledger.py`, `# pytest.ini`). Shared by the tests that run a page's examples as a reader would:
written into one folder, run there in a child process with none of this repository's settings."""

from __future__ import annotations

import os
import re
from pathlib import Path

BLOCK = re.compile(r"^```(python|ini)\n(.*?)^```", re.M | re.S)
NAME = re.compile(r"# ([\w.]+\.(?:py|ini))\n")


def page_files(page: Path) -> dict[str, str]:
    """File name -> text of every Python or INI block of `page`; each must start with its name."""
    found: dict[str, str] = {}
    for _, code in BLOCK.findall(page.read_text()):
        named = NAME.match(code)
        assert named, f"a block of {page.name} does not start with its file name: {code[:60]!r}"
        found[named.group(1)] = code
    return found


def write_files(folder: Path, files: dict[str, str]) -> Path:
    for name, code in files.items():
        (folder / name).write_text(code)
    return folder


def reader_env() -> dict[str, str]:
    """A reader's shell: nothing of ours (no EFFECTGATE_* settings, not this repository's pytest config)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("EFFECTGATE_", "PYTEST_"))}
