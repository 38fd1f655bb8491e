"""The peers' worker supervisor (lab: chaos/peers/supervisor.py) on a busy machine: the engine
knows its worker's URL, so a worker that dies must come back on the same port. The supervisor
holds the port and hands the worker its listening socket: the port is never free for another
process to take (a clean clone's suite beside another job once saw a DBOS worker die with
"address already in use"), the worker never binds, and a killed worker is back on that port."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest

from effectgate_lab.chaos.peers.supervisor import Worker


def bind_elsewhere(port: int) -> None:
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))


async def answers(url: str) -> int:
    async with httpx.AsyncClient() as client:  # it serves there: its routes answer POST only
        return (await client.get(f"{url}/call")).status_code


async def test_a_killed_worker_comes_back_on_the_port_its_supervisor_held(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/dbos.sqlite"
    worker = Worker("effectgate_lab.chaos.peers.dbos_worker", ["--db", db], tmp_path / "worker.log")
    port = worker.port
    with pytest.raises(OSError) as taken:  # held before the worker even starts
        bind_elsewhere(port)
    assert taken.value.errno == errno.EADDRINUSE
    await worker.start()
    try:
        assert await answers(worker.url) == 405
        first = worker.pid
        os.kill(first, signal.SIGKILL)
        async with asyncio.timeout(120):  # the watchdog starts another worker on the same socket
            while not (worker.deaths == 1 and worker.ready.is_set()):  # noqa: ASYNC110 - two fields, no one event
                await asyncio.sleep(0.1)
        assert worker.pid != first and worker.port == port
        assert await answers(worker.url) == 405
        assert "address already in use" not in (tmp_path / "worker.log").read_text().lower()
    finally:
        await worker.stop()
    bind_elsewhere(port)  # stopped: the port is let go
