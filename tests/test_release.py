"""Releases: one version for every distribution (the VERSION file), which `effectgate --version`
prints and the internal requirements accept; the TypeScript client carries the same number; the
changelog keeps the Keep a Changelog layout. Building and installing the wheels:
tests/test_packaging.py; packing the TypeScript client into a fresh project:
tests/test_readme_snippets.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import requires, version
from pathlib import Path

from packaging.requirements import Requirement

from tests.wheelhouse import DISTRIBUTIONS as PROJECTS
from tests.wheelhouse import RELEASE, ROOT


def test_every_distribution_reads_its_version_from_the_one_file() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", RELEASE)
    for name, folder in PROJECTS.items():
        pyproject = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())
        assert pyproject["project"]["name"] == name
        assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
        assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}
        assert (ROOT / folder / "VERSION").samefile(ROOT / "VERSION"), folder  # a link, not a copy
        assert version(name) == RELEASE, name  # the installed metadata agrees


def test_the_distributions_accept_each_other_at_this_version() -> None:
    for name in PROJECTS:
        for line in requires(name) or []:
            requirement = Requirement(line)
            if requirement.name.startswith("effectgate") and requirement.marker is None:
                assert requirement.specifier.contains(RELEASE), (name, line)


def test_effectgate_version_prints_the_release() -> None:
    script = Path(sys.executable).parent / "effectgate"
    shown = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.strip() == f"effectgate {RELEASE} (client {RELEASE})"
    client = [sys.executable, "-m", "effectgate.client.cli", "--version"]
    shown = subprocess.run(client, capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.strip() == f"effectgate-client {RELEASE}"


def test_the_typescript_client_carries_the_same_version() -> None:
    package = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())
    lock = json.loads((ROOT / "clients" / "typescript" / "package-lock.json").read_text())
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == RELEASE


def test_the_changelog_keeps_its_layout() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    releases = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.M)
    assert releases and releases[0][0] == "Unreleased"
    for name, rest in releases[1:]:  # released: a version and an ISO date, newest first
        assert re.fullmatch(r"\d+\.\d+\.\d+", name) and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), name
    kinds = set(re.findall(r"^### (.+)$", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    # Every release heading has its link reference at the bottom.
    for name, _ in releases:
        assert re.search(rf"^\[{re.escape(name)}\]: \S+$", text, re.M), name
