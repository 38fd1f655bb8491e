"""An action in doubt is read back by the adapter that dispatched it, never by its tool's current
one: a real gateway sends through Stripe and loses the answer, then restarts on the same SQLite
file with the tool moved to Square. "Absent at Square" must not settle a Stripe charge (the
re-send would be a second charge); with the Stripe adapter gone from the config, the action stays
in doubt and nothing is sent anywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from effectgate.client import EffectGateClient, RunContext
from effectgate.client.errors import DeadlineExceeded
from effectgate.gateway.model import keys
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.faults import FaultPlan
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway
from tests.test_bypass_generations import CHARGE, SQUARE_TOKEN, STRIPE_KEY, adapters, charges

# One send, no same-key retry, and a window longer than the first gateway's caller waits: the
# lost answer is still in doubt when it stops. The Stripe search shows the charge 3.5 s late.
TOOL = {"consistency_window": "5s", "keeps_processing": "0s", "attempt_timeout": "2s", "max_attempts": 1}
VISIBILITY_LAG = 3.5


def gateway_config(tmp_path: Path, tables: dict[str, dict[str, Any]], adapter: str) -> dict[str, Any]:
    return config_doc(
        f"sqlite:///{tmp_path}/eg.db", adapters=tables, tools={"charge_card": {"adapter": adapter, **TOOL}}
    )


async def until(client: EffectGateClient, action_id: str, done: Callable[[pb.Action], bool]) -> pb.Action:
    """The action once `done` holds (the reconciler's work), within 20 s."""
    async with asyncio.timeout(20):
        while True:
            action = await client.get(action_id)
            if done(action):
                return action
            await asyncio.sleep(0.1)


async def lose_a_stripe_answer(tmp_path: Path, stripe_sim: StripeSimulator, square_sim: SquareSimulator) -> str:
    """Gateway 1, tool on Stripe: the charge is made, its answer lost, and the action is still in
    doubt when the gateway stops. Returns its action id."""
    stripe_sim.injector.configure(FaultPlan(visibility_lag=VISIBILITY_LAG))
    stripe_sim.injector.script(["drop_delayed"])
    first = await start_gateway(gateway_config(tmp_path, adapters(stripe_sim, square_sim), "stripe"))
    try:
        context = RunContext(run_id="run-switch", step_id="charge")
        # The deadline (2 s, before the charge is visible) is what leaves it in doubt: given longer,
        # the gateway would wait for the read-back and confirm it.
        action_id = keys.action_id("dev", "run-switch", "charge", "charge_card", "order:1")
        try:
            answer = await first.client.execute("charge_card", CHARGE, scope="order:1", context=context, timeout=2)
        except DeadlineExceeded:  # a loaded machine: the in-doubt answer came after the caller left
            pass
        else:
            assert answer.action.state == pb.EFFECT_STATE_UNKNOWN, answer.action.reason
            assert answer.action.action_id == action_id
    finally:
        await first.close()
    assert len(charges("stripe", stripe_sim, square_sim)) == 1  # the money moved at Stripe
    return action_id


async def test_an_action_in_doubt_is_read_back_where_it_was_sent_after_the_tool_moved(tmp_path: Path) -> None:
    async with (
        StripeSimulator(api_key=STRIPE_KEY) as stripe_sim,
        SquareSimulator(access_token=SQUARE_TOKEN) as square_sim,
    ):
        assert isinstance(stripe_sim, StripeSimulator) and isinstance(square_sim, SquareSimulator)
        action_id = await lose_a_stripe_answer(tmp_path, stripe_sim, square_sim)
        # Gateway 2, same file, the tool now on Square (both adapters configured).
        second: LiveGateway = await start_gateway(gateway_config(tmp_path, adapters(stripe_sim, square_sim), "square"))
        try:
            settled = await until(second.client, action_id, lambda a: a.state != pb.EFFECT_STATE_UNKNOWN)
            assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled.reason
            [stripe_charge] = charges("stripe", stripe_sim, square_sim)
            assert settled.receipt.external_id == stripe_charge["id"]
            assert charges("square", stripe_sim, square_sim) == []  # never re-sent at Square
            # The agent's retry replays the outcome; a new order goes to Square.
            context = RunContext(run_id="run-switch", step_id="charge")
            again = await second.client.execute("charge_card", CHARGE, scope="order:1", context=context, timeout=10)
            assert again.action.receipt.external_id == stripe_charge["id"]
            later = RunContext(run_id="run-switch-2", step_id="charge")
            new = await second.client.execute("charge_card", CHARGE, scope="order:2", context=later, timeout=10)
            assert new.action.state == pb.EFFECT_STATE_CONFIRMED, new.action.reason
            [square_charge] = charges("square", stripe_sim, square_sim)
            assert new.action.receipt.external_id == square_charge["id"]
            assert len(charges("stripe", stripe_sim, square_sim)) == 1
        finally:
            await second.close()


async def test_an_action_in_doubt_whose_adapter_is_gone_stays_in_doubt_and_is_never_resent(tmp_path: Path) -> None:
    async with (
        StripeSimulator(api_key=STRIPE_KEY) as stripe_sim,
        SquareSimulator(access_token=SQUARE_TOKEN) as square_sim,
    ):
        assert isinstance(stripe_sim, StripeSimulator) and isinstance(square_sim, SquareSimulator)
        action_id = await lose_a_stripe_answer(tmp_path, stripe_sim, square_sim)
        only_square = {"square": adapters(stripe_sim, square_sim)["square"]}
        second = await start_gateway(gateway_config(tmp_path, only_square, "square"))
        try:
            held = await until(second.client, action_id, lambda a: "no longer configured" in a.reason)
            assert held.state == pb.EFFECT_STATE_UNKNOWN
            assert "adapter 'stripe', which dispatched this attempt" in held.reason
            # The agent's retry, and a read-back asked for now, change nothing and send nothing.
            context = RunContext(run_id="run-switch", step_id="charge")
            again = await second.client.execute("charge_card", CHARGE, scope="order:1", context=context, timeout=5)
            assert again.action.state == pb.EFFECT_STATE_UNKNOWN and "no longer configured" in again.action.reason
            checked = await second.client.verify(action_id, timeout=5)
            assert checked.observation.outcome == pb.OBSERVATION_OUTCOME_UNKNOWN
            assert "no longer configured" in checked.observation.detail
            assert charges("square", stripe_sim, square_sim) == []
        finally:
            await second.close()
        # Gateway 3 with the Stripe adapter back: the read settles it from the Stripe charge.
        third = await start_gateway(gateway_config(tmp_path, adapters(stripe_sim, square_sim), "square"))
        try:
            # (The reconciler's back-off has grown by now: the agent's retry reads it at once.)
            context = RunContext(run_id="run-switch", step_id="charge")
            answer = await third.client.execute("charge_card", CHARGE, scope="order:1", context=context, timeout=10)
            settled = answer.action
            assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled.reason
            [stripe_charge] = charges("stripe", stripe_sim, square_sim)
            assert settled.receipt.external_id == stripe_charge["id"]
            assert charges("square", stripe_sim, square_sim) == []
        finally:
            await third.close()
