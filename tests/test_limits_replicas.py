"""Budgets across three `effectgate serve` processes on one PostgreSQL database, charging the Stripe
simulator (which also counts what reached it): sixty charges racing for one budget's counter row
stop at the budget, and replays consume nothing (docs/limits.md). Lost answers and 500s after the
commit, and a kill between the reservation and the send, are the simulator's: its budget, cap and
counters are checked against the provider's ledger after every event (docs/testing.md, "Claims the
simulator carries")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from google.protobuf import any_pb2

from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import write_config
from tests.harness import GatewayProcess, config_doc, stripe_tools
from tests.test_replicas import CountingStripe, error_reason, running, stub_for

BUDGET, PRICE = 10000, 1000  # 100.00 EUR, 10.00 EUR a charge


def charge(run: str) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(tools_pb2.ChargeCard(customer="cus_9", amount=PRICE, currency="eur", payment_method="pm_card_visa"))
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id="pay"), tool="charge_card", scope=f"order:{run}", payload=packed
    )


def charged(sim: CountingStripe) -> int:
    return sum(int(e["params"]["amount"]) for e in sim.ledger if e["kind"] == "payment_intent")


def limited_config(tmp_path: Path, dsn: str, sim: CountingStripe, **gateway: Any) -> Path:
    doc = config_doc(
        dsn,
        # The replicas share this host's clock: a bound set here keeps the one derived from this short
        # lease (75 ms) from refusing work on a busy machine's probe noise (tests/test_clock_skew.py
        # tests the bound itself).
        gateway={
            "lease_ttl": "1.5s",
            "reconcile_interval": "0.2s",
            "recheck_min": "0.2s",
            "max_clock_skew": "1s",
            **gateway,
        },
        **stripe_tools(sim.base_url, attempt_timeout="1.2s", limits={"budget": {"eur": BUDGET}, "window": "1d"}),
    )
    return write_config(doc, tmp_path / "effectgate.toml")


async def window_spent(dsn: str) -> tuple[int, int]:
    """(effects, spent) of the day's eur counter, read from the database."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT effects, spent FROM limit_counters WHERE tool = 'charge_card' AND currency = 'eur'"
            " AND bucket LIKE 'w:%' ORDER BY bucket DESC LIMIT 1"
        )
    finally:
        await conn.close()
    return (0, 0) if row is None else (int(row["effects"]), int(row["spent"]))


async def fire(replicas: list[GatewayProcess], runs: list[str]) -> list[Any]:
    channels = [grpc.aio.insecure_channel(r.target) for r in replicas]
    try:
        stubs = [stub_for(c) for c in channels]
        return await asyncio.gather(
            *(stubs[i % len(stubs)].Execute(charge(run), timeout=30) for i, run in enumerate(runs)),
            return_exceptions=True,
        )
    finally:
        for channel in channels:
            await channel.close(grace=None)


async def test_sixty_charges_on_three_replicas_stop_at_the_budget(tmp_path: Path, pg_dsn: str) -> None:
    sim = CountingStripe(api_key="sk_test_effectgate_canary_3f9a1c")
    await sim.start()
    try:
        config = limited_config(tmp_path, pg_dsn, sim)
        replicas = [GatewayProcess(config) for _ in range(3)]
        async with running(*replicas):
            runs = [f"run-{i}" for i in range(60)]
            answers = await fire(replicas, runs)
            # Replays of the charged ones, through every replica: no budget consumed, no send.
            paid = [run for run, a in zip(runs, answers, strict=True) if isinstance(a, pb.ExecuteResponse)]
            again = await fire(replicas, paid * 3)
            assert all(isinstance(a, pb.ExecuteResponse) and a.replayed for a in again), again
    finally:
        await sim.stop()
    confirmed = [a for a in answers if isinstance(a, pb.ExecuteResponse)]
    refused = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
    assert len(confirmed) == 10 and all(a.action.state == pb.EFFECT_STATE_CONFIRMED for a in confirmed)
    assert len(refused) == 50
    assert all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_reason(e) == "BUDGET_EXCEEDED" for e in refused)
    assert charged(sim) == BUDGET and len(sim.ledger) == 10
    assert sorted(sim.creates.values()) == [1] * 10
    assert await window_spent(pg_dsn) == (10, BUDGET)
