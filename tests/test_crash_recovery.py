"""kill -9 of a real `effectgate serve` process at a crash point, then a restart: the reconciler
settles the action with no agent calling again, and the provider saw one effect. And SIGTERM lets
the action in flight finish."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2

from effectgate.gateway.model.keys import action_id
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import GatewayProcess, config_doc, stripe_tools

CHARGE = tools_pb2.ChargeCard(customer="cus_7", amount=4200, currency="eur", payment_method="pm_card_visa")


def charge_request(run: str) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(CHARGE)
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id="pay"),
        tool="charge_card",
        scope="invoice:9",
        payload=packed,
    )


async def wait_settled(target: str, action: str, timeout: float = 20.0) -> pb.Action:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gateway_pb2_grpc.EffectGatewayStub(channel)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            got = await stub.GetAction(pb.GetActionRequest(action_id=action))
            if got.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED) or loop.time() > end:
                return got
            await asyncio.sleep(0.1)


async def test_restart_after_a_kill_at_a_crash_point_settles_with_one_effect(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    """The failpoint's wiring in a real process on a SQLite file: the gateway kills itself after
    the provider committed, before the receipt is stored; the restarted process's reconciler
    finds the charge by read-back, with no agent calling again. Each crash point's interleaving
    (`after_planned`, `after_dispatched`, `after_provider_commit`), and a kill while the provider
    still processes the request, are the simulator's: its replicas die at those failpoints and at
    any store or provider call, and restart on the same store (docs/testing.md, "Claims the
    simulator carries")."""
    config = write_config(
        config_doc(
            f"sqlite:///{tmp_path}/eg.db",
            gateway={"lease_ttl": "1s"},
            **stripe_tools(sim.base_url, attempt_timeout="0.8s"),
        ),
        tmp_path / "effectgate.toml",
    )
    doomed = GatewayProcess(config, crash_at="after_provider_commit")
    try:
        await doomed.ready()
        async with grpc.aio.insecure_channel(doomed.target) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(charge_request("run-crash"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # the process died mid-call
        assert await doomed.wait_exit() == -signal.SIGKILL
    finally:
        doomed.kill()
    assert len(sim.ledger) == 1

    survivor = GatewayProcess(config)
    await survivor.ready()
    try:
        action = await wait_settled(survivor.target, action_id("dev", "run-crash", "pay", "charge_card", "invoice:9"))
        assert action.state == pb.EFFECT_STATE_CONFIRMED, action
        assert len(sim.ledger) == 1
        assert action.receipt.external_id == sim.ledger[0]["id"]
        assert action.attempts == 1  # confirmed by read-back, never sent again
    finally:
        assert await survivor.stop() == 0


async def test_sigterm_lets_the_action_in_flight_finish(tmp_path: Path, sim: StripeSimulator) -> None:
    sim.latency = 0.8
    config = write_config(
        config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)), tmp_path / "effectgate.toml"
    )
    gateway = GatewayProcess(config)
    await gateway.ready()
    async with grpc.aio.insecure_channel(gateway.target) as channel:
        call = asyncio.ensure_future(gateway_pb2_grpc.EffectGatewayStub(channel).Execute(charge_request("run-t")))
        await asyncio.sleep(0.3)
        gateway.proc.send_signal(signal.SIGTERM)
        answer = await call
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    assert await gateway.wait_exit() == 0
    assert len(sim.ledger) == 1
