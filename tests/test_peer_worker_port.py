"""The peers' worker supervisor (lab: chaos/peers/supervisor.py) on a busy machine: the port it
picked for a worker may be taken by another process before the worker binds it (a clean clone's
suite beside another job saw a DBOS worker die with "address already in use"). A worker that never
served yet starts on another port; a restart keeps its port (the engine knows it)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from effectgate_lab.chaos.peers.supervisor import Worker


async def test_a_worker_whose_port_was_taken_before_it_bound_starts_on_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        db = f"sqlite:///{tmp_path}/dbos.sqlite"
        worker = Worker("effectgate_lab.chaos.peers.dbos_worker", ["--db", db], tmp_path / "worker.log")
        worker.port = busy
        await worker.start()
        try:
            assert worker.port != busy
            assert "address already in use" in (tmp_path / "worker.log").read_text()
            async with httpx.AsyncClient() as client:  # it serves there: its routes answer POST only
                reply = await client.get(f"{worker.url}/call")
            assert reply.status_code == 405, reply.text
        finally:
            await worker.stop()
