"""Refusals with Retry-After through a real gateway (grpc.aio on port 0, generated client), with
the kit's scripted adapter in real time standing in for a provider that rate-limits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from effectgate.adapters.base import RateLimited
from effectgate.gateway.config.schema import Config
from effectgate.gateway.runtime import server
from effectgate.testing import ScriptedAdapter
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.faults import FaultPlan
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import details, request


@pytest.fixture
async def limited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[LiveGateway, ScriptedAdapter]]:
    adapter = ScriptedAdapter(time.time, dedups_on_key=True)

    def build_adapters(config: Config) -> dict[str, ScriptedAdapter]:
        return {"scripted": adapter}

    monkeypatch.setattr(server, "build_adapters", build_adapters)
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        adapters={"scripted": {}},
        tools={"charge_card": {"adapter": "scripted", "deadline": "10s", "attempt_timeout": "2s"}},
        gateway={"lease_ttl": "5s"},
    )
    live = await start_gateway(doc)
    yield live, adapter
    await live.close()


async def test_retry_after_twice_then_confirmed_with_one_effect(limited: tuple[LiveGateway, ScriptedAdapter]) -> None:
    live, adapter = limited
    adapter.script_execute(RateLimited("429", retry_after=2.0), RateLimited("429", retry_after=2.0))
    answer = await live.stub.Execute(request(), timeout=30)
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED and answer.action.attempts == 3
    sent = adapter.executed_at
    assert len(sent) == 3 and sent[1] - sent[0] >= 2.0 and sent[2] - sent[1] >= 2.0
    assert len(adapter.effects) == 1


async def test_retry_after_past_the_deadline_is_unavailable_and_the_next_execute_sends(
    limited: tuple[LiveGateway, ScriptedAdapter],
) -> None:
    live, adapter = limited
    adapter.script_execute(RateLimited("503", retry_after=2.0))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await live.stub.Execute(request(), timeout=1.5)  # the pause does not fit
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    found = details(caught.value)
    assert found["ErrorInfo"].reason == "PROVIDER_RATE_LIMITED"
    assert found["RetryInfo"].retry_delay.seconds == 2
    assert len(adapter.executed) == 1 and adapter.effects == []
    action_id = found["ErrorInfo"].metadata["action_id"]
    stored = await live.stub.GetAction(pb.GetActionRequest(action_id=action_id))
    assert stored.state == pb.EFFECT_STATE_NOT_FOUND
    # The next Execute sends it, but not before the provider's pause has passed.
    again = await live.stub.Execute(request(call="again"), timeout=30)
    assert again.action.state == pb.EFFECT_STATE_CONFIRMED and not again.replayed
    assert len(adapter.executed) == 2 and len(adapter.effects) == 1
    assert adapter.executed_at[1] - adapter.executed_at[0] >= 2.0


async def test_retry_after_from_the_stripe_simulator_is_honoured(tmp_path: Path, sim: StripeSimulator) -> None:
    """The real provider side: the simulator answers 429 with `Retry-After: 2` twice, the Stripe
    adapter classifies it, the driver waits it out: 3 requests over at least 4 s, one charge."""
    sim.injector.configure(FaultPlan(retry_after=2))
    sim.injector.script(["rate_limit", "rate_limit"])
    live = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, deadline="20s")))
    try:
        started = time.monotonic()
        answer = await live.stub.Execute(request(), timeout=30)
        elapsed = time.monotonic() - started
    finally:
        await live.close()
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED and answer.action.attempts == 3
    assert sim.request_count == 3 and len(sim.ledger) == 1
    assert elapsed >= 4.0  # two pauses of the provider's 2 s, never an immediate burst
