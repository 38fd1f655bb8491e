"""`effectgate mcp`: the MCP front door over stdio (default) or streamable HTTP on loopback.

    effectgate mcp --config effectgate.toml --target 127.0.0.1:50051            # stdio
    effectgate mcp --config effectgate.toml --target … --http --port 8765       # HTTP

Over stdio (and in-process) the caller's token is the process's: `--token-env` names the
environment variable holding it. Over HTTP each request brings its own bearer token.

The gateway is dialled with TLS (and mTLS) the way the Python client dials it: EFFECTGATE_TLS_CA,
EFFECTGATE_TLS_CERT and EFFECTGATE_TLS_KEY, EFFECTGATE_TLS=1; EFFECTGATE_TLS_SERVER_NAME checks the
gateway's certificate against that name instead of the target's host.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

import anyio

from effectgate.client.settings import Settings
from effectgate.mcp import tracing
from effectgate.mcp.catalog import CatalogError, load_catalog, needs_upstream
from effectgate.mcp.gateway_port import GatewayPort
from effectgate.mcp.http import HttpSettingsError, serve_http
from effectgate.mcp.server import FrontDoor, build_server
from effectgate.mcp.upstream import with_upstream_schemas
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

log = logging.getLogger("effectgate.mcp")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="effectgate mcp", description="MCP front door to an effectgate gateway")
    # EFFECTGATE_CONFIG is the default, as for every command that reads the config.
    config = os.environ.get("EFFECTGATE_CONFIG", "").strip()
    where = {"default": config} if config else {"required": True}
    words = "the gateway's TOML config ([tools.*], [adapters.*], [mcp]); default: $EFFECTGATE_CONFIG"
    p.add_argument("--config", **where, help=words)
    p.add_argument("--target", default=os.environ.get("EFFECTGATE_TARGET", "127.0.0.1:50051"), help="gateway host:port")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio (127.0.0.1 by default)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address; not loopback only with --cert-file/--key-file")
    p.add_argument("--cert-file", default="", help="HTTP over TLS: the listener's PEM certificate chain")
    p.add_argument("--key-file", default="", help="HTTP over TLS: its PEM private key")
    p.add_argument("--authorization-server", default="", help="advertised in the protected-resource metadata")
    p.add_argument("--token-env", default="EFFECTGATE_TOKEN", help="stdio: variable holding the bearer token")
    p.add_argument("--log-level", default="WARNING")
    return p


async def run(args: argparse.Namespace) -> None:
    catalog = load_catalog(args.config)
    if needs_upstream(catalog):
        catalog = await with_upstream_schemas(catalog)
    stop_tracing = tracing.setup()
    server_name = os.environ.get("EFFECTGATE_TLS_SERVER_NAME", "")
    gateway = GatewayPort(args.target, settings=args.gateway_tls, server_name=server_name)
    token = "" if args.http else os.environ.get(args.token_env, "")
    server = build_server(FrontDoor(catalog, gateway, static_token=token))
    try:
        if args.http:
            await serve_http(
                server,
                gateway,
                port=args.port,
                authorization_server=args.authorization_server,
                host=args.host,
                cert_file=args.cert_file,
                key_file=args.key_file,
            )
        else:
            await serve_stdio(server)
    finally:
        await gateway.close()  # waits for Executes still running whose host went away
        stop_tracing()  # flushes the front door's spans


def gateway_tls(target: str) -> Settings:
    """The client's TLS settings from the environment; a wrong one is a configuration error."""
    try:
        settings = Settings.resolve(target)
    except ValueError as exc:
        raise CatalogError(f"TLS to the gateway: {exc}") from None
    for path in (settings.ca_file, settings.cert_file, settings.key_file):
        if path and not os.path.isfile(path):
            raise CatalogError(f"TLS to the gateway: cannot read {path!r}")
    return settings


async def serve_stdio(server: Server[Any]) -> None:
    """Until the host closes stdin. A host that vanished mid-call cannot read its answer: the
    write fails, the call itself has completed (the gateway stored it), and the front door ends
    normally; the host's next call, with the same `_meta`, replays the stored action."""
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    except* (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        log.info("the MCP host went away; its calls completed and are stored")


def main(argv: list[str] | None = None) -> int:
    """the MCP front door: the gateway's tools to MCP hosts, over stdio or streamable HTTP"""
    args = parser().parse_args(argv)
    # stdout is the stdio transport: logs go to stderr only.
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        args.gateway_tls = gateway_tls(args.target)
        if args.http:
            asyncio.run(run(args))
        else:
            anyio.run(run, args)
    except (CatalogError, HttpSettingsError) as exc:
        print(f"effectgate mcp: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
