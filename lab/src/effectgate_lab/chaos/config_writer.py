"""Writing a config document (the dict `parse_config` reads) back to TOML, for tools that start
`effectgate serve` children: the chaos harness, the tests. Top-level sections become tables,
`[adapters.NAME]` and `[tools.NAME]` one table each, `principals` an array of tables, and any
mapping inside those an inline table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectgate.gateway.config import parse_config

NAMED_SECTIONS = ("adapters", "tools")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _pairs(table: Mapping[str, Any]) -> list[str]:
    return [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()]


def dump_config(doc: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for section, table in doc.items():
        if section in NAMED_SECTIONS:
            for name, sub in table.items():
                lines += [f"[{section}.{json.dumps(name)}]", *_pairs(sub)]
        elif isinstance(table, list | tuple):  # an array of tables: [[principals]], [[notify]]
            for item in table:
                lines += [f"[[{section}]]", *_pairs(item)]
        else:
            lines += [f"[{section}]", *_pairs(table)]
    return "\n".join(lines) + "\n"


def write_config(doc: Mapping[str, Any], path: Path) -> Path:
    """Validates `doc` (so a mistake fails here, not in the child) and writes it to `path`."""
    parse_config(doc)
    path.write_text(dump_config(doc))
    return path
