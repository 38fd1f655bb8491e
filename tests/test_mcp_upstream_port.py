"""The MCP HTTP simulator keeps its port from its first start to close(): stopped, its port
refuses connections and no other socket can bind it (a second suite on the machine could take a
freed one before the start that must come back on it); started again, it serves on that port."""

from __future__ import annotations

import errno
import socket

import httpx
import pytest

from effectgate_lab.mcp_upstream.http import McpHttpSimulator


def bind_elsewhere(port: int) -> None:
    """Binds `port` the way a careless neighbour would (SO_REUSEADDR), then lets it go."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))


async def test_a_stopped_simulator_refuses_and_keeps_its_port() -> None:
    sim = McpHttpSimulator("mail", token="t0ken")
    await sim.start()
    port = sim.port
    try:
        # No kept-alive connection: each request is a new connect (refused while stopped).
        async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as web:
            for round_ in range(3):  # each run leaves connections in TIME_WAIT behind it
                assert (await web.post(sim.url, json={})).status_code == 401, round_
                await sim.stop()
                with pytest.raises(httpx.ConnectError):
                    await web.post(sim.url, json={})
                with pytest.raises(OSError) as taken:
                    bind_elsewhere(port)
                assert taken.value.errno == errno.EADDRINUSE
                await sim.start()
                assert sim.port == port
            assert (await web.post(sim.url, json={})).status_code == 401
            await sim.restart()
            assert sim.port == port and (await web.post(sim.url, json={})).status_code == 401
    finally:
        await sim.close()
    bind_elsewhere(port)  # closed: the port is let go
