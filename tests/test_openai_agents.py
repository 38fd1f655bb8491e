"""The OpenAI Agents SDK with no model (agents.testing.ScriptedModel): effectgate-backed function
tools through a real gateway process, effects counted at the Stripe simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, RunState, set_tracing_disabled
from agents.exceptions import UserError
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from effectgate.client import EffectGateClient
from effectgate.client.openai_agents import AgentRun, MissingAgentRun, effect_tool
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway

set_tracing_disabled(True)  # no exporter: nothing leaves the machine
ARGS: dict[str, Any] = {"customer": "cus_42", "amount_cents": 2500, "currency": "eur"}


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


@pytest.fixture
async def gate(gw: RunningGateway) -> AsyncIterator[EffectGateClient]:
    client = gw.client()
    yield client
    await client.close()


def billing_agent(gate: EffectGateClient, model: ScriptedModel, *, approval: bool = False) -> Agent[Any]:
    @effect_tool("charge_card", client=gate, needs_approval=approval)
    def charge_deposit(customer: str, amount_cents: int, currency: str) -> ChargeCard:
        """Charge the order's deposit."""
        return ChargeCard(customer=customer, amount=amount_cents, currency=currency, payment_method="pm_card_visa")

    return Agent(name="billing", model=model, tools=[charge_deposit])


def outputs(result: Any) -> list[str]:
    return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


async def test_approval_then_resume_is_one_charge(gw: RunningGateway, gate: EffectGateClient) -> None:
    model = ScriptedModel([[function_call("charge_deposit", ARGS, call_id="call_1")], [assistant_message("done")]])
    agent = billing_agent(gate, model, approval=True)
    first = await Runner.run(agent, "charge the deposit", context=AgentRun(run_id="run-oa-1", scope="order:1"))
    assert len(first.interruptions) == 1 and gw.effects() == []  # nothing before the approval
    state = first.to_state()
    state.approve(first.interruptions[0])
    resumed = await Runner.run(agent, state)
    assert resumed.final_output == "done"
    assert len(outputs(resumed)) == 1 and "CONFIRMED" in outputs(resumed)[0]
    assert len(gw.effects()) == 1


async def test_resuming_the_same_snapshot_twice_is_one_charge(gw: RunningGateway, gate: EffectGateClient) -> None:
    model = ScriptedModel([[function_call("charge_deposit", ARGS, call_id="call_1")]])
    first = await Runner.run(
        billing_agent(gate, model, approval=True), "charge", context=AgentRun(run_id="run-oa-2", scope="order:2")
    )
    # The app persists the interrupted run, with its AgentRun, and resumes it after a crash.
    snapshot = first.to_state().to_string(context_serializer=lambda ctx: ctx.to_dict())
    answers = []
    for _ in range(2):
        agent = billing_agent(gate, ScriptedModel([[assistant_message("done")]]), approval=True)
        state: RunState[Any, Any] = await RunState.from_string(agent, snapshot, context_deserializer=AgentRun.from_dict)
        state.approve(state.get_interruptions()[0])
        resumed = await Runner.run(agent, state)
        answers.extend(outputs(resumed))
    assert len(answers) == 2
    assert '"replayed": false' in answers[0] and '"replayed": true' in answers[1]
    assert len(gw.effects()) == 1
    assert len(await gw.actions()) == 1


async def test_a_replan_with_rewritten_arguments_is_one_charge_and_replayed(
    gw: RunningGateway, gate: EffectGateClient
) -> None:
    replanned = {"customer": " cus_42 ", "amount_cents": 2500, "currency": "EUR"}
    model = ScriptedModel(
        [
            [function_call("charge_deposit", ARGS, call_id="call_1")],
            [function_call("charge_deposit", replanned, call_id="call_2")],  # a new tool-call id
            [assistant_message("done")],
        ]
    )
    result = await Runner.run(
        billing_agent(gate, model), "charge", context={"effectgate": {"run_id": "run-oa-3", "scope": "order:3"}}
    )
    first, second = outputs(result)
    assert '"replayed": false' in first and '"replayed": true' in second
    assert first.split('"action_id": ')[1][:40] == second.split('"action_id": ')[1][:40]
    assert len(gw.effects()) == 1
    actions = await gw.actions()
    assert len(actions) == 1 and actions[0].context.step_id == "charge_deposit"


async def test_without_an_agent_run_the_tool_refuses(gw: RunningGateway, gate: EffectGateClient) -> None:
    model = ScriptedModel([[function_call("charge_deposit", ARGS, call_id="call_1")], [assistant_message("x")]])
    with pytest.raises(UserError, match="no effectgate run") as failed:
        await Runner.run(billing_agent(gate, model), "charge", context={"user": "someone"})
    assert isinstance(failed.value.__cause__, MissingAgentRun)
    assert gw.effects() == []
