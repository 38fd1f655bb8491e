"""Tables embedded in Markdown between `<!-- chaos:NAME -->` and `<!-- /chaos:NAME -->`.

`effectgate chaos report RUN --write README.md docs/chaos.md` rewrites every such block from the
recorded run; tests/test_chaos.py renders them again and compares, so the docs cannot drift.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BLOCK = re.compile(r"(<!-- chaos:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /chaos:(?P=name) -->)", re.S)


def names(text: str) -> list[str]:
    return [m["name"] for m in BLOCK.finditer(text)]


def blocks(text: str) -> dict[str, str]:
    """The current body of every block (without its trailing newline)."""
    return {m["name"]: m["body"].rstrip("\n") for m in BLOCK.finditer(text)}


def rewrite(text: str, render: Callable[[str], str]) -> str:
    """`text` with every block's body replaced by `render(name)`."""
    return BLOCK.sub(lambda m: f"{m[1]}{render(m['name'])}\n{m[4]}", text)
