"""One client, two replicas behind one name: the Python client's default `round_robin` policy
spreads calls over every address the name resolves to (what a headless Kubernetes Service gives
it), where gRPC's `pick_first` would send them all to one. The name here is an `ipv4:` list of
two gateways' ports, which the client resolves the way it would a DNS answer of two pods."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from effectgate.client import EffectGateClient, run, step
from effectgate.client.settings import CHANNEL_OPTIONS
from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime.server import Gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools

SPREAD = 20  # calls counted once both replicas are connected
WARM_UP = 200  # at most this many calls before both are


@pytest.fixture
async def replicas(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[list[Gateway]]:
    # Each replica on its own store: which one answered a call is which store holds its action.
    started = [
        await Gateway.start(parse_config(config_doc(f"sqlite:///{tmp_path}/r{n}.db", **stripe_tools(sim.base_url))))
        for n in range(2)
    ]
    yield started
    for gateway in started:
        await gateway.stop()


async def counts(replicas: list[Gateway]) -> list[int]:
    """How many actions each replica's store holds."""
    out = []
    for gateway in replicas:
        async with EffectGateClient(f"127.0.0.1:{gateway.port}") as client:
            out.append(len([action async for action in client.list()]))
    return out


async def charge(client: EffectGateClient, n: int) -> None:
    with step(f"charge-{n}"):
        payload = ChargeCard(customer="cus_42", amount=100, currency="usd", payment_method="pm_card_visa")
        await client.execute("charge_card", payload, scope=f"order:{n}")


def test_round_robin_is_the_clients_default() -> None:
    assert ("grpc.lb_policy_name", "round_robin") in CHANNEL_OPTIONS


async def test_one_clients_calls_alternate_over_the_replicas(replicas: list[Gateway], sim: StripeSimulator) -> None:
    target = "ipv4:" + ",".join(f"127.0.0.1:{gateway.port}" for gateway in replicas)
    async with EffectGateClient(target) as client:
        with run("run-spread"):
            # The first calls may all go to the replica that connected first; round_robin uses the
            # other as soon as its connection is up.
            sent = 0
            while min(await counts(replicas)) == 0:
                assert sent < WARM_UP, f"{WARM_UP} calls and one replica never got one: {await counts(replicas)}"
                await charge(client, sent)
                sent += 1
            before = await counts(replicas)
            for n in range(sent, sent + SPREAD):
                await charge(client, n)
    after = await counts(replicas)
    # Both connected: each call goes to the next one in turn.
    assert sorted(a - b for a, b in zip(after, before, strict=True)) == [SPREAD // 2, SPREAD // 2]
    assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == sent + SPREAD
