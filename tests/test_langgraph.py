"""LangGraph with no model: StateGraph + InMemorySaver, nodes that charge through a real gateway
process, effects counted at the Stripe simulator. Each re-run of a node is the same action."""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, RetryPolicy, Send, interrupt

from effectgate.client import EffectGateClient
from effectgate.client.langgraph import NoStableRunContext, effect_context, execute_in_node
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway


class State(TypedDict, total=False):
    order: str
    actions: Annotated[list[str], operator.add]
    steps: Annotated[list[str], operator.add]


@dataclass
class AppContext:
    effectgate: EffectGateClient


def deposit(order: str) -> ChargeCard:
    return ChargeCard(customer="cus_42", amount=2500, currency="eur", payment_method="pm_card_visa", description=order)


async def charge(state: State) -> dict[str, Any]:
    answer = await execute_in_node("charge_card", deposit(state["order"]), scope=f"order:{state['order']}")
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED, answer
    return {"actions": [answer.action.action_id], "steps": [effect_context().step_id]}


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


@pytest.fixture
async def ctx(gw: RunningGateway) -> AsyncIterator[AppContext]:
    client = gw.client()
    yield AppContext(effectgate=client)
    await client.close()


def single(node: Any, **kwargs: Any) -> StateGraph[State, AppContext]:
    builder: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    builder.add_node("charge", node, **kwargs)
    builder.add_edge(START, "charge")
    builder.add_edge("charge", END)
    return builder


async def test_charge_then_interrupt_for_approval_is_one_charge_across_resume(
    gw: RunningGateway, ctx: AppContext
) -> None:
    seen: list[pb.ExecuteResponse] = []

    async def charge_then_ask(state: State) -> dict[str, Any]:
        answer = await execute_in_node("charge_card", deposit(state["order"]), scope=f"order:{state['order']}")
        seen.append(answer)
        approved = interrupt({"charged": answer.action.action_id})  # the node re-runs from its top
        return {"actions": [answer.action.action_id], "steps": [str(approved)]}

    graph = single(charge_then_ask).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "thread-approval"}}
    paused = await graph.ainvoke({"order": "o-1"}, config, context=ctx)
    assert "__interrupt__" in paused
    done = await graph.ainvoke(Command(resume="approved"), config, context=ctx)
    assert done["steps"] == ["approved"]
    assert [s.replayed for s in seen] == [False, True]
    assert seen[0].action.action_id == seen[1].action.action_id
    assert len(gw.effects()) == 1


async def test_crash_after_the_charge_then_resume_on_a_fresh_graph_is_one_charge(
    gw: RunningGateway, ctx: AppContext
) -> None:
    crashes = ["boom"]

    class Crash(Exception):
        pass

    async def charge_then_crash(state: State) -> dict[str, Any]:
        update = await charge(state)
        if crashes:
            crashes.pop()
            raise Crash("the worker died after the provider charged")
        return update

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "thread-crash"}}
    with pytest.raises(Crash):
        await single(charge_then_crash).compile(checkpointer=saver).ainvoke({"order": "o-2"}, config, context=ctx)
    assert len(gw.effects()) == 1
    # A new process would compile the graph again and resume the thread from its checkpoint.
    fresh = single(charge_then_crash).compile(checkpointer=saver)
    done = await fresh.ainvoke(None, config, context=ctx)
    assert len(done["actions"]) == 1
    assert len(gw.effects()) == 1
    assert len(await gw.actions()) == 1


async def test_retry_policy_with_two_failures_after_the_charge_is_one_charge(
    gw: RunningGateway, ctx: AppContext
) -> None:
    attempts: list[int] = []

    async def flaky(state: State) -> dict[str, Any]:
        update = await charge(state)
        attempts.append(1)
        if len(attempts) <= 2:
            raise ValueError("downstream hiccup after the charge")
        return update

    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False, retry_on=ValueError)
    graph = single(flaky, retry_policy=retry).compile(checkpointer=InMemorySaver())
    done = await graph.ainvoke({"order": "o-3"}, {"configurable": {"thread_id": "thread-retry"}}, context=ctx)
    assert len(attempts) == 3
    assert len(done["actions"]) == 1
    assert len(gw.effects()) == 1


async def test_two_send_branches_are_two_distinct_actions(gw: RunningGateway, ctx: AppContext) -> None:
    builder: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    builder.add_node("charge", charge)
    # Two branches with the same order: each Send is its own task, hence its own action.
    builder.add_conditional_edges(START, lambda s: [Send("charge", {"order": s["order"]}) for _ in range(2)])
    builder.add_edge("charge", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    done = await graph.ainvoke({"order": "o-4"}, {"configurable": {"thread_id": "thread-send"}}, context=ctx)
    assert len(set(done["actions"])) == 2 and len(set(done["steps"])) == 2
    assert len(gw.effects()) == 2


async def test_a_named_step_survives_a_replan_in_a_later_super_step(gw: RunningGateway, ctx: AppContext) -> None:
    # The ToolNode case: the model asks again in a later loop turn, a new task. A logical step
    # plus a business scope keep it one action.
    async def tool_turn(state: State) -> dict[str, Any]:
        answer = await execute_in_node(
            "charge_card", deposit(state["order"]), scope=f"order:{state['order']}", step="charge-deposit"
        )
        return {"actions": [answer.action.action_id]}

    builder: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    builder.add_node("tools", tool_turn)
    builder.add_edge(START, "tools")
    builder.add_conditional_edges("tools", lambda s: "tools" if len(s["actions"]) < 3 else END)
    graph = builder.compile(checkpointer=InMemorySaver())
    done = await graph.ainvoke({"order": "o-5"}, {"configurable": {"thread_id": "thread-tools"}}, context=ctx)
    assert len(done["actions"]) == 3 and len(set(done["actions"])) == 1
    assert len(gw.effects()) == 1


async def test_without_a_checkpointer_or_thread_the_node_refuses(gw: RunningGateway, ctx: AppContext) -> None:
    with pytest.raises(NoStableRunContext, match="checkpointer"):
        await single(charge).compile().ainvoke({"order": "o-6"}, context=ctx)
    with pytest.raises(NoStableRunContext, match="EffectGateClient"):
        await (
            single(charge)
            .compile(checkpointer=InMemorySaver())
            .ainvoke({"order": "o-6"}, {"configurable": {"thread_id": "thread-no-client"}})
        )
    assert gw.effects() == []


async def test_a_subgraph_node_is_one_charge_across_an_interrupt(gw: RunningGateway, ctx: AppContext) -> None:
    async def charge_then_ask(state: State) -> dict[str, Any]:
        update = await charge(state)
        interrupt("ship it?")
        return update

    inner: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    inner.add_node("charge", charge_then_ask)
    inner.add_edge(START, "charge")
    inner.add_edge("charge", END)
    outer: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    outer.add_node("checkout", inner.compile())
    outer.add_edge(START, "checkout")
    outer.add_edge("checkout", END)
    graph = outer.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "thread-subgraph"}}
    await graph.ainvoke({"order": "o-7"}, config, context=ctx)
    done = await graph.ainvoke(Command(resume=True), config, context=ctx)
    assert done["steps"][0].startswith("checkout:") and "|charge:" in done["steps"][0]
    assert len(gw.effects()) == 1


@pytest.mark.parametrize("named_step", [False, True])
async def test_time_travel_is_a_new_action_unless_the_step_is_named(
    gw: RunningGateway, ctx: AppContext, named_step: bool
) -> None:
    async def prepare(state: State) -> dict[str, Any]:
        return {"steps": ["prepared"]}

    async def pay(state: State) -> dict[str, Any]:
        step = "charge-deposit" if named_step else ""
        answer = await execute_in_node("charge_card", deposit(state["order"]), scope="order:o-8", step=step)
        return {"actions": [answer.action.action_id]}

    builder: StateGraph[State, AppContext] = StateGraph(State, context_schema=AppContext)
    builder.add_node("prepare", prepare)
    builder.add_node("pay", pay)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "pay")
    builder.add_edge("pay", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": f"thread-fork-{named_step}"}}
    await graph.ainvoke({"order": "o-8"}, config, context=ctx)
    (before_pay,) = [s async for s in graph.aget_state_history(config) if s.next == ("pay",)]
    # Replaying from an earlier checkpoint forks the thread: new checkpoints, new task ids.
    await graph.ainvoke(None, before_pay.config, context=ctx)
    assert len(gw.effects()) == (1 if named_step else 2)
