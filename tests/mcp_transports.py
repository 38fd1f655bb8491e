"""The `mcp` SDK's own Client on each transport against `effectgate mcp`: in-process, over stdio
(a real `effectgate mcp` child) and over streamable HTTP on loopback (a real child too)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from effectgate.mcp.catalog import load_catalog
from effectgate.mcp.gateway_port import GatewayPort
from effectgate.mcp.server import FrontDoor, build_server
from tests.agent_gateway import RunningGateway

TRANSPORTS = ["inproc", "stdio", "http"]
CLI = [sys.executable, "-m", "effectgate.gateway", "mcp"]


@asynccontextmanager
async def http_front_door(gw: RunningGateway, *extra: str) -> AsyncIterator[str]:
    """`effectgate mcp --http --port 0` as a child (with `extra` options); yields its URL."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *("--config", str(gw.config), "--target", gw.target, "--http", "--port", "0", *extra),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        found = re.search(r"listening on (https?://\S+)", line)
        assert found, f"effectgate mcp did not start: {line!r}"
        yield found.group(1)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


@asynccontextmanager
async def mcp_client(kind: str, gw: RunningGateway, token: str) -> AsyncIterator[Client]:
    if kind == "inproc":
        gateway = GatewayPort(gw.target)
        server = build_server(FrontDoor(load_catalog(gw.config), gateway, static_token=token))
        try:
            async with Client(server) as client:
                yield client
        finally:
            await gateway.close()
    elif kind == "stdio":
        params = StdioServerParameters(
            command=CLI[0],
            args=[*CLI[1:], "--config", str(gw.config), "--target", gw.target],
            env={**os.environ, "EFFECTGATE_TOKEN": token},
        )
        async with Client(params) as client:
            yield client
    else:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            http_front_door(gw) as url,
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            yield client
