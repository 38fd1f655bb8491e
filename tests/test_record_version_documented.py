"""The stored record's version (`store/codec.SCHEMA_VERSION`) is the one CHANGELOG.md and
docs/deploy.md name (issue 46: it went 3 -> 4 without a word, and an operator rolling across it was
not told to finish quickly). Raising it fails here until both say in which release it changes."""

from __future__ import annotations

import re
from pathlib import Path

from effectgate.gateway.store import codec

ROOT = Path(__file__).resolve().parent.parent


def test_the_changelog_names_the_record_version_written() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    named = re.findall(r"\*\*Stored records are version (\d+)\*\*", changelog)
    assert named, "CHANGELOG.md names no record version ('**Stored records are version N**')"
    assert int(named[0]) == codec.SCHEMA_VERSION, "the newest entry must name codec.SCHEMA_VERSION"


def test_deploy_md_lists_the_release_that_writes_it() -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    rows = re.findall(r"^\s*\| ([0-9][^|]*?) \| (\d+) \|", deploy, flags=re.MULTILINE)
    assert rows, "docs/deploy.md has no table of releases and record versions"
    release, version = rows[-1]
    assert int(version) == codec.SCHEMA_VERSION, f"docs/deploy.md's last row ({release}) names record version {version}"
    # The release that writes it is this one or an earlier one.
    current = tuple(int(p) for p in (ROOT / "VERSION").read_text().strip().split("."))
    written = tuple(int(p) for p in release.split()[0].split("."))
    assert written <= current, (release, current)
