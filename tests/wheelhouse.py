"""The distributions built once per test run, and fresh virtualenvs to install them into.

What `python -m build` does for every distribution (its sdist, then the wheel built from that
sdist, as a release is made: docs/deploy.md) runs once per `pytest` run, in a clean copy of the checkout: the
first xdist worker to ask builds, the others wait on a file lock and read the same directory. The
packaging tests (tests/test_packaging.py, tests/test_client.py) install from it instead of each
building the same wheels again.

A fresh virtualenv is made without pip (ensurepip costs a pip install of its own); this run's pip
(`pip --python`) installs into it, without compiling bytecode the tests never read.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import pytest
from build import ProjectBuilder
from pyproject_hooks import quiet_subprocess_runner

ROOT = Path(__file__).resolve().parent.parent
RELEASE = (ROOT / "VERSION").read_text().strip()
DISTRIBUTIONS = {
    "effectgate-protos": "clients/protos",
    "effectgate-client": "clients/python",
    "effectgate": ".",
    "effectgate-lab": "lab",
}
# What a fresh clone lacks: local environments, caches, build outputs.
NOT_IN_A_CLONE = (
    ".git",
    ".venv",
    ".venv-*",
    "node_modules",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.py[co]",
    ".*_cache",
    ".hypothesis",
)


def clean_checkout(dest: Path) -> Path:
    """The repository as a fresh clone has it, copied to `dest`: pip and build write build/ and
    *.egg-info into the tree they build, which must be neither this checkout (other tests, run
    beside this one, read it) nor carry a stale build/lib into the wheel."""
    shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE))
    return dest


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run shares (the base temp directory alone)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def wheel(dist: Path, name: str) -> Path:
    return dist / f"{name.replace('-', '_')}-{RELEASE}-py3-none-any.whl"


def build_requires(checkout: Path) -> list[str]:
    """The one `[build-system] requires` every distribution declares (one build environment then
    serves each of them exactly as its own isolated one would)."""
    tables = [tomllib.loads((checkout / p / "pyproject.toml").read_text()) for p in DISTRIBUTIONS.values()]
    declared = {tuple(table["build-system"]["requires"]) for table in tables}
    assert len(declared) == 1, f"the distributions declare different build requirements: {declared}"
    return list(declared.pop())


def build_all(dist: Path, scratch: Path) -> None:
    """What `python -m build --outdir dist` does for every distribution, from a clean copy of the
    checkout: the sdist, then the wheel from the unpacked sdist, each by the backend in a fresh
    environment holding only the declared build requirements (plus whatever the backend's
    get_requires hooks ask for, as build installs them). One such environment for all eight
    builds instead of eight: they declare the same requirements (build_requires)."""
    checkout = clean_checkout(scratch / "checkout")
    python = fresh_venv(scratch / "build-env")

    def install(requirements: Iterable[str]) -> None:
        if wanted := sorted(requirements):
            done = subprocess.run(pip_install(python, *wanted), capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]

    def build(source: Path, distribution: Literal["sdist", "wheel"]) -> Path:
        builder = ProjectBuilder(source, python_executable=str(python), runner=quiet_subprocess_runner)
        install(builder.get_requires_for_build(distribution))
        return Path(builder.build(distribution, dist))

    install(build_requires(checkout))
    for name, project in DISTRIBUTIONS.items():
        sdist = build(checkout / project, "sdist")
        unpacked = scratch / "sdists" / name
        with tarfile.open(sdist) as archive:
            archive.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        build(top, "wheel")


def built_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdists and wheels of every distribution, built once for the run (see the module); the
    `wheelhouse_dir` fixture (tests/conftest.py)."""
    root = run_root(tmp_path_factory)
    dist, done = root / "wheelhouse", root / "wheelhouse.built"
    with (root / "wheelhouse.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(dist, ignore_errors=True)  # a worker that failed half-way
            scratch = root / "wheelhouse-src"
            shutil.rmtree(scratch, ignore_errors=True)
            build_all(dist, scratch)
            shutil.rmtree(scratch, ignore_errors=True)
            done.touch()
    return dist


def fresh_venv(path: Path) -> Path:
    """A new, empty virtualenv at `path` (no pip in it); returns its python."""
    venv.create(path, with_pip=False)
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> list[str]:
    """The command that installs `args` into the virtualenv of `python`, at constraints.txt."""
    return [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--quiet",
        "--no-compile",
        "-c",
        str(ROOT / "constraints.txt"),
        *args,
    ]
