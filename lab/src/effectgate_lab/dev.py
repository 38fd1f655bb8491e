"""`make run` (`python -m effectgate_lab.dev`, or `effectgate dev`): a gateway to try, until Ctrl-C.

Starts the bundled provider simulators on fixed loopback ports (Stripe, Postmark and the CRM, no
injected faults), writes a development config that shows the product (no principals, SQLite, a
tool that needs an operator's approval, the webhook listener fed by the Stripe simulator) and runs
`effectgate serve` on it as a child process, then prints the address, the tools and commands that
work as printed. Ctrl-C or SIGTERM stops the gateway (gracefully), then the simulators.

    python -m effectgate_lab.dev [--port 50051] [--dir .effectgate/dev]
    effectgate dev trigger lost-answer|error-500|slow|lost-request|webhook ACTION_ID [--port 50051]

The port may also come from EFFECTGATE_DEV_PORT. Each port has its own folder under --dir, held by
a lock while its run lasts: a second run on a busy port stops before it touches anything. Each
start begins with an empty store, like the simulators.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from effectgate_lab.interrupt import run_quietly

PORT_ENV = "EFFECTGATE_DEV_PORT"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="effectgate dev", description=(__doc__ or "").split("\n\n")[0])
    from effectgate_lab.devrun.layout import DEFAULT_PORT, DEFAULT_ROOT  # the standard library only

    default_port = int(os.environ.get(PORT_ENV) or DEFAULT_PORT)
    parser.add_argument("--port", type=int, default=default_port, help=f"gateway port (default {default_port})")
    parser.add_argument("--dir", type=Path, default=DEFAULT_ROOT, help="one folder per port below it")
    commands = parser.add_subparsers(dest="command")
    trigger = commands.add_parser("trigger", help="make something happen to the running `make run`")
    trigger.add_argument("kind", choices=("lost-answer", "error-500", "slow", "lost-request", "webhook"))
    trigger.add_argument("action_id", nargs="?", default="", help="webhook: the action whose payment to announce")
    trigger.add_argument("--port", type=int, default=argparse.SUPPRESS, help="the gateway port of that run")
    trigger.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help="its --dir")
    return parser.parse_args(argv)


async def _serve(port: int, root: Path) -> int:
    from effectgate_lab.devrun.layout import DevError, folder
    from effectgate_lab.devrun.serve import serve

    try:
        return await serve(port, folder(root, port))
    except DevError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 2


def _trigger(args: argparse.Namespace) -> int:
    from effectgate_lab.devrun.layout import DevError, folder
    from effectgate_lab.devrun.trigger import trigger

    try:
        print(trigger(folder(args.dir, args.port), args.kind, args.action_id))
    except DevError as exc:
        print(f"effectgate dev trigger: {exc}", file=sys.stderr)
        return 2
    return 0


def run(argv: list[str]) -> int:
    args = parse(argv)
    if args.command == "trigger":
        return _trigger(args)
    import asyncio

    return asyncio.run(_serve(args.port, args.dir))


def main(argv: list[str] | None = None) -> int:
    """a gateway to try, with simulated providers, until Ctrl-C (`make run`)

    The `effectgate dev` plug-in command (and `python -m effectgate_lab.dev`); the first line of
    this docstring is what `effectgate --help` says of it."""
    return run_quietly("effectgate_lab.dev:run", "make run", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
