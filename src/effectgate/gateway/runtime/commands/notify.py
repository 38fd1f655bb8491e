"""`effectgate notify pending|failed|retry --config PATH`: the notifications' outbox, read and
mended in the store directly (docs/notifications.md), like `audit verify`: it works while no
gateway runs and covers every tenant.

- `pending`: rows not yet taken by their sink (with their attempts and last error);
- `failed`: rows that used up their sink's `max_attempts`;
- `retry [--sink NAME] [--event ID]`: failed rows become due again, attempts reset (the running
  deliverer sends them at its next pass).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import TYPE_CHECKING, Any

from effectgate.gateway.runtime.commands.config_option import add_config_option

if TYPE_CHECKING:
    from effectgate.gateway.model import Outgoing

LIMIT = 1000


def add_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    notify = commands.add_parser("notify", help="notifications' outbox: pending, failed, retry", parents=parents)
    verbs = notify.add_subparsers(dest="notify_command", required=True)
    for verb, words in (
        ("pending", "notifications not yet taken by their sink"),
        ("failed", "notifications whose sink refused them max_attempts times"),
        ("retry", "send failed notifications again (attempts reset)"),
    ):
        cmd = verbs.add_parser(verb, help=words)
        add_config_option(cmd)
        cmd.add_argument("--sink", default="", help="only this [[notify]] sink")
        if verb == "retry":
            cmd.add_argument("--event", default="", help="only this event id (webhook-id)")
        else:
            cmd.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")


def row_dict(row: Outgoing) -> dict[str, Any]:
    return {
        "sink": row.sink,
        "event_id": row.event_id,
        "kind": row.kind,
        "tenant": row.tenant,
        "created_at": _iso(row.created_at),
        "attempts": row.attempts,
        "next_attempt": "" if row.failed else _iso(row.next_at),
        "last_error": row.last_error,
    }


def _iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def run(args: argparse.Namespace) -> int:
    # The gateway's modules only when the command runs: `effectgate --help` and the operator
    # commands build this parser too, and load only the client's modules (runtime/cli.py); the
    # client's renderers (rich, yaml) too, which `serve` never needs.
    from effectgate.client.cli import render
    from effectgate.gateway.config import load_config
    from effectgate.gateway.core import SystemClock
    from effectgate.gateway.runtime.configured import open_configured_store

    config = load_config(args.config)
    store = open_configured_store(config)
    await store.open()
    try:
        if args.notify_command == "retry":
            n = await store.notify_requeue(SystemClock()(), args.sink, args.event)
            print(f"{n} failed notification(s) due again")
            return 0
        rows = await store.notify_rows(args.notify_command == "failed", LIMIT)
    except NotImplementedError:
        print("effectgate notify: this store keeps no notifications", file=sys.stderr)
        return 2
    finally:
        await store.close()
    shown = [row_dict(r) for r in rows if not args.sink or r.sink == args.sink]
    if args.output in ("json", "yaml"):
        render.dump(shown, args.output)
        return 0
    if not shown:
        print(f"no {args.notify_command} notifications")
    for r in shown:
        when = f"next {r['next_attempt']}" if r["next_attempt"] else "failed"
        error = f": {r['last_error']}" if r["last_error"] else ""
        line = f"{r['sink']}  {r['event_id']}  {r['kind']}  {r['tenant']}  {r['attempts']} attempt(s), {when}{error}"
        print(render.printable(line))
    return 0
