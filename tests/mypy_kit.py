"""`mypy --strict` on a folder of pasted docs code, as a reader would run it, with one cache for
the whole test run: the effectgate packages and their dependencies are analysed once, not once a
test (each cold run costs tens of CPU-seconds). The runs take turns on a lock, so the second
finds the first one's cache complete; mypy writes every cache file atomically."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every pytest-xdist worker of this run shares (the parent of the workers' base temps)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base
    path = root / "mypy-strict"
    path.mkdir(exist_ok=True)
    return path


def mypy_strict(folder: Path, sources: Sequence[str], shared: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "mypy", "--strict", "--no-sqlite-cache", "--cache-dir", str(shared / "cache")]
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run([*argv, *sources], cwd=folder, capture_output=True, text=True, timeout=300)
