"""Operator commands: `effectgate actions|show|verify|approve|reconcile|grant-bypass`.

They speak to a running gateway through EffectGateClient only, over plaintext, TLS or mTLS
(`--tls-ca`, `--tls-cert`, `--tls-key`, or EFFECTGATE_TLS_CA / _CERT / _KEY), with the target
from `--target` or EFFECTGATE_TARGET and the token from $EFFECTGATE_TOKEN (or `--token-env NAME`).
They print one action per line (or JSON with --json). Whatever the gateway stores came from
agents, so control characters are escaped before anything reaches the operator's terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from google.protobuf import json_format

from effectgate.client.calls import RESOLUTIONS
from effectgate.client.client import EffectGateClient
from effectgate.client.errors import EffectGateError
from effectgate.client.states import State
from effectgate.v1 import gateway_pb2 as pb

COMMANDS = ("actions", "show", "verify", "approve", "reconcile", "grant-bypass")
STATES = State.names()


def add_commands(commands: Any) -> None:
    """Adds the operator commands to an argparse sub-parsers object."""

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        sub.add_argument("--target", default=None, help="host:port (default $EFFECTGATE_TARGET, else 127.0.0.1:50051)")
        sub.add_argument("--token-env", default="EFFECTGATE_TOKEN", help="variable holding the bearer token")
        sub.add_argument("--tls", action="store_true", default=None, help="TLS with the system's root certificates")
        sub.add_argument("--tls-ca", default=None, help="PEM roots to verify the gateway (default $EFFECTGATE_TLS_CA)")
        sub.add_argument("--tls-cert", default=None, help="client certificate for mTLS (default $EFFECTGATE_TLS_CERT)")
        sub.add_argument("--tls-key", default=None, help="its private key (default $EFFECTGATE_TLS_KEY)")
        sub.add_argument("--json", action="store_true", help="print JSON")
        return sub

    listing = command("actions", "list actions (oldest first)")
    listing.add_argument("--state", choices=STATES)
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


def printable(text: str) -> str:
    """Escapes control and format characters (ANSI escapes, CR, bidi overrides) so that text from
    agents cannot move the cursor, recolour or rewrite the operator's terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _line(action: pb.Action) -> str:
    state = State.name(action.state)
    receipt = action.receipt.external_id or "-"
    return printable(f"{action.action_id}  {state:17} {action.tool:16} {action.scope:20} {receipt:28} {action.reason}")


def client_for(args: argparse.Namespace) -> EffectGateClient:
    return EffectGateClient(
        args.target,
        token=os.environ.get(args.token_env, ""),
        tls=args.tls,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
    )


async def _run(args: argparse.Namespace) -> list[pb.Action]:
    async with client_for(args) as client:
        if args.command == "actions":
            state = State.value(args.state) if args.state else State.UNSPECIFIED
            found: list[pb.Action] = []
            async for action in client.list(
                state=state, run_id=args.run, tool=args.tool, page_size=min(100, args.limit)
            ):
                found.append(action)
                if len(found) >= args.limit:
                    break
            return found
        if args.command == "show":
            return [await client.get(args.action_id)]
        if args.command == "verify":
            return [(await client.verify(args.action_id)).action]
        if args.command == "approve":
            return [await client.approve(args.action_id, note=args.note)]
        if args.command == "grant-bypass":
            return [await client.grant_bypass(args.action_id, note=args.note)]
        return [
            await client.reconcile(
                args.action_id, resolution=args.resolution, note=args.note, external_id=args.external_id
            )
        ]


def run_command(args: argparse.Namespace) -> int:
    try:
        actions = asyncio.run(_run(args))
    except EffectGateError as exc:
        print(printable(f"effectgate {args.command}: {exc}"), file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # unreadable TLS files, half a client certificate
        print(printable(f"effectgate {args.command}: {exc}"), file=sys.stderr)
        return 2
    for action in actions:
        # json.dumps escapes every control character (\u001b), so JSON output is safe as it is.
        print(json.dumps(json_format.MessageToDict(action)) if args.json else _line(action))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m effectgate.client.cli …`: the operator commands with only the client installed."""
    parser = argparse.ArgumentParser(prog="effectgate", description="effectgate operator commands")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
