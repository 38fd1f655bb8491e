"""One agent program, two payment providers: the documented config
(docs/examples/charge-card-providers.toml) serves `charge_card` through Stripe, then, with only
the tool's `adapter` line changed, through Square. Each run makes one effect at its simulator and
none at the other."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from effectgate.client import EffectGateClient, run, step
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import start_gateway

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "charge-card-providers.toml"


async def agent_program(client: EffectGateClient, order: str) -> pb.Action:
    """The agent's code: it knows the tool and its typed payload, never the provider."""
    with run(f"checkout-{order}"), step("charge"):
        payload = ChargeCard(customer="cus_42", amount=1999, currency="eur", payment_method="pm_card_visa")
        answer = await client.execute("charge_card", payload, scope=f"order:{order}", timeout=10)
        return answer.action


def config(tmp_path: Path, stripe: StripeSimulator, square: SquareSimulator, adapter: str) -> dict[str, Any]:
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["server"]["listen"] = "127.0.0.1:0"
    doc["store"]["url"] = f"sqlite:///{tmp_path}/eg.db"
    doc["adapters"]["stripe"]["api_base"] = stripe.base_url
    doc["adapters"]["square"]["base_url"] = square.base_url
    doc["tools"]["charge_card"]["adapter"] = adapter  # the only change between the two runs
    return doc


async def test_same_agent_program_charges_through_stripe_then_square(tmp_path: Path) -> None:
    os.environ["STRIPE_API_KEY"] = "sk_test_switch"
    os.environ["SQUARE_ACCESS_TOKEN"] = "EAAA_test_switch"
    async with (
        StripeSimulator(api_key="sk_test_switch") as stripe,
        SquareSimulator(access_token="EAAA_test_switch") as square,
    ):
        assert isinstance(stripe, StripeSimulator) and isinstance(square, SquareSimulator)
        for adapter, order in (("stripe", "1"), ("square", "2")):
            live = await start_gateway(config(tmp_path, stripe, square, adapter))
            try:
                action = await agent_program(live.client, order)
                again = await agent_program(live.client, order)  # a retry of the same step
            finally:
                await live.close()
            assert action.state == pb.EFFECT_STATE_CONFIRMED, action.reason
            assert again.action_id == action.action_id and again.receipt.external_id == action.receipt.external_id
        assert len(stripe.ledger) == 1 and len(square.ledger) == 1
        assert stripe.ledger[0]["params"]["amount"] == "1999"
        assert square.ledger[0]["params"] == {"amount": 1999, "currency": "EUR", "source_id": "cnon:card-nonce-ok"}
