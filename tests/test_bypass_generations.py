"""An operator-granted bypass sends an action again as a new generation with a new provider key:
its read-back must find that generation's own charge, never the first one's (which every
generation shares the action id with). A real gateway on a SQLite file, the Stripe and Square
simulators; the second generation's answer is lost, and the ledger holds exactly the charges
that were made."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import stripe

from effectgate.adapters.base import ActionCall, DefinitiveError, Outcome
from effectgate.adapters.square import wire
from effectgate.adapters.square.adapter import SquareAdapter, SquareSettings
from effectgate.adapters.stripe.adapter import StripeAdapter
from effectgate.client import RunContext
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, start_gateway

# The SDK's HTTPXClient posts its form body with `data=<str>`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

STRIPE_KEY = "sk_test_generations"
SQUARE_TOKEN = "EAAA_test_generations"
os.environ["EG_GEN_STRIPE_KEY"] = STRIPE_KEY
os.environ["EG_GEN_SQUARE_TOKEN"] = SQUARE_TOKEN
# The simulators apply a write on arrival: a lost answer's effect is there at once.
TOOL = {"bypass": "operator", "consistency_window": "0.5s", "keeps_processing": "0s", "attempt_timeout": "2s"}
CHARGE = ChargeCard(customer="cus_42", amount=1999, currency="eur", payment_method="pm_card_visa")
# A lost answer: the provider applied nothing (409), or applied it and the answer never came.
LOSSES = ("conflict", "drop_after_commit")


def adapters(stripe_sim: StripeSimulator, square_sim: SquareSimulator) -> dict[str, dict[str, Any]]:
    return {
        "stripe": {"api_base": stripe_sim.base_url, "api_key_env": "EG_GEN_STRIPE_KEY", "timeout": 2},
        "square": {
            "kind": "square",
            "base_url": square_sim.base_url,
            "access_token_env": "EG_GEN_SQUARE_TOKEN",
            "timeout": 2,
            "source_ids": {"pm_card_visa": "cnon:card-nonce-ok"},
        },
    }


def charges(provider: str, stripe_sim: StripeSimulator, square_sim: SquareSimulator) -> list[dict[str, Any]]:
    if provider == "stripe":
        return [e for e in stripe_sim.ledger if e["kind"] == "payment_intent"]
    return [e for e in square_sim.ledger if e["kind"] == "payment"]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("provider", ["stripe", "square"])
async def test_a_bypass_generation_is_confirmed_by_its_own_charge_only(
    tmp_path: Path, provider: str, loss: str
) -> None:
    async with (
        StripeSimulator(api_key=STRIPE_KEY) as stripe_sim,
        SquareSimulator(access_token=SQUARE_TOKEN) as square_sim,
    ):
        assert isinstance(stripe_sim, StripeSimulator) and isinstance(square_sim, SquareSimulator)
        sim = stripe_sim if provider == "stripe" else square_sim
        doc = config_doc(
            f"sqlite:///{tmp_path}/eg.db",
            adapters=adapters(stripe_sim, square_sim),
            tools={"charge_card": {"adapter": provider, **TOOL}},
        )
        live = await start_gateway(doc)
        try:
            context = RunContext(run_id="run-gen", step_id="charge")
            first = await live.client.execute("charge_card", CHARGE, scope="order:1", context=context, timeout=10)
            assert first.action.state == pb.EFFECT_STATE_CONFIRMED, first.action.reason
            [first_charge] = charges(provider, stripe_sim, square_sim)
            assert first.action.receipt.external_id == first_charge["id"]

            await live.client.grant_bypass(first.action.action_id, note="the customer asked for a second one")
            sim.injector.script([loss])  # the second generation's first send loses its answer
            second = await live.client.execute(
                "charge_card", CHARGE, scope="order:1", context=context, timeout=15, bypass=True
            )
            assert second.action.action_id == first.action.action_id
            assert second.action.state == pb.EFFECT_STATE_CONFIRMED, second.action.reason
            assert second.action.generation == 1
            made = charges(provider, stripe_sim, square_sim)
            # Exactly the two charges the operator allowed: the first, and the bypass's (sent
            # again after a 409 proved nothing was made, or found by the read-back after a drop).
            assert len(made) == 2, made
            assert second.action.receipt.external_id == made[1]["id"] != first_charge["id"]
            key = second.action.provider_key
            assert key.endswith("-g1") and key != first.action.provider_key
            if provider == "stripe":
                assert [e["metadata"]["effectgate_provider_key"] for e in made] == [first.action.provider_key, key]
            else:
                action = first.action.action_id
                assert [e["reference_id"] for e in made] == [action, f"{action}-g1"]

            # A read-back now of the settled generation still names its own charge.
            checked = await live.client.verify(second.action.action_id, timeout=10)
            assert checked.observation.outcome == pb.OBSERVATION_OUTCOME_CONFIRMED
            assert checked.action.receipt.external_id == made[1]["id"]
        finally:
            await live.close()


def _call(adapter_charge: ChargeCard, *, generation: int, key: str, action: str = "act_generation_test") -> ActionCall:
    return ActionCall(action, key, adapter_charge, "order:1", "charge_card", "acme", generation=generation)


async def test_stripe_an_intent_from_before_generations_were_marked_never_confirms_a_bypass() -> None:
    """An intent with the action id but no provider key (made by a gateway before this one) is
    generation 0's for generation 0; for a later generation it confirms nothing and keeps the
    read in doubt (it may be that generation's own, in doubt across the upgrade)."""
    async with StripeSimulator(api_key=STRIPE_KEY) as sim:
        assert isinstance(sim, StripeSimulator)
        adapter = StripeAdapter("stripe", api_key=STRIPE_KEY, api_base=sim.base_url)
        outside = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": sim.base_url}, max_network_retries=0)
        try:
            old = await outside.v1.payment_intents.create_async(
                params={
                    "amount": 1999,
                    "currency": "eur",
                    "customer": "cus_42",
                    "payment_method": "pm_card_visa",
                    "confirm": True,
                    "metadata": {"effectgate_action_id": "act_generation_test"},
                },
                options={"idempotency_key": "effectgate-act_generation_test-g0"},
            )
            zero = await adapter.verify(_call(CHARGE, generation=0, key="effectgate-act_generation_test-g0"))
            assert zero.outcome is Outcome.CONFIRMED and zero.receipt is not None
            assert zero.receipt.external_id == old.id
            one = await adapter.verify(_call(CHARGE, generation=1, key="effectgate-act_generation_test-g1"))
            assert one.outcome is Outcome.UNKNOWN and "before generations were marked" in one.detail
            assert one.evidence["found"] == 0 and len(one.evidence["other_generations"]) == 1
            # The bypass's own charge, marked with its key, settles it.
            receipt = await adapter.execute(_call(CHARGE, generation=1, key="effectgate-act_generation_test-g1"))
            mine = await adapter.verify(_call(CHARGE, generation=1, key="effectgate-act_generation_test-g1"))
            assert mine.outcome is Outcome.CONFIRMED and mine.receipt is not None
            assert mine.receipt.external_id == receipt.external_id != old.id
        finally:
            await adapter.close()


async def test_square_reference_ids_name_the_generation_within_40_characters() -> None:
    action = "act_" + "0" * 32  # a gateway action id: 36 characters
    assert wire.reference_id(action, 0) == action
    assert wire.reference_id(action, 1) == f"{action}-g1"
    assert wire.reference_id(action, 99) == f"{action}-g99" and len(wire.reference_id(action, 99)) == 40
    assert wire.reference_id(action, 100) == ""  # Square's limit is 40
    for generation in (0, 1, 99):
        assert wire.action_of_reference(wire.reference_id(action, generation)) == action
    async with SquareSimulator(access_token=SQUARE_TOKEN) as sim:
        assert isinstance(sim, SquareSimulator)
        settings = SquareSettings(base_url=sim.base_url, source_ids={"pm_card_visa": "cnon:card-nonce-ok"})
        adapter = SquareAdapter("square", access_token=SQUARE_TOKEN, settings=settings)
        try:
            with pytest.raises(DefinitiveError) as refused:
                await adapter.execute(_call(CHARGE, generation=100, key="k100", action=action))
            assert refused.value.code == "reference_too_long" and "nothing was sent" in refused.value.message
            assert sim.ledger == []
            first = await adapter.execute(_call(CHARGE, generation=0, key="k0", action=action))
            # Generation 1 lists the action's payments and finds only generation 0's: absent.
            one = await adapter.verify(_call(CHARGE, generation=1, key="k1", action=action))
            assert one.outcome is Outcome.NOT_FOUND and one.evidence["found"] == 0
            # Read by id (a webhook's object), generation 0's payment proves nothing of generation 1.
            by_id = await adapter.verify(
                ActionCall(action, "k1", CHARGE, "order:1", "charge_card", "acme", receipt=first, generation=1)
            )
            assert by_id.outcome is Outcome.UNKNOWN and "another generation" in by_id.detail
            assert by_id.evidence["found"] == 0
            listed = await adapter.list_effects(0)
            assert [e.action_id for e in listed] == [action]
        finally:
            await adapter.close()
