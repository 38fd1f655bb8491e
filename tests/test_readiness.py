"""Health means ready: NOT_SERVING while another process holds the SQLite write lock or PostgreSQL
is down (the store cannot be written), SERVING again once it recovers; NOT_SERVING when the
reconciler has died."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# A child process that takes the write lock and holds it until its stdin closes.
HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
db.execute("COMMIT")
"""


@pytest.fixture
async def live(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[LiveGateway]:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", gateway={"health_interval": "0.2s"}, **stripe_tools(sim.base_url))
    gateway = await start_gateway(doc)
    yield gateway
    await gateway.close()


async def wait_for_status(live: LiveGateway, wanted: int, timeout: float = 60.0) -> None:
    stub = health_pb2_grpc.HealthStub(live.channel)
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        answers = [
            (await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)).status
            for name in ("", "effectgate.v1.EffectGateway", "effectgate.v1.Operator")
        ]
        if all(a == wanted for a in answers):
            return
        assert loop.time() < end, f"health stayed {answers}, wanted {wanted}"
        await asyncio.sleep(0.1)


async def test_not_serving_while_another_process_holds_the_write_lock(tmp_path: Path, live: LiveGateway) -> None:
    await wait_for_status(live, SERVING)
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_LOCK, str(tmp_path / "eg.db"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 60)).strip() == b"locked"
        await wait_for_status(live, NOT_SERVING)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 60)
    assert holder.returncode == 0
    await wait_for_status(live, SERVING)


async def test_not_serving_when_the_reconciler_died(live: LiveGateway) -> None:
    await wait_for_status(live, SERVING)
    reconciling = live.gateway.background.task("reconciler")
    reconciling.cancel()
    await wait_for_status(live, NOT_SERVING)


async def test_postgres_down_is_not_serving_and_recovers(
    sim: StripeSimulator, pg_restartable_server: pg.PgServer
) -> None:
    name, dsn = await pg.create_database(pg_restartable_server.dsn)
    doc = config_doc(f"{dsn}?connect_timeout=1", gateway={"health_interval": "0.2s"}, **stripe_tools(sim.base_url))
    live = await start_gateway(doc)
    try:
        await wait_for_status(live, SERVING)
        await asyncio.to_thread(pg_restartable_server.stop, "immediate")
        await wait_for_status(live, NOT_SERVING)
        await asyncio.to_thread(pg_restartable_server.start)
        await wait_for_status(live, SERVING)
    finally:
        await live.close()
        await pg.drop_database(pg_restartable_server.dsn, name)
