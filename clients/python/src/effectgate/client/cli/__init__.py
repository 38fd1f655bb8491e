"""Operator commands: `effectgate actions|events|show|describe|verify|approve|deny|reconcile|grant-bypass|limits`
and `grant-limit`.

They speak to a running gateway through EffectGateClient only, over plaintext, TLS or mTLS
(`--tls-ca`, `--tls-cert`, `--tls-key`, or EFFECTGATE_TLS_CA / _CERT / _KEY), with the target
from `--target` or EFFECTGATE_TARGET and the token from $EFFECTGATE_TOKEN (or `--token-env NAME`).
They print tables and descriptions for people and JSON or YAML for scripts (`-o`); whatever the
gateway stores came from agents, so control characters are escaped before anything reaches the
operator's terminal. docs/operations.md is their reference, with the exit codes.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from effectgate.client.cli.args import STATES, add_commands
from effectgate.client.cli.exits import EXIT_GATEWAY, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from effectgate.client.cli.parser import Parser

__all__ = [
    "COMMANDS",
    "EXIT_GATEWAY",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "STATES",
    "add_commands",
    "client_version",
    "main",
    "printable",
    "run_command",
]

COMMANDS = (
    *("actions", "events", "show", "describe", "verify", "approve", "deny", "reconcile", "grant-bypass"),
    *("limits", "grant-limit"),
)


# The commands and their renderers (rich, yaml: a fifth of a second of imports) load when a
# command runs or prints: the gateway's `effectgate serve` adds these commands to its parser
# and never runs one.


def run_command(args: argparse.Namespace) -> int:
    """Run the operator command `args` names; its exit code."""
    from effectgate.client.cli.commands import run_command as run

    return run(args)


def printable(text: str) -> str:
    """`text` with control and format characters escaped (render.printable)."""
    from effectgate.client.cli.render import printable as escaped

    return escaped(text)


def client_version() -> str:
    """effectgate-client's version, from the installed package's metadata (pyproject.toml)."""
    try:
        return version("effectgate-client")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """`python -m effectgate.client.cli …`: the operator commands with only the client installed."""
    parser = Parser(prog="effectgate", description="effectgate operator commands")
    parser.add_argument("--version", action="version", version=f"effectgate-client {client_version()}")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(argv))
