"""Operator commands: `effectgate actions|show|verify|approve|reconcile|grant-bypass`.

They talk to a running gateway through the generated client, with the token from
`$EFFECTGATE_TOKEN` (or `--token-env NAME`), and print one action per line (or JSON with --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import grpc
from google.protobuf import json_format

from effectgate.client import EffectGateClient
from effectgate.v1 import gateway_pb2 as pb

COMMANDS = ("actions", "show", "verify", "approve", "reconcile", "grant-bypass")
RESOLUTIONS = {
    "CONFIRMED": pb.EFFECT_STATE_CONFIRMED,
    "REJECTED": pb.EFFECT_STATE_REJECTED,
    "NOT_FOUND": pb.EFFECT_STATE_NOT_FOUND,
}


def add_commands(commands: Any) -> None:
    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        sub.add_argument("--target", default="127.0.0.1:50051", help="gateway address (default %(default)s)")
        sub.add_argument("--token-env", default="EFFECTGATE_TOKEN", help="variable holding the bearer token")
        sub.add_argument("--json", action="store_true", help="print JSON")
        return sub

    listing = command("actions", "list actions (oldest first)")
    listing.add_argument("--state", choices=[n.removeprefix("EFFECT_STATE_") for n in pb.EffectState.keys()[1:]])
    listing.add_argument("--run", default="")
    listing.add_argument("--tool", default="")
    listing.add_argument("--limit", type=int, default=100)
    for name, help_text in (("show", "show one action"), ("verify", "read the provider's state back now")):
        command(name, help_text).add_argument("action_id")
    for name, help_text in (("approve", "approve an action"), ("grant-bypass", "allow one new effect")):
        sub = command(name, help_text)
        sub.add_argument("action_id")
        sub.add_argument("--note", required=True)
    reconcile = command("reconcile", "settle an UNKNOWN action with the evidence you found")
    reconcile.add_argument("action_id")
    reconcile.add_argument("--resolution", required=True, choices=sorted(RESOLUTIONS))
    reconcile.add_argument("--note", required=True)
    reconcile.add_argument("--external-id", default="")


def _line(action: pb.Action) -> str:
    state = pb.EffectState.Name(action.state).removeprefix("EFFECT_STATE_")
    receipt = action.receipt.external_id or "-"
    return f"{action.action_id}  {state:17} {action.tool:16} {action.scope:20} {receipt:28} {action.reason}"


async def _run(args: argparse.Namespace) -> list[pb.Action]:
    client = EffectGateClient.connect(args.target, token=os.environ.get(args.token_env, ""))
    meta = client.metadata
    try:
        if args.command == "actions":
            found: list[pb.Action] = []
            token = ""
            state = pb.EffectState.Value(f"EFFECT_STATE_{args.state or 'UNSPECIFIED'}")
            while len(found) < args.limit:
                page = await client.stub.ListActions(
                    pb.ListActionsRequest(
                        state=state, run_id=args.run, tool=args.tool, page_size=min(100, args.limit), page_token=token
                    ),
                    metadata=meta,
                )
                found += page.actions
                token = page.next_page_token
                if not token:
                    break
            return found[: args.limit]
        if args.command == "show":
            return [await client.get(args.action_id)]
        if args.command == "verify":
            return [(await client.verify(args.action_id)).action]
        if args.command == "approve":
            request = pb.ApproveRequest(action_id=args.action_id, note=args.note)
            return [await client.operator.Approve(request, metadata=meta)]
        if args.command == "grant-bypass":
            grant = pb.GrantBypassRequest(action_id=args.action_id, note=args.note)
            return [await client.operator.GrantBypass(grant, metadata=meta)]
        settle = pb.ReconcileRequest(
            action_id=args.action_id,
            resolution=RESOLUTIONS[args.resolution],
            note=args.note,
            external_id=args.external_id,
        )
        return [await client.operator.Reconcile(settle, metadata=meta)]
    finally:
        await client.close()


def run_command(args: argparse.Namespace) -> int:
    try:
        actions = asyncio.run(_run(args))
    except grpc.aio.AioRpcError as exc:
        print(f"effectgate {args.command}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    for action in actions:
        print(json.dumps(json_format.MessageToDict(action)) if args.json else _line(action))
    return 0
