"""`serve --workers N`'s hold on a port (runtime/workers.py, PortClaim), on real sockets and real
processes on 127.0.0.1. Between the parent's claim and the workers' listen nobody else can take
the port: a SO_REUSEADDR listener (gRPC's, uvicorn's, most servers') is refused and a plain
`serve` exits 2 naming the pool, while a worker's SO_REUSEPORT listener is let in. A pool started
right after a plain gateway, or a pool, stopped on that port with connections open (their TIME_WAIT
sockets are on the port) starts all the same."""

from __future__ import annotations

import asyncio
import errno
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from effectgate.gateway.runtime.startup import POOL_HOLDS
from effectgate.gateway.runtime.workers import PortClaim
from tests.harness import GatewayProcess
from tests.test_startup import _spawn_workers, base_toml, one_line_failure, run_cli, write

TIME_WAIT = "06"  # the state's code in /proc/net/tcp


def time_wait_on(port: int) -> int:
    """How many TCP connections in TIME_WAIT have `port` as their local port (gRPC's sockets for
    127.0.0.1 are IPv6 ones, on ::ffff:127.0.0.1)."""
    rows = [row.split() for table in ("tcp", "tcp6") for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]]
    return sum(1 for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == TIME_WAIT)


def test_nobody_but_the_workers_can_take_a_claimed_port(tmp_path: Path) -> None:
    claim = PortClaim("127.0.0.1:0")  # the parent's hold, as between its claim and its workers' listen
    try:
        with socket.socket() as intruder, pytest.raises(OSError) as refused:
            intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            intruder.bind(("127.0.0.1", claim.port))
            intruder.listen()
        assert refused.value.errno == errno.EADDRINUSE
        text = base_toml(tmp_path).replace("127.0.0.1:0", f"127.0.0.1:{claim.port}")
        line = one_line_failure(run_cli("serve", "--config", str(write(tmp_path, text))))
        assert line == f"effectgate: cannot listen on 127.0.0.1:{claim.port}: Address already in use ({POOL_HOLDS})"
        with socket.socket() as worker:  # a worker's listener: SO_REUSEPORT (and gRPC's SO_REUSEADDR)
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            worker.bind(("127.0.0.1", claim.port))
            worker.listen()
    finally:
        claim.close()


@contextmanager
def _connections(port: int) -> Iterator[None]:
    """Four connections to `port`, open through the block, which the server closes as it stops:
    each is closed here once the server's end has, so the TIME_WAIT sockets are the server's, on
    its port (a gRPC client would close first as the server says GOAWAY; its own are elsewhere)."""
    clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(4)]
    try:
        for client in clients:  # its SETTINGS frame: accepted (one left in the backlog would be reset)
            assert client.recv(4096)
        yield
        for client in clients:
            while client.recv(4096):  # its HTTP/2 frames (SETTINGS, GOAWAY), then the end
                pass
    finally:
        for client in clients:
            client.close()


async def _ready_pool(pool: subprocess.Popen[str]) -> int:
    assert pool.stdout is not None
    ready = await asyncio.wait_for(asyncio.to_thread(pool.stdout.readline), 90)
    found = re.search(r"serving on port (\d+) \(2 workers\)", ready)
    assert found, ready
    return int(found.group(1))


async def _stopped(pool: subprocess.Popen[str]) -> int:
    if pool.poll() is None:
        pool.send_signal(signal.SIGTERM)
    return await asyncio.to_thread(pool.wait, 60)


def _kill(pool: subprocess.Popen[str]) -> None:
    if pool.poll() is None:
        pool.kill()
        pool.wait(10)


async def _served_then_stopped(config: Path, before: str) -> int:
    """`before` (a plain gateway or a pool) served on port 0 and stopped with connections open;
    the port it served on."""
    if before == "a plain gateway":
        gateway = GatewayProcess(config)
        try:
            port = await gateway.ready()
            with _connections(port):
                assert await gateway.stop() == 0
        finally:
            gateway.kill()
        return port
    pool = _spawn_workers(config, 2)
    try:
        port = await _ready_pool(pool)
        with _connections(port):
            assert await _stopped(pool) == 0
    finally:
        _kill(pool)
    return port


@pytest.mark.timeout(300)
@pytest.mark.parametrize("before", ["a plain gateway", "a pool"])
async def test_a_pool_starts_at_once_where_a_gateway_just_served(tmp_path: Path, before: str) -> None:
    port = await _served_then_stopped(write(tmp_path, base_toml(tmp_path)), before)
    assert time_wait_on(port), f"no TIME_WAIT connection on port {port}: not the case this test is about"
    again = write(tmp_path, base_toml(tmp_path).replace("127.0.0.1:0", f"127.0.0.1:{port}"), "again.toml")
    pool = _spawn_workers(again, 2)
    try:
        assert await _ready_pool(pool) == port
        assert time_wait_on(port), "the TIME_WAIT connections were gone before the pool bound the port"
        assert await _stopped(pool) == 0
    finally:
        _kill(pool)
