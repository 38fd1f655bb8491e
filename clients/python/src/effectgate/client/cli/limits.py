"""`effectgate limits` and `effectgate grant-limit`: each tool's caps, their use and what is left
(GetLimits), and an operator's grant that lets one refused action past them once (GrantLimit)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from effectgate.client.cli.render import Section, age, message_dict, parse_time, printable
from effectgate.v1 import gateway_pb2 as pb

Row = dict[str, Any]
_FIGURES = ("cap", "used", "left")


def limits_rows(answer: pb.GetLimitsResponse) -> list[Row]:
    """One dict per tool (proto field names, RFC 3339 times), with the figures as numbers."""
    tools = []
    for tool in answer.tools:
        row = message_dict(tool)
        row["limits"] = [{**u, **{k: int(u[k]) for k in _FIGURES}} for u in row["limits"]]
        tools.append(row)
    return tools


def limits_table(tools: list[Row]) -> Table:
    """One line per cap: `TOOL LIMIT CURRENCY RUN CAP USED LEFT RESETS`."""
    grid = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for name in ("TOOL", "LIMIT", "CURRENCY", "RUN", "CAP", "USED", "LEFT", "RESETS"):
        grid.add_column(name, no_wrap=True, justify="right" if name in ("CAP", "USED", "LEFT") else "left")
    for tool in tools:
        for use in tool["limits"]:
            resets = "-" if use["run_id"] else f"in {_until(tool['window_end'])}"
            cells = (tool["tool"], use["limit"], use["currency"], use["run_id"], *(str(use[k]) for k in _FIGURES))
            grid.add_row(*(Text(printable(str(c) or "-")) for c in (*cells, resets)))
    return grid


def _until(stamp: str) -> str:
    # age() counts up to now from a time; the window's end is ahead: the same units, the other way.
    return age(stamp, now=2 * parse_time(stamp) - time.time()) if stamp else "-"


def grant_sections(grant: Row) -> list[Section]:
    return [
        Section(
            "",
            [
                ("Action", grant["action_id"]),
                ("Granted by", grant["principal"]),
                ("Note", grant["note"]),
                ("Granted", grant.get("granted_at", "")),
                ("Expires", grant.get("expires_at", "")),
            ],
        )
    ]
