"""Limits through a real gateway (grpc.aio on port 0, SQLite file) and the Stripe simulator on
loopback: budgets and rate limits counted once, payload bounds, approval rules, one effect per
scope, circuit breakers (docs/limits.md). Effects and sums are counted at the simulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2

from effectgate.gateway.config import ConfigError
from effectgate.gateway.model import keys
from effectgate.gateway.runtime.commands.check import validate
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import details, refused
from tests.test_replicas import CountingStripe

Start = Callable[..., Awaitable[LiveGateway]]


def charge(
    run: str, amount: int = 1000, *, step: str = "pay", scope: str = "", method: str = "pm_card_visa", call: str = ""
) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(
        tools_pb2.ChargeCard(customer="cus_1", amount=amount, currency="eur", payment_method=method, description="x")
    )
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id=step),
        tool="charge_card",
        scope=scope or f"order:{run}",
        payload=packed,
        tool_call_id=call,
    )


def charged(sim: CountingStripe) -> int:
    """What the provider's ledger holds: the sum of succeeded charges."""
    return sum(int(e["params"]["amount"]) for e in sim.ledger if e["kind"] == "payment_intent")


@pytest.fixture
async def sim() -> AsyncIterator[CountingStripe]:
    from tests.harness import API_KEY

    simulator = CountingStripe(api_key=API_KEY)
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture
async def start(tmp_path: Path, sim: CountingStripe) -> AsyncIterator[Start]:
    started: list[LiveGateway] = []

    async def go(limits: dict[str, Any], **tool: Any) -> LiveGateway:
        doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, limits=limits, **tool))
        live = await start_gateway(doc)
        started.append(live)
        return live

    yield go
    for live in started:
        await live.close()


async def test_budget_counts_each_effect_once(start: Start, sim: CountingStripe) -> None:
    live = await start({"budget": {"EUR": 10000}, "window": "1h"})
    answers = await asyncio.gather(
        *(live.stub.Execute(charge(f"r{i}"), timeout=20) for i in range(15)), return_exceptions=True
    )
    confirmed = [a for a in answers if isinstance(a, pb.ExecuteResponse)]
    turned_away = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
    assert len(confirmed) == 10 and all(a.action.state == pb.EFFECT_STATE_CONFIRMED for a in confirmed)
    assert len(turned_away) == 5
    for error in turned_away:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info = details(error)["ErrorInfo"]
        assert info.reason == "BUDGET_EXCEEDED"
        assert dict(info.metadata) | {"window_resets_at": "", "action_id": ""} == {
            "action_id": "",
            "tool": "charge_card",
            "limit": "budget",
            "currency": "eur",
            "budget": "10000",
            "spent": "10000",
            "left": "0",
            "amount": "1000",
            "effects": "10",
            "window_resets_at": "",
        }
    # Each refusal names the action it would have been (what an operator's grant names).
    would_be = {keys.action_id("dev", f"r{i}", "pay", "charge_card", f"order:r{i}") for i in range(15)}
    assert {details(e)["ErrorInfo"].metadata["action_id"] for e in turned_away} == would_be - {
        a.action.action_id for a in confirmed
    }
    assert charged(sim) == 10000
    # A refused charge stored nothing: the same call later is a new claim, refused again.
    refused_run = next(f"r{i}" for i, a in enumerate(answers) if isinstance(a, grpc.aio.AioRpcError))
    code, _ = await refused(live.stub.Execute(charge(refused_run), timeout=20))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_replays_retries_and_replans_never_consume_budget(start: Start, sim: CountingStripe) -> None:
    live = await start({"budget": {"eur": 2000}})
    first = await live.stub.Execute(charge("r1", call="plan-1"), timeout=20)
    assert first.action.state == pb.EFFECT_STATE_CONFIRMED
    for attempt in range(5):  # a retry, a re-plan (another tool-call id), a resume: one action
        again = await live.stub.Execute(charge("r1", call=f"plan-{attempt + 2}"), timeout=20)
        assert again.replayed and again.action.action_id == first.action.action_id
    second = await live.stub.Execute(charge("r2"), timeout=20)  # the 1000 left are still there
    assert second.action.state == pb.EFFECT_STATE_CONFIRMED
    code, found = await refused(live.stub.Execute(charge("r3"), timeout=20))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and found["ErrorInfo"].metadata["left"] == "0"
    assert charged(sim) == 2000 and len(sim.creates) == 2


async def test_a_rejected_charge_gives_its_reservation_back(start: Start, sim: CountingStripe) -> None:
    live = await start({"budget": {"eur": 1000}})
    declined = await live.stub.Execute(charge("r1", method="pm_card_chargeDeclined"), timeout=20)
    assert declined.action.state == pb.EFFECT_STATE_REJECTED
    ok = await live.stub.Execute(charge("r2"), timeout=20)
    assert ok.action.state == pb.EFFECT_STATE_CONFIRMED
    assert charged(sim) == 1000


async def test_rate_limit_is_resource_exhausted_with_retry_info(start: Start) -> None:
    live = await start({"max_effects": 2, "window": "1h"})
    for run in ("r1", "r2"):
        assert (await live.stub.Execute(charge(run), timeout=20)).action.state == pb.EFFECT_STATE_CONFIRMED
    code, found = await refused(live.stub.Execute(charge("r3"), timeout=20))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert found["ErrorInfo"].reason == "RATE_LIMITED"
    assert found["ErrorInfo"].metadata["max_effects"] == "2" and found["ErrorInfo"].metadata["effects"] == "2"
    assert 0 < found["RetryInfo"].retry_delay.seconds <= 3600


async def test_per_run_caps(start: Start, sim: CountingStripe) -> None:
    live = await start({"run_max_effects": 2, "run_budget": {"eur": 5000}})
    for step in ("a", "b"):
        await live.stub.Execute(charge("run-1", step=step, scope=f"o:{step}"), timeout=20)
    code, found = await refused(live.stub.Execute(charge("run-1", step="c", scope="o:c"), timeout=20))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and found["ErrorInfo"].metadata["limit"] == "run_max_effects"
    assert (await live.stub.Execute(charge("run-2"), timeout=20)).action.state == pb.EFFECT_STATE_CONFIRMED
    assert charged(sim) == 3000


async def test_payload_bounds_are_invalid_argument(start: Start, sim: CountingStripe) -> None:
    live = await start({"max_amount": 50000, "scope": "required", "no_bidi": ["description"]})
    request = charge("r1", amount=2**63 - 1)
    code, found = await refused(live.stub.Execute(request, timeout=20))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    (violation,) = found["BadRequest"].field_violations
    assert violation.field == "payload.amount" and "out of bounds" in violation.description
    unscoped = charge("r2")
    unscoped.scope = ""
    code, found = await refused(live.stub.Execute(unscoped, timeout=20))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and found["BadRequest"].field_violations[0].field == "scope"
    bidi = charge("r3")
    payload = tools_pb2.ChargeCard(customer="c", amount=100, currency="eur", payment_method="pm_card_visa")
    payload.description = "refund \u202egnp.exe"
    bidi.payload.Pack(payload)
    code, found = await refused(live.stub.Execute(bidi, timeout=20))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert found["BadRequest"].field_violations[0].field == "payload.description"
    assert sim.ledger == []


async def test_approval_rule_holds_the_large_charge(start: Start, sim: CountingStripe) -> None:
    live = await start({"require_approval_when": ["amount > 5000"]})
    held = await live.stub.Execute(charge("r1", amount=6000), timeout=20)
    passed = await live.stub.Execute(charge("r2", amount=4000), timeout=20)
    assert held.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
    assert passed.action.state == pb.EFFECT_STATE_CONFIRMED
    assert charged(sim) == 4000


async def test_approval_rule_on_budget_left(start: Start, sim: CountingStripe) -> None:
    live = await start({"budget": {"eur": 10000}, "require_approval_when": ["budget_left - amount < 5000"]})
    first = await live.stub.Execute(charge("r1", amount=4000), timeout=20)
    second = await live.stub.Execute(charge("r2", amount=2000), timeout=20)
    assert first.action.state == pb.EFFECT_STATE_CONFIRMED
    assert second.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("amount >", "does not compile"),
        ("amout > 5", "names 'amout', not a variable"),
        ("payload.amout > 5", "names payload.amout, not a field of the payload"),
    ],
)
async def test_check_refuses_a_bad_rule_with_one_line(tmp_path: Path, sim: CountingStripe, rule: str, why: str) -> None:
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, limits={"require_approval_when": [rule]})
    )
    from effectgate.gateway.config import parse_config

    with pytest.raises(ConfigError) as caught:
        await validate(parse_config(doc))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("effectgate.toml: [tools.charge_card.limits] require_approval_when: ")
    assert why in message


async def test_one_effect_per_scope_coalesces_subagents(start: Start, sim: CountingStripe) -> None:
    live = await start({"unique": "scope"})
    a, b = await asyncio.gather(
        live.stub.Execute(charge("run-a", step="pay-by-agent-1", scope="order:1093"), timeout=20),
        live.stub.Execute(charge("run-a", step="pay-by-agent-2", scope="order:1093"), timeout=20),
    )
    assert a.action.action_id == b.action.action_id
    assert a.action.state == b.action.state == pb.EFFECT_STATE_CONFIRMED
    assert sorted([a.replayed, b.replayed]) == [False, True]
    assert len(sim.ledger) == 1 and sum(sim.creates.values()) == 1


async def test_one_effect_per_scope_refuses_another_step(start: Start, sim: CountingStripe) -> None:
    live = await start({"unique": "scope", "on_unique": "refuse"})
    first = await live.stub.Execute(charge("run-a", step="agent-1", scope="order:7"), timeout=20)
    again = await live.stub.Execute(charge("run-a", step="agent-1", scope="order:7"), timeout=20)
    assert again.replayed and again.action.action_id == first.action.action_id  # the same action: a replay
    code, found = await refused(live.stub.Execute(charge("run-b", step="agent-2", scope="order:7"), timeout=20))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    assert found["ErrorInfo"].reason == "SCOPE_TAKEN"
    assert found["ErrorInfo"].metadata["action_id"] == first.action.action_id
    assert len(sim.ledger) == 1


async def test_breaker_opens_after_failures_and_closes_after_the_cooldown(start: Start, sim: CountingStripe) -> None:
    live = await start({}, breaker={"failures": 3, "window": "30s", "cooldown": "1s"}, max_attempts=1)
    sim.injector.script(["error_after_commit"] * 3)
    for i in range(3):  # 500 after the commit: the charge happened, the read-back confirms it
        answer = await live.stub.Execute(charge(f"f{i}"), timeout=20)
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    code, found = await refused(live.stub.Execute(charge("f3"), timeout=20))
    assert code == grpc.StatusCode.UNAVAILABLE and found["ErrorInfo"].reason == "CIRCUIT_OPEN"
    assert "RetryInfo" in found
    # Replays go on while it is open.
    assert (await live.stub.Execute(charge("f0"), timeout=20)).replayed
    deadline = asyncio.get_running_loop().time() + 10
    while True:  # after the cool-down one probe goes through, and its answer closes the breaker
        try:
            probe = await live.stub.Execute(charge("f3"), timeout=20)
            break
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
            assert asyncio.get_running_loop().time() < deadline, "the breaker never let a probe through"
            await asyncio.sleep(0.1)
    assert probe.action.state == pb.EFFECT_STATE_CONFIRMED
    assert (await live.stub.Execute(charge("f4"), timeout=20)).action.state == pb.EFFECT_STATE_CONFIRMED
    assert sorted(sim.creates.values()) == [1] * 5  # never a duplicate


async def test_clients_and_the_mcp_front_door_read_the_denial(start: Start) -> None:
    from effectgate.client import BudgetExceeded, RateLimited
    from effectgate.client.errors import from_rpc_error
    from effectgate.mcp.gateway_port import _refusal
    from effectgate.mcp.results import refusal_result

    live = await start({"budget": {"eur": 1500}, "max_effects": 1})
    await live.stub.Execute(charge("r1"), timeout=20)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await live.stub.Execute(charge("r2", amount=100), timeout=20)
    typed = from_rpc_error(caught.value)
    assert isinstance(typed, RateLimited) and typed.retry_after is not None and typed.limit == "max_effects"
    text = refusal_result(_refusal(caught.value)).content[0].text  # type: ignore[union-attr]
    assert text.startswith("RATE_LIMITED: this tool's limit of 1 effects per window is used up; nothing was sent.")

    budget_only = await start({"budget": {"eur": 1500}})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await budget_only.stub.Execute(charge("r3", amount=1000), timeout=20)
    typed = from_rpc_error(caught.value)
    assert isinstance(typed, BudgetExceeded) and typed.left == 500 and typed.metadata["currency"] == "eur"
    result = refusal_result(_refusal(caught.value))
    assert result.is_error
    assert "Left: 500 eur, the budget resets at " in result.content[0].text  # type: ignore[union-attr]
