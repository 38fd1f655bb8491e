"""Tables embedded in Markdown between `<!-- chaos:NAME -->` and `<!-- /chaos:NAME -->`.

`effectgate chaos report RUN --write docs/chaos.md` rewrites every such block from the
recorded run; tests/test_chaos.py renders them again and compares, so the docs cannot drift.
Blocks named `crash_NAME` come from the recorded `--crash` run (`--prefix crash_`), the others
from the default run.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BLOCK = re.compile(r"(<!-- chaos:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /chaos:(?P=name) -->)", re.S)


def names(text: str) -> list[str]:
    return [m["name"] for m in BLOCK.finditer(text)]


def blocks(text: str, prefix: str = "") -> dict[str, str]:
    """The body of every block of `prefix` (without its trailing newline), by unprefixed name."""
    return {m["name"].removeprefix(prefix): m["body"].rstrip("\n") for m in BLOCK.finditer(text) if _mine(m, prefix)}


def _mine(match: re.Match[str], prefix: str) -> bool:
    name = match["name"]
    return name.startswith(prefix) if prefix else not name.startswith(PREFIXES)


PREFIXES = ("crash_",)


def rewrite(text: str, render: Callable[[str], str], prefix: str = "") -> str:
    """`text` with the body of every block of `prefix` replaced by `render(unprefixed name)`."""

    def one(m: re.Match[str]) -> str:
        if not _mine(m, prefix):
            return m[0]
        return f"{m[1]}{render(m['name'].removeprefix(prefix))}\n{m[4]}"

    return BLOCK.sub(one, text)
