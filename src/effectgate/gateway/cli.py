"""The `effectgate` command: `serve` runs the gateway; `chaos` runs the fault harness."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from effectgate.adapters.base import ConfigError as AdapterConfigError
from effectgate.gateway import admin_cli
from effectgate.gateway.config import ConfigError, load_config


async def serve(config_path: str) -> int:
    from effectgate.gateway.server import Gateway

    config = load_config(config_path)
    gateway = await Gateway.start(config)
    # Tests and supervisors read this line to learn the port (listen = "127.0.0.1:0").
    print(f"effectgate serving on port {gateway.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("effectgate").info("shutting down gracefully")
    await gateway.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["chaos"]:
        # argparse's REMAINDER does not keep leading options (`chaos --seeds 5`): hand them over as-is.
        from effectgate.chaos.cli import main as chaos_main

        return chaos_main(argv[1:])
    parser = argparse.ArgumentParser(prog="effectgate", description="exactly-once side effects for AI agents")
    parser.add_argument("--log-level", default="INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the gateway")
    serve_cmd.add_argument("--config", required=True, help="path of the TOML config")
    chaos_cmd = commands.add_parser("chaos", help="run the chaos harness (see docs)", add_help=False)
    chaos_cmd.add_argument("rest", nargs=argparse.REMAINDER)
    admin_cli.add_commands(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return asyncio.run(serve(args.config))
        if args.command in admin_cli.COMMANDS:
            return admin_cli.run_command(args)
        from effectgate.chaos.cli import main as chaos_main

        return int(chaos_main(args.rest))
    except (ConfigError, AdapterConfigError) as exc:
        print(f"effectgate: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
