"""Store outages: a replica started while PostgreSQL is down waits (NOT_SERVING, /readyz 503,
calls UNAVAILABLE) and serves once it is up, without a restart; a store failure after the
provider was called has its own reason, STORE_UNAVAILABLE_AFTER_SEND."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from effectgate.adapters.base import ActionCall, Receipt
from effectgate.client import RetryPolicy, RunContext, State, Unavailable
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.testing.store import MemoryStore
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.harness import config_doc, stripe_tools
from tests.ports import closed_port, start_on_free_ports
from tests.serve_child import ServeChild, http_get, http_until
from tests.test_execute import request


def reason_of(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return str(info.reason)
    return ""


async def health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(answer.status)


@pytest.mark.postgres
async def test_a_replica_started_while_postgres_is_down_serves_once_it_is_up(
    tmp_path: Path, sim: StripeSimulator, pg_restartable_server: pg.PgServer
) -> None:
    name, dsn = await pg.create_database(pg_restartable_server.dsn)
    await asyncio.to_thread(pg_restartable_server.stop, "immediate")

    async def waiting_on(ports: Sequence[int]) -> ServeChild:
        port, metrics = ports
        doc = config_doc(
            f"{dsn}?connect_timeout=1", listen=f"127.0.0.1:{port}", gateway={"health_interval": "0.2s"},
            **stripe_tools(sim.base_url),
        )  # fmt: skip
        doc["telemetry"] = {"prometheus_listen": f"127.0.0.1:{metrics}"}
        child = await ServeChild.for_config(doc, tmp_path / "eg.toml").start()
        try:  # both ports are bound before this line (a taken one ends the child with one line)
            await child.until(lambda: any("cannot be reached" in line for line in child.stderr), "the waiting line")
        except BaseException:
            await child.stop()
            raise
        return child

    # Both ports are needed before the ready line, which says the gRPC one: picked here, and
    # picked again should another process take one before the child binds it.
    child, (port, metrics) = await start_on_free_ports(waiting_on, 2)
    try:
        assert child.proc is not None and child.proc.returncode is None
        assert await health(port) == health_pb2.HealthCheckResponse.NOT_SERVING
        waiting = await http_get(metrics, "/readyz")
        assert waiting.status_code == 503 and "store" in waiting.text
        assert (await http_get(metrics, "/livez")).status_code == 200
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as refused:
                await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(request(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and reason_of(refused.value) == "STORE_UNAVAILABLE"
        assert sim.ledger == []

        await asyncio.to_thread(pg_restartable_server.start)
        assert await child.ready() == port  # the same process, the same port
        await http_until(metrics, "/readyz", lambda r: r.status_code == 200, "ready")
        assert await health(port) == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(request(), timeout=30)
        assert answer.action.action_id and len(sim.ledger) == 1
    finally:
        assert await child.stop() == 0, child.transcript()
        await pg.drop_database(pg_restartable_server.dsn, name)


async def test_fail_fast_keeps_the_one_line_exit(tmp_path: Path, sim: StripeSimulator) -> None:
    with closed_port() as nothing:
        url = f"postgresql://eg@127.0.0.1:{nothing}/eg?connect_timeout=1"
        doc = config_doc(url, **stripe_tools(sim.base_url))
        child = await ServeChild.for_config(doc, tmp_path / "eg.toml", "--fail-fast").start()
        assert await child.exit_code() == 2
    assert len([line for line in child.stderr if line.strip()]) == 1, child.transcript()


class DownAfterSend(ScriptedAdapter):
    """Sends, then the store goes down before the outcome is written."""

    store: MemoryStore | None = None

    async def execute(self, call: ActionCall) -> Receipt:
        receipt = await super().execute(call)
        if self.store is not None:
            self.store.db.down = True
        return receipt


def payload(amount: int) -> ChargeCard:
    return ChargeCard(customer="cus_42", amount=amount, currency="usd", payment_method="pm_card_visa")


async def test_a_store_failure_after_the_send_has_its_own_reason() -> None:
    adapter = DownAfterSend(time.time, consistency_window=0.0)
    tools = {"pay": {"adapter": "pay", "attempt_timeout": "1s", "deadline": "1.5s"}}
    async with gateway(adapters={"pay": adapter}, tools=tools, settings={"lease_ttl": "2s"}) as gw:
        assert isinstance(gw.store, MemoryStore)
        adapter.store = gw.store
        with pytest.raises(Unavailable) as after:
            await gw.client.execute("pay", payload(1), scope="o:1", context=RunContext("r", "s1"))
        assert after.value.reason == "STORE_UNAVAILABLE_AFTER_SEND" and len(adapter.executed) == 1
        assert "same run context" in after.value.message
        # Down before the send: nothing was sent, the classic reason.
        adapter.store = None
        with pytest.raises(Unavailable) as before:
            await gw.client.execute("pay", payload(2), scope="o:2", context=RunContext("r", "s2"))
        assert before.value.reason == "STORE_UNAVAILABLE" and len(adapter.executed) == 1
        # Healed: the same context is verified, never sent twice.
        gw.store.db.heal()
        retrying = gw.connect(retry=RetryPolicy(max_attempts=20, total_budget=60))
        try:
            settled = await retrying.execute("pay", payload(1), scope="o:1", context=RunContext("r", "s1"))
        finally:
            await retrying.close()
        assert settled.action.state == State.CONFIRMED
        assert len(adapter.effects_of(settled.action.action_id)) == 1
