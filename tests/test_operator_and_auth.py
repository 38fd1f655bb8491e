"""Principals, roles and tool allow-lists; the Operator service: approvals, reconciliation, bypass."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.gateway.store import open_store
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import details, effects, request

AGENT_TOKEN, OPERATOR_TOKEN, LIMITED_TOKEN = "agent-secret-1", "operator-secret-2", "limited-secret-3"


def principal(name: str, token: str, roles: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tenant": "acme",
        "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
        "roles": roles,
        **extra,
    }


PRINCIPALS = [
    principal("bot", AGENT_TOKEN, ["agent"]),
    principal("alice", OPERATOR_TOKEN, ["operator", "agent"]),
    principal("mailer", LIMITED_TOKEN, ["agent"], tools=["refund_card"]),
]


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    simulator = StripeSimulator(api_key=API_KEY, search_lag=0.2)
    await simulator.start()
    yield simulator
    await simulator.stop()


async def gateway(tmp_path: Path, sim: StripeSimulator, token: str = AGENT_TOKEN, **tool: Any) -> LiveGateway:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=PRINCIPALS, **stripe_tools(sim.base_url, **tool))
    doc["tools"]["refund_card"] = dict(doc["tools"]["charge_card"])  # the limited principal's only tool
    return await start_gateway(doc, token=token)


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_tokens_roles_and_tool_allow_list(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await gateway(tmp_path, sim)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request())
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request(), metadata=auth("wrong-token"))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request(), metadata=auth(LIMITED_TOKEN))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert details(caught.value)["ErrorInfo"].reason == "TOOL_NOT_ALLOWED"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.operator.Approve(pb.ApproveRequest(action_id="act_x"), metadata=auth(AGENT_TOKEN))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        done = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        assert done.action.tenant == "acme" and done.action.state == pb.EFFECT_STATE_CONFIRMED
        assert sim.request_count == 1
    finally:
        await live.close()


async def test_oversized_message_is_refused(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await gateway(tmp_path, sim)
    try:
        huge = tools_pb2.ChargeCard(customer="c", amount=1, currency="usd", description="x" * (2 << 20))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request(payload=huge), metadata=auth(AGENT_TOKEN))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert sim.request_count == 0
    finally:
        await live.close()


async def test_double_approval_dispatches_once(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await gateway(tmp_path, sim, approval="required")
    try:
        waiting = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        assert waiting.action.next_step == pb.NEXT_STEP_APPROVE
        assert sim.request_count == 0
        approve = pb.ApproveRequest(action_id=waiting.action.action_id, note="looks right")
        first, second = await asyncio.gather(
            live.operator.Approve(approve, metadata=auth(OPERATOR_TOKEN)),
            live.operator.Approve(approve, metadata=auth(OPERATOR_TOKEN)),
        )
        assert {first.state, second.state} <= {
            pb.EFFECT_STATE_PLANNED,
            pb.EFFECT_STATE_DISPATCHED,
            pb.EFFECT_STATE_CONFIRMED,
        }
        # The agent resumes (LangGraph re-runs the node) while the reconciler also picks it up.
        resumed = await live.stub.Execute(request(call="resume"), metadata=auth(AGENT_TOKEN))
        for _ in range(50):
            action = await live.stub.GetAction(
                pb.GetActionRequest(action_id=waiting.action.action_id), metadata=auth(AGENT_TOKEN)
            )
            if action.state == pb.EFFECT_STATE_CONFIRMED:
                break
            await asyncio.sleep(0.1)
        assert action.state == pb.EFFECT_STATE_CONFIRMED, resumed
        assert len(effects(sim)) == 1
        assert sum("approved by alice" in n for n in action.notes) == 1
    finally:
        await live.close()


async def test_unknown_is_reconciled_by_an_operator(tmp_path: Path, sim: StripeSimulator) -> None:
    # A partial effect (the intent is still processing) cannot be proven: UNKNOWN, never re-sent.
    sim.settle_seconds = 60
    sim.injector.script(["partial"])
    live = await gateway(tmp_path, sim, deadline="1s", attempt_timeout="0.5s")
    try:
        answer = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        assert answer.action.state == pb.EFFECT_STATE_UNKNOWN
        assert answer.action.reason and answer.action.HasField("next_check_at")
        again = await live.stub.Execute(request(call="again"), metadata=auth(AGENT_TOKEN))
        assert again.action.state == pb.EFFECT_STATE_UNKNOWN
        assert len(effects(sim)) == 1
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.operator.Reconcile(
                pb.ReconcileRequest(action_id=answer.action.action_id, resolution=pb.EFFECT_STATE_CONFIRMED),
                metadata=auth(OPERATOR_TOKEN),
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # a note is required
        settled = await live.operator.Reconcile(
            pb.ReconcileRequest(
                action_id=answer.action.action_id,
                resolution=pb.EFFECT_STATE_CONFIRMED,
                note="settled in the Stripe dashboard",
                external_id=effects(sim)[0]["id"],
            ),
            metadata=auth(OPERATOR_TOKEN),
        )
        assert settled.state == pb.EFFECT_STATE_CONFIRMED
        assert settled.receipt.external_id == effects(sim)[0]["id"]
        replay = await live.stub.Execute(request(call="later"), metadata=auth(AGENT_TOKEN))
        assert replay.replayed and replay.action.state == pb.EFFECT_STATE_CONFIRMED
        assert len(effects(sim)) == 1
    finally:
        await live.close()


async def test_a_reconcile_waits_out_another_replicas_lease_within_the_callers_deadline(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    """Another replica holds the UNKNOWN action's lease (a read-back, here taken on the same
    SQLite file): the operator's Reconcile waits for it; a lease kept past the caller's deadline
    is answered ABORTED/IN_FLIGHT before that deadline, never DEADLINE_EXCEEDED."""
    sim.settle_seconds = 60
    sim.injector.script(["partial"])
    live = await gateway(tmp_path, sim, deadline="1s", attempt_timeout="0.5s")
    store = open_store(f"sqlite:///{tmp_path}/eg.db")
    await store.open()
    try:
        answer = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        assert answer.action.state == pb.EFFECT_STATE_UNKNOWN
        action_id = answer.action.action_id
        settle = pb.ReconcileRequest(
            action_id=action_id, resolution=pb.EFFECT_STATE_CONFIRMED, note="seen", external_id=effects(sim)[0]["id"]
        )
        # Held for 60 s: a call with 4 s left is answered IN_FLIGHT a second before its deadline.
        held = await store.acquire_lease(action_id, "another-replica", time.time(), 60.0)
        assert held is not None
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.operator.Reconcile(settle, metadata=auth(OPERATOR_TOKEN), timeout=4.0)
        assert caught.value.code() == grpc.StatusCode.ABORTED, caught.value
        assert details(caught.value)["ErrorInfo"].reason == "IN_FLIGHT"
        # Its holder now keeps it 2 s more (the same lease, shortened): the next call waits, then settles.
        assert await store.update(held.evolve(lease_expires_at=time.time() + 2.0))
        settled = await live.operator.Reconcile(settle, metadata=auth(OPERATOR_TOKEN), timeout=30.0)
        assert settled.state == pb.EFFECT_STATE_CONFIRMED
        assert len(effects(sim)) == 1
    finally:
        await store.close()
        await live.close()


async def test_bypass_needs_an_operator_grant(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await gateway(tmp_path, sim, bypass="operator")
    try:
        first = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        bypass = request(call="b")
        bypass.bypass = True
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(bypass, metadata=auth(AGENT_TOKEN))
        assert details(caught.value)["ErrorInfo"].reason == "BYPASS_NOT_GRANTED"
        assert len(effects(sim)) == 1
        granted = await live.operator.GrantBypass(
            pb.GrantBypassRequest(action_id=first.action.action_id, note="customer asked for a second charge"),
            metadata=auth(OPERATOR_TOKEN),
        )
        assert any("bypass granted by alice" in n for n in granted.notes)
        second = await live.stub.Execute(bypass, metadata=auth(AGENT_TOKEN))
        assert second.action.generation == 1 and second.action.state == pb.EFFECT_STATE_CONFIRMED
        assert second.action.provider_key != first.action.provider_key
        assert len(effects(sim)) == 2
        # The grant is used up: the next bypass attempt is refused again.
        with pytest.raises(grpc.aio.AioRpcError):
            await live.stub.Execute(bypass, metadata=auth(AGENT_TOKEN))
        assert len(effects(sim)) == 2
    finally:
        await live.close()


async def test_operator_commands(tmp_path: Path, sim: StripeSimulator) -> None:
    """`effectgate actions|show|approve|reconcile` against a live gateway, as an operator runs them."""
    live = await gateway(tmp_path, sim, approval="required")
    env = {**os.environ, "EFFECTGATE_TOKEN": OPERATOR_TOKEN}

    async def cli(*args: str) -> str:
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway", *args, "--target", live.target,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, err = await asyncio.wait_for(done.communicate(), 60)
        assert done.returncode == 0, err.decode()
        return out.decode()

    try:
        waiting = await live.stub.Execute(request(), metadata=auth(AGENT_TOKEN))
        action_id = waiting.action.action_id
        listed = await cli("actions", "--state", "AWAITING_APPROVAL")
        assert action_id in listed and "AWAITING_APPROVAL" in listed
        await cli("approve", action_id, "--note", "checked the order")
        for _ in range(50):
            shown = await cli("show", action_id)
            if "CONFIRMED" in shown:
                break
            await asyncio.sleep(0.1)
        assert "CONFIRMED" in shown and effects(sim)[0]["id"] in shown
        env["EFFECTGATE_TOKEN"] = AGENT_TOKEN  # an agent may not approve
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway", "approve", action_id, "--note", "x",
            "--target", live.target, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        _, err = await asyncio.wait_for(done.communicate(), 60)
        assert done.returncode == 1 and "PERMISSION_DENIED" in err.decode()
    finally:
        await live.close()
