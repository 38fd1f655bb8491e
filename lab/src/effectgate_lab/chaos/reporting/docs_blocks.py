"""Tables embedded in Markdown between `<!-- chaos:NAME -->` and `<!-- /chaos:NAME -->` (and the
A/B bench's, between `<!-- bench:NAME -->` markers: `tag="bench"`).

`effectgate chaos report RUN --write docs/chaos.md` rewrites every such block from the
recorded run; tests/test_chaos.py renders them again and compares, so the docs cannot drift.
Blocks named `crash_NAME` come from the recorded `--crash` run (`--prefix crash_`), the others
from the default run.
"""

from __future__ import annotations

import re
from collections.abc import Callable


def _pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {tag}:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /{tag}:(?P=name) -->)", re.S)


def names(text: str, tag: str = "chaos") -> list[str]:
    return [m["name"] for m in _pattern(tag).finditer(text)]


def blocks(text: str, prefix: str = "", tag: str = "chaos") -> dict[str, str]:
    """The body of every block of `prefix` (without its trailing newline), by unprefixed name."""
    found = _pattern(tag).finditer(text)
    return {m["name"].removeprefix(prefix): m["body"].rstrip("\n") for m in found if _mine(m, prefix)}


def _mine(match: re.Match[str], prefix: str) -> bool:
    name = match["name"]
    return name.startswith(prefix) if prefix else not name.startswith(PREFIXES)


PREFIXES = ("crash_",)


def rewrite(text: str, render: Callable[[str], str], prefix: str = "", tag: str = "chaos") -> str:
    """`text` with the body of every block of `prefix` replaced by `render(unprefixed name)`."""

    def one(m: re.Match[str]) -> str:
        if not _mine(m, prefix):
            return m[0]
        return f"{m[1]}{render(m['name'].removeprefix(prefix))}\n{m[4]}"

    return _pattern(tag).sub(one, text)
