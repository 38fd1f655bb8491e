"""Pydantic AI with a scripted model (FunctionModel, no network) against a real gateway process:
re-plans, ModelRetry and a re-run of the whole run are one charge at the Stripe simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from effectgate.client import EffectGateClient
from effectgate.client.pydantic_ai import EffectRun, NoStableRun, effect, effect_context
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway
from tests.harness import API_KEY

Script = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim, dev_mode=True) as running:
        yield running


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


def turns(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelResponse) for m in messages)


def billing_agent(script: Script, *, retries: int = 1) -> Agent[EffectRun, str]:
    agent = Agent(FunctionModel(script), deps_type=EffectRun, retries=retries)

    @agent.tool
    async def charge_deposit(ctx: RunContext[EffectRun], customer: str, amount_cents: int, currency: str) -> str:
        """Charge the order's deposit."""
        card = ChargeCard(customer=customer, amount=amount_cents, currency=currency, payment_method="pm_card_visa")
        return await effect(ctx, "charge_card", card)

    return agent


def call(call_id: str, **args: Any) -> ModelResponse:
    arguments = {"customer": "cus_42", "amount_cents": 1000, "currency": "usd", **args}
    return ModelResponse(parts=[ToolCallPart("charge_deposit", arguments, tool_call_id=call_id)])


async def test_a_replanned_call_is_one_effect(gw: RunningGateway) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if turns(messages) == 0:
            return call("call_1")
        if turns(messages) == 1:  # the model re-plans: a new call id, paraphrased arguments
            return call("call_2", customer=" cus_42", currency="USD")
        return ModelResponse(parts=[TextPart("\n".join(str(r.content) for r in returns(messages)))])

    gate = EffectGateClient(gw.target)
    try:
        result = await billing_agent(script).run("charge", deps=EffectRun(gate, scope="order:1093"), run_id="run-pa-1")
    finally:
        await gate.close()
    first, second = result.output.splitlines()
    assert '"replayed": false' in first and '"replayed": true' in second and "Done." in second
    assert len(gw.effects()) == 1
    (action,) = await gw.actions("")
    assert action.context.run_id == "run-pa-1" and action.context.step_id == "charge_deposit"


async def test_a_run_retried_with_its_run_id_is_one_effect(gw: RunningGateway) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not returns(messages):
            return call(f"call_{len(messages)}")
        return ModelResponse(parts=[TextPart(str(returns(messages)[-1].content))])

    gate = EffectGateClient(gw.target)
    try:
        deps = EffectRun(gate, scope="order:1094")
        outputs = [(await billing_agent(script).run("charge", deps=deps, run_id="run-pa-2")).output for _ in range(2)]
    finally:
        await gate.close()
    assert '"replayed": false' in outputs[0] and '"replayed": true' in outputs[1]
    assert len(gw.effects()) == 1


async def test_a_model_retry_after_a_timeout_lands_on_the_same_action(tmp_path: Path) -> None:
    # The provider takes 2 s, the client waits 0.5 s: the tool raises ModelRetry, the model calls
    # again (new call id, next run step, retry count up) until the stored outcome comes back.
    sim = StripeSimulator(api_key=API_KEY, search_lag=0.3, latency=2.0)
    await sim.start()
    seen: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = [r for r in returns(messages) if "Done." in str(r.content)]
        if done:
            return ModelResponse(parts=[TextPart(str(done[0].content))])
        seen.append(f"call_{turns(messages)}")
        return call(seen[-1])

    try:
        slow: dict[str, Any] = {"attempt_timeout": "5s", "gateway": {"lease_ttl": "8s"}}
        async with running_gateway(tmp_path, sim, dev_mode=True, **slow) as gw:
            gate = EffectGateClient(gw.target, timeout=0.5)
            try:
                result = await billing_agent(script, retries=30).run(
                    "charge", deps=EffectRun(gate, scope="order:1095"), run_id="run-pa-3"
                )
            finally:
                await gate.close()
            assert len(seen) >= 2, seen  # at least one ModelRetry happened
            assert "CONFIRMED" in result.output
            assert len(gw.effects()) == 1
            assert len(await gw.actions("")) == 1
    finally:
        await sim.stop()


async def test_without_a_run_id_the_run_is_pydantic_ais_and_the_step_is_never_the_call_id() -> None:
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])), deps_type=EffectRun)
    ctx = RunContext(deps=EffectRun(step="charge-deposit"), model=agent.model, usage=None, run_id="r-1")  # type: ignore[arg-type]
    ctx.tool_call_id, ctx.run_step, ctx.retry = "call_9", 7, 3
    made = effect_context(ctx)
    assert (made.run_id, made.step_id) == ("r-1", "charge-deposit")
    ctx.run_id = None
    with pytest.raises(NoStableRun):
        effect_context(ctx)
