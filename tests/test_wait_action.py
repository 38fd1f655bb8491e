"""WaitAction: an agent waits for a person's decision on the gateway instead of polling Execute.

Real gateways on a grpc.aio server (port 0), the Stripe simulator on loopback, the typed Python
client. Across replicas: two gateways on one PostgreSQL database, the wait on one, the decision
on the other. A cancelled wait leaves no waiter, no feed task and no story entry behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from effectgate.client import EffectGateClient, SyncEffectGateClient
from effectgate.client.errors import InvalidRequest, NotFound
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_decisions import PRINCIPALS, TOKENS, auth
from tests.test_execute import effects, request


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    simulator = StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c")
    await simulator.start()
    yield simulator
    await simulator.stop()


def _doc(store: str, sim: StripeSimulator) -> dict[str, object]:
    return config_doc(store, principals=PRINCIPALS, **stripe_tools(sim.base_url, approval="required"))


@asynccontextmanager
async def gateways(store: str, sim: StripeSimulator, count: int = 1) -> AsyncIterator[list[LiveGateway]]:
    live = [await start_gateway(_doc(store, sim)) for _ in range(count)]
    try:
        yield live
    finally:
        for gw in live:
            await gw.close()


def client(gw: LiveGateway, who: str) -> EffectGateClient:
    return EffectGateClient(gw.target, token=TOKENS[who])


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        done = check()
        if done if isinstance(done, bool) else await done:
            return
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


def wait_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("waits:")]


async def test_a_wait_on_one_replica_ends_at_a_decision_made_on_another(sim: StripeSimulator, pg_dsn: str) -> None:
    async with gateways(pg_dsn, sim, 2) as (a, b):
        bot, alice = client(a, "bot"), client(b, "alice")
        waiting = await a.stub.Execute(request(), metadata=auth("bot"))
        action_id = waiting.action.action_id
        assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        wait = asyncio.create_task(bot.wait(action_id, until="settled", timeout=60))
        await until(lambda: a.gateway.waits is not None and a.gateway.waits.active == 1)
        loop = asyncio.get_running_loop()
        decided = loop.time()
        await alice.approve(action_id, note="ok")
        answer = await asyncio.wait_for(wait, 20)
        took = loop.time() - decided
        assert answer.reached and answer.action.state == pb.EFFECT_STATE_CONFIRMED
        print(f"wait answered {took:.3f} s after the approval on the other replica")
        assert took < 5.0  # the feed polls every 0.25 s: generous on a loaded machine
        assert a.gateway.waits is not None and (a.gateway.waits.active, a.gateway.waits.feeds) == (0, 0)
        assert len(effects(sim)) == 1
        await bot.close()
        await alice.close()


async def test_a_cancelled_wait_leaves_nothing_behind(sim: StripeSimulator, tmp_path: Path) -> None:
    async with gateways(f"sqlite:///{tmp_path}/eg.db", sim) as (gw,):
        bot = client(gw, "bot")
        action_id = (await gw.stub.Execute(request(), metadata=auth("bot"))).action.action_id
        story = await gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("alice"))
        waits = gw.gateway.waits
        assert waits is not None
        calls = [asyncio.create_task(bot.wait(action_id, timeout=120)) for _ in range(5)]
        await until(lambda: waits.active == 5)
        assert waits.feeds == 1 and len(wait_tasks()) == 1  # five waits of one tenant, one feed
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await until(lambda: waits.active == 0 and waits.feeds == 0 and not wait_tasks())
        after = await gw.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), metadata=auth("alice"))
        assert after == story  # a wait writes nothing
        # The gateway still serves waits after the cancellations, and a decision ends them.
        again = asyncio.create_task(bot.wait(action_id, timeout=60))
        await until(lambda: waits.active == 1)
        await gw.operator.Deny(pb.DenyRequest(action_id=action_id, note="no"), metadata=auth("alice"))
        answer = await asyncio.wait_for(again, 20)
        assert answer.reached and answer.action.state == pb.EFFECT_STATE_REJECTED
        assert answer.action.reason == "denied by alice: no"
        await until(lambda: waits.active == 0 and not wait_tasks())
        await bot.close()


async def test_a_wait_is_bounded_by_its_timeout_and_the_call_deadline(sim: StripeSimulator, tmp_path: Path) -> None:
    async with gateways(f"sqlite:///{tmp_path}/eg.db", sim) as (gw,):
        action_id = (await gw.stub.Execute(request(), metadata=auth("bot"))).action.action_id
        bot = client(gw, "bot")
        idle = await bot.wait(action_id, timeout=0.3)
        assert not idle.reached and idle.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        # A call deadline shorter than the wait: an answer just before it, never DEADLINE_EXCEEDED.
        asked = pb.WaitActionRequest(action_id=action_id, timeout=duration_pb2.Duration(seconds=120))
        short = await gw.stub.WaitAction(asked, metadata=auth("bot"), timeout=1.0)
        assert not short.reached
        # Already decided (or already settled): the answer comes at once.
        await gw.operator.Deny(pb.DenyRequest(action_id=action_id, note="no"), metadata=auth("alice"))
        for until_ in ("decided", "settled"):
            done = await bot.wait(action_id, until=until_, timeout=120)
            assert done.reached and done.action.state == pb.EFFECT_STATE_REJECTED
        assert gw.gateway.waits is not None and gw.gateway.waits.active == 0
        await bot.close()


async def test_wait_refuses_bad_requests_and_other_tenants_actions(sim: StripeSimulator, tmp_path: Path) -> None:
    async with gateways(f"sqlite:///{tmp_path}/eg.db", sim) as (gw,):
        action_id = (await gw.stub.Execute(request(), metadata=auth("bot"))).action.action_id
        with pytest.raises(NotFound):  # another tenant's action is not found, whatever the role
            await client(gw, "mallory").wait(action_id, timeout=5)
        for bad in (
            pb.WaitActionRequest(action_id=""),
            pb.WaitActionRequest(action_id=action_id, until=7),  # type: ignore[arg-type]
            pb.WaitActionRequest(action_id=action_id, timeout=duration_pb2.Duration(seconds=-1)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.WaitAction(bad, metadata=auth("bot"), timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.WaitAction(pb.WaitActionRequest(action_id=action_id), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(ValueError):
            await client(gw, "bot").wait(action_id, until="forever")
        with pytest.raises(InvalidRequest):
            await client(gw, "bot").wait("act_" + "x" * 5000, timeout=1)


async def test_stopping_the_gateway_answers_its_waits_at_once(sim: StripeSimulator, tmp_path: Path) -> None:
    gw = await start_gateway(_doc(f"sqlite:///{tmp_path}/eg.db", sim))
    try:
        action_id = (await gw.stub.Execute(request(), metadata=auth("bot"))).action.action_id
        bot = client(gw, "bot")
        wait = asyncio.create_task(bot.wait(action_id, timeout=120))
        await until(lambda: gw.gateway.waits is not None and gw.gateway.waits.active == 1)
        await gw.gateway.stop()
        answer = await asyncio.wait_for(wait, 20)
        assert not answer.reached and answer.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        await bot.close()
    finally:
        await gw.client.close()


async def test_the_blocking_client_waits_too(sim: StripeSimulator, tmp_path: Path) -> None:
    async with gateways(f"sqlite:///{tmp_path}/eg.db", sim) as (gw,):
        action_id = (await gw.stub.Execute(request(), metadata=auth("bot"))).action.action_id

        def agent() -> pb.WaitActionResponse:
            with SyncEffectGateClient(gw.target, token=TOKENS["bot"]) as sync:
                return sync.wait(action_id, timeout=60)

        answer = asyncio.create_task(asyncio.to_thread(agent))  # the gateway serves on this loop meanwhile
        waits = gw.gateway.waits
        assert waits is not None
        await until(lambda: waits.active == 1)
        await gw.operator.Approve(pb.ApproveRequest(action_id=action_id, note="ok"), metadata=auth("alice"))
        done = await asyncio.wait_for(answer, 20)
        assert done.reached and done.action.state != pb.EFFECT_STATE_AWAITING_APPROVAL
