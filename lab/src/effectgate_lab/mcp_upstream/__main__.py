"""An upstream MCP simulator as a stdio server (the host launches it as a command):

    python -m effectgate_lab.mcp_upstream --kind mail --ledger /tmp/mail.jsonl --faults /tmp/f.json

The ledger and the fault script are files, so they outlive the process: a `restart` fault (or a
`drop_after_commit`, which over stdio can only lose the answer by going away) ends the process
and the host's next call starts a fresh one that sees the same ledger. The credential it expects
(`--expect-token`) must arrive in the environment variable `MCP_TOKEN`, as a host passes an API
key to a server it launches.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

import anyio
from mcp.server.stdio import stdio_server

from effectgate_lab.mcp_upstream.ledger import FaultScript, Ledger
from effectgate_lab.mcp_upstream.servers import KINDS, Hooks, Upstream, build_server

TOKEN_VARIABLE = "MCP_TOKEN"


def _gone(code: int) -> NoReturn:
    # No answer, no goodbye: the way a crashed server leaves its host.
    sys.stdout.flush()
    os._exit(code)


async def _drop() -> None:
    _gone(3)


async def _restart() -> None:
    _gone(4)


async def serve(upstream: Upstream) -> None:
    server = build_server(upstream)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m effectgate_lab.mcp_upstream")
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--ledger", type=Path, required=True)
    p.add_argument("--faults", type=Path, required=True)
    p.add_argument("--expect-token", default="")
    p.add_argument("--list-lag", type=float, default=0.0)
    p.add_argument("--visibility-lag", type=float, default=1.0)
    p.add_argument("--slow-seconds", type=float, default=5.0)
    p.add_argument("--pid-file", type=Path, help="written with this process's id (a test kills it)")
    args = p.parse_args(argv)
    if args.pid_file is not None:
        args.pid_file.write_text(str(os.getpid()))
    upstream = Upstream(
        kind=args.kind,
        ledger=Ledger(args.ledger),
        faults=FaultScript(args.faults),
        hooks=Hooks(drop=_drop, restart=_restart),
        token=args.expect_token,
        presented=lambda: os.environ.get(TOKEN_VARIABLE, ""),
        list_lag=args.list_lag,
        visibility_lag=args.visibility_lag,
        slow_seconds=args.slow_seconds,
    )
    anyio.run(serve, upstream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
