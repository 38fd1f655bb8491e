"""The third-party requirements of the image's distributions, read from their pyproject.toml files.

`python scripts/image_requirements.py OUT [ROOT]` writes one requirement a line to OUT: the
dependencies of effectgate-protos, effectgate-client and effectgate[all], without the effectgate
distributions themselves. The Dockerfile installs them (with constraints.txt) before it copies any
source, so a change to the code rebuilds only the layer that installs the three packages.
Standard library only: it runs on the bare base image.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PROJECTS = ("clients/protos", "clients/python", ".")
EXTRAS = {".": "all"}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def _extras(project: dict[str, object], name: str) -> list[str]:
    """The requirements of one extra, self-references (`effectgate[a,b]`) expanded."""
    table = project.get("optional-dependencies", {})
    assert isinstance(table, dict)
    out: list[str] = []
    for requirement in table.get(name, []):
        match = _NAME.match(requirement)
        if match and match.group(1).lower() == str(project["name"]).lower():
            for inner in (match.group(2) or "").split(","):
                out += _extras(project, inner.strip())
        else:
            out.append(requirement)
    return out


def requirements(root: Path) -> list[str]:
    found: list[str] = []
    for path in PROJECTS:
        project = tomllib.loads((root / path / "pyproject.toml").read_text())["project"]
        extra = EXTRAS.get(path)
        for requirement in [*project.get("dependencies", []), *(_extras(project, extra) if extra else [])]:
            match = _NAME.match(requirement)
            if match and not match.group(1).lower().startswith("effectgate") and requirement not in found:
                found.append(requirement)
    return found


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    out.write_text("".join(f"{line}\n" for line in requirements(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
