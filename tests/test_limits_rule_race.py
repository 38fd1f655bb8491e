"""An approval rule over the counters (`run_spent + amount > 5000`) under concurrency: three
concurrent 40.00 charges in one run let through exactly as many unapproved charges as the same
three one at a time (one; the other two wait for a person), on one gateway (SQLite file) and on
three `effectgate serve` replicas sharing one PostgreSQL database, 20 rounds each. The rule is
decided in the claim's transaction, on the counters it has locked (docs/limits.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from tests.harness import API_KEY, GatewayProcess, config_doc, start_gateway, stripe_tools
from tests.test_limits import charge, charged
from tests.test_replicas import CountingStripe, running, stub_for

ROUNDS = 20
PRICE = 4000
RULE = {"run_budget": {"eur": 1_000_000}, "require_approval_when": ["run_spent + amount > 5000"]}
CONFIRMED, WAITING = pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_AWAITING_APPROVAL


def states(answers: list[pb.ExecuteResponse]) -> list[int]:
    return sorted(a.action.state for a in answers)


async def sequential(stub: gateway_pb2_grpc.EffectGatewayAsyncStub, run: str) -> list[int]:
    return states([await stub.Execute(charge(run, PRICE, step=f"pay-{i}"), timeout=30) for i in range(3)])


async def test_the_race_on_one_gateway_lets_through_what_one_at_a_time_does(tmp_path: Path) -> None:
    sim = CountingStripe(api_key=API_KEY)
    await sim.start()
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, limits=RULE))
    live = await start_gateway(doc)
    try:
        await race(live.stub, [live.stub])
    finally:
        await live.close()
        await sim.stop()
    assert charged(sim) == PRICE * (ROUNDS + 1)  # one charge per run reached the provider


async def race(
    first: gateway_pb2_grpc.EffectGatewayAsyncStub, stubs: list[gateway_pb2_grpc.EffectGatewayAsyncStub]
) -> None:
    """The sequential run, then ROUNDS rounds of three concurrent charges (over `stubs` in turn)."""
    alone = await sequential(first, "run-alone")
    assert alone == sorted([CONFIRMED, WAITING, WAITING])
    for n in range(ROUNDS):
        answers = await asyncio.gather(
            *(
                stubs[i % len(stubs)].Execute(charge(f"run-race-{n}", PRICE, step=f"pay-{i}"), timeout=30)
                for i in range(3)
            )
        )
        assert states(list(answers)) == alone, n


async def test_the_race_on_three_postgres_replicas(tmp_path: Path, pg_dsn: str) -> None:
    sim = CountingStripe(api_key="sk_test_effectgate_canary_3f9a1c")
    await sim.start()
    try:
        doc = config_doc(pg_dsn, gateway={"max_clock_skew": "1s"}, **stripe_tools(sim.base_url, limits=RULE))
        config = write_config(doc, tmp_path / "effectgate.toml")
        replicas = [GatewayProcess(config) for _ in range(3)]
        async with running(*replicas):
            channels = [grpc.aio.insecure_channel(r.target) for r in replicas]
            try:
                stubs = [stub_for(c) for c in channels]
                await race(stubs[0], stubs)
            finally:
                for channel in channels:
                    await channel.close(grace=None)
    finally:
        await sim.stop()
    assert charged(sim) == PRICE * (ROUNDS + 1)
