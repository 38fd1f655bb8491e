"""The `effectgate` command: `serve` runs the gateway; operator commands; plug-in commands such as
`chaos` (installed by effectgate-lab) are found through an entry-point group."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from effectgate.adapters.base import ConfigError as AdapterConfigError
from effectgate.gateway import admin_cli, audit_log, telemetry_sdk
from effectgate.gateway.config import ConfigError, load_config

COMMANDS_GROUP = "effectgate.commands"


def plugin_names() -> set[str]:
    return {ep.name for ep in entry_points(group=COMMANDS_GROUP)}


def plugin_command(name: str) -> Callable[[list[str]], int] | None:
    """The `main(argv)` of an installed plug-in command, e.g. `chaos` from effectgate-lab."""
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name == name:
            command: Callable[[list[str]], int] = ep.load()
            return command
    return None


async def serve(config_path: str) -> int:
    from effectgate.gateway.server import Gateway

    config = load_config(config_path)
    audit_log.quiet_provider_sdks(not config.telemetry.provider_sdk_logs)
    observability = telemetry_sdk.setup(config.telemetry, config.adapters)
    gateway = await Gateway.start(config)
    observability.watch(gateway.store, sorted({p.tenant for p in config.principals} or {"dev"}))
    # Tests and supervisors read this line to learn the port (listen = "127.0.0.1:0").
    print(f"effectgate serving on port {gateway.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("effectgate").info("shutting down gracefully")
    await gateway.stop()
    await observability.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugin = plugin_command(argv[0]) if argv else None
    if plugin is not None:
        # Plug-in commands (e.g. `chaos` from effectgate-lab) parse their own options.
        return int(plugin(argv[1:]))
    parser = argparse.ArgumentParser(prog="effectgate", description="exactly-once side effects for AI agents")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="json: one object a line")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the gateway")
    serve_cmd.add_argument("--config", required=True, help="path of the TOML config")
    for name in sorted(plugin_names()):
        commands.add_parser(name, help=f"plug-in command ({COMMANDS_GROUP})", add_help=False)
    admin_cli.add_commands(commands)
    args = parser.parse_args(argv)
    audit_log.configure_logging(args.log_level, args.log_format)
    try:
        if args.command == "serve":
            return asyncio.run(serve(args.config))
        return admin_cli.run_command(args)
    except (ConfigError, AdapterConfigError) as exc:
        print(f"effectgate: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
