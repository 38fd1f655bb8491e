"""`effectgate events`: the tenant's audit trail (ListEvents) — every action's events in the
order of the tenant's hash chain, each with its link — as a table for people or JSON / YAML for
scripts; `--watch` then follows it (polls with the last page token: a row never commits behind
a token already handed out, so nothing is skipped) for a SIEM, one JSON line or YAML document
per event."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from rich.table import Table
from rich.text import Text

from effectgate.client.cli.render import dump, dump_line, message_dict, printable, show
from effectgate.client.client import EffectGateClient
from effectgate.v1 import gateway_pb2 as pb

Row = dict[str, Any]


def event_row(event: pb.TrailEvent) -> Row:
    """One event as plain data: the story's fields, whose it is, and what its hash covers
    (`at_seconds`, `detail_json`), so that a receiver can check the chain itself."""
    story = message_dict(event.event)
    return {
        "position": event.position,
        "seq": event.event.seq,
        "at": story.get("at", ""),
        "action_id": event.action_id,
        "tenant": event.tenant,
        "tool": event.tool,
        "kind": story["kind"],
        "state": story["state"],
        "principal": story["principal"],
        "note": story["note"],
        "detail": json.loads(event.detail_json or "{}"),
        "at_seconds": event.at_seconds,
        "detail_json": event.detail_json,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


async def batches(client: EffectGateClient, args: argparse.Namespace) -> AsyncIterator[list[Row]]:
    """Everything after the start (`--since`), then with --watch what is new every `--interval`,
    until Ctrl-C or `--watch-count` polls."""
    token, polls = "", 0
    while True:
        rows: list[Row] = []
        while True:
            page = await client.events(
                since=args.since or 0.0,
                until=args.until or 0.0,
                principal=args.principal,
                kind=args.kind,
                tool=args.tool,
                page_size=args.chunk_size,
                page_token=token,
            )
            token = page.next_page_token or token
            if not page.events:
                break
            rows += [event_row(e) for e in page.events]
        yield rows
        polls += 1
        if not args.watch or (args.watch_count and polls > args.watch_count):
            return
        await asyncio.sleep(args.interval)


def events_table(rows: list[Row], *, wide: bool, header: bool = True) -> Table:
    columns = ["AT", "POS", "ACTION", "TOOL", "KIND", "STATE", "PRINCIPAL", "NOTE"] + (
        ["HASH", "DETAIL"] if wide else []
    )
    grid = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0), show_header=header)
    for name in columns:
        grid.add_column(name, no_wrap=name not in ("NOTE", "DETAIL"), justify="right" if name == "POS" else "left")
    for r in rows:
        cells = [
            r["at"],
            str(r["position"]),
            r["action_id"],
            r["tool"],
            r["kind"],
            r["state"],
            r["principal"],
            r["note"],
        ]
        if wide:
            cells += [r["hash"][:16], r["detail_json"]]
        grid.add_row(*(Text(printable(c or "-")) for c in cells))
    return grid


async def list_events(client: EffectGateClient, args: argparse.Namespace) -> None:
    fmt, header = args.output, True
    async for rows in batches(client, args):
        if not args.watch and fmt in ("json", "yaml"):
            dump(rows, fmt)
        elif fmt in ("json", "yaml"):
            for row in rows:
                dump_line(row, fmt)
        elif rows or (header and not args.watch):
            show(events_table(rows, wide=fmt == "wide", header=header))
            header = False
