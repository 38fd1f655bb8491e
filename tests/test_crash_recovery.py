"""kill -9 of a real `effectgate serve` process at each crash point, then a restart: the
reconciler settles every action with no agent calling again, and the provider saw one effect."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2

from effectgate.gateway.core import failpoints
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


async def die_at(point: str, target: str) -> None:
    """Drives one action to `point`, where the process kills itself mid-call.

    A new action is claimed already DISPATCHED (nothing sent yet: `after_dispatched`), so the
    PLANNED recovery point is reached through an approval: the Approve that records PLANNED dies."""
    async with grpc.aio.insecure_channel(target) as channel:
        agent = gateway_pb2_grpc.EffectGatewayStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            if point == "after_planned":
                waiting = await agent.Execute(charge_request("run-crash"), timeout=10)
                assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
                approve = pb.ApproveRequest(action_id=waiting.action.action_id, note="ok")
                await gateway_pb2_grpc.OperatorStub(channel).Approve(approve, timeout=10)
            else:
                await agent.Execute(charge_request("run-crash"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # the process died mid-call


@pytest.mark.parametrize("point", failpoints.POINTS)
async def test_restart_after_kill_at_each_crash_point(tmp_path: Path, sim: StripeSimulator, point: str) -> None:
    approval = {"approval": "required"} if point == "after_planned" else {}
    config = write_config(
        config_doc(
            f"sqlite:///{tmp_path}/eg.db",
            gateway={"lease_ttl": "1s"},
            **stripe_tools(sim.base_url, attempt_timeout="0.8s", **approval),
        ),
        tmp_path / "effectgate.toml",
    )
    doomed = GatewayProcess(config, crash_at=point)
    try:
        await doomed.ready()
        await die_at(point, doomed.target)
        assert await doomed.wait_exit() == -signal.SIGKILL
    finally:
        doomed.kill()
    expected_before = 1 if point == "after_provider_commit" else 0
    assert len(sim.ledger) == expected_before

    survivor = GatewayProcess(config)
    await survivor.ready()
    try:
        action = await wait_settled(survivor.target, action_id("dev", "run-crash", "pay", "charge_card", "invoice:9"))
        assert action.state == pb.EFFECT_STATE_CONFIRMED, action
        assert len(sim.ledger) == 1
        assert action.receipt.external_id == sim.ledger[0]["id"]
        # Recovery from a claim that was never sent is a verification before attempt 2.
        assert action.attempts == (2 if point == "after_dispatched" else 1)
    finally:
        assert await survivor.stop() == 0


async def test_kill_while_provider_is_processing(tmp_path: Path, sim: StripeSimulator) -> None:
    """SIGKILL from outside while the request is at the provider, which commits afterwards."""
    sim.latency = 1.0
    config = write_config(
        config_doc(f"sqlite:///{tmp_path}/eg.db", gateway={"lease_ttl": "2.5s"}, **stripe_tools(sim.base_url)),
        tmp_path / "effectgate.toml",
    )
    doomed = GatewayProcess(config)
    await doomed.ready()
    channel = grpc.aio.insecure_channel(doomed.target)
    call = asyncio.ensure_future(
        gateway_pb2_grpc.EffectGatewayStub(channel).Execute(charge_request("run-k"), timeout=10)
    )
    await asyncio.sleep(0.5)
    doomed.kill()
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    await channel.close(grace=None)
    await asyncio.sleep(0.8)  # the provider finishes the orphaned request
    sim.latency = 0.0
    survivor = GatewayProcess(config)
    await survivor.ready()
    try:
        action = await wait_settled(survivor.target, action_id("dev", "run-k", "pay", "charge_card", "invoice:9"))
        assert action.state == pb.EFFECT_STATE_CONFIRMED
        assert len(sim.ledger) == 1
    finally:
        await survivor.stop()


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
