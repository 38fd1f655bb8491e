"""The Python client (async and sync) against a real gateway on port 0 in front of the Stripe
simulator: re-plans are one action, errors arrive typed, safe retries honour RetryInfo."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from effectgate.client import (
    EffectGateClient,
    InFlight,
    InvalidRequest,
    NotFound,
    PayloadMismatch,
    RetryPolicy,
    State,
    SyncEffectGateClient,
    Unavailable,
    run,
    step,
    subagent,
)
from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime.server import Gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools


def charge(currency: str = "usd", amount: int = 1000) -> ChargeCard:
    return ChargeCard(customer="cus_42", amount=amount, currency=currency, payment_method="pm_card_visa")


def effects(sim: StripeSimulator) -> list[dict[str, Any]]:
    return [e for e in sim.ledger if e["kind"] == "payment_intent"]


def doc(tmp_path: Path, sim: StripeSimulator, **tool: Any) -> dict[str, Any]:
    return config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, **tool))


@pytest.fixture
async def target(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[str]:
    gateway = await Gateway.start(parse_config(doc(tmp_path, sim)))
    yield f"127.0.0.1:{gateway.port}"
    await gateway.stop()


async def test_async_five_replans_are_one_action(target: str, sim: StripeSimulator) -> None:
    async with EffectGateClient(target) as client:
        with run("run-async"), step("charge-deposit"):
            # The model re-plans five times: fresh tool-call ids, the currency written anew.
            answers = [
                await client.execute("charge_card", charge(c), scope="order:1", tool_call_id=f"call-{i}")
                for i, c in enumerate(["usd", "USD", "usd", " Usd", "usd"])
            ]
    assert {a.action.action_id for a in answers} == {answers[0].action.action_id}
    assert answers[0].action.state == State.CONFIRMED and not answers[0].replayed
    assert all(a.replayed for a in answers[1:])
    assert len(effects(sim)) == 1


async def test_sync_five_replans_are_one_action(target: str, sim: StripeSimulator) -> None:
    def agent() -> list[Any]:
        with SyncEffectGateClient(target) as client, run("run-sync"), step("charge-deposit"):
            return [client.execute("charge_card", charge(), scope="order:1", tool_call_id=f"c{i}") for i in range(5)]

    answers = await asyncio.to_thread(agent)  # the gateway serves on this loop meanwhile
    assert len({a.action.action_id for a in answers}) == 1
    assert answers[0].action.state == State.CONFIRMED
    assert [a.replayed for a in answers] == [False, True, True, True, True]
    assert len(effects(sim)) == 1


async def test_module_level_client_works_inside_asyncio_run(target: str, sim: StripeSimulator) -> None:
    """A client made before any loop exists (module level), then used from two asyncio.run calls."""
    client = EffectGateClient(target)

    async def once() -> int:
        with run("run-module"), step("s"):
            return (await client.execute("charge_card", charge(), scope="o:1")).action.state

    def two_runs() -> list[int]:
        return [asyncio.run(once()), asyncio.run(once())]

    assert await asyncio.to_thread(two_runs) == [State.CONFIRMED, State.CONFIRMED]
    assert len(effects(sim)) == 1


async def test_mismatch_is_payload_mismatch_with_both_fingerprints(target: str, sim: StripeSimulator) -> None:
    async with EffectGateClient(target) as client:
        with run("run-mm"), step("charge"):
            first = await client.execute("charge_card", charge(amount=1000), scope="order:2")
            with pytest.raises(PayloadMismatch) as caught:
                await client.execute("charge_card", charge(amount=999), scope="order:2")
    error = caught.value
    assert error.reason == "PAYLOAD_MISMATCH" and error.action_id == first.action.action_id
    assert error.stored_fingerprint == first.action.fingerprint
    assert error.fingerprint and error.fingerprint != error.stored_fingerprint

    def sync_mismatch() -> PayloadMismatch:
        with SyncEffectGateClient(target) as sync, run("run-mm"), step("charge"):
            try:
                sync.execute("charge_card", charge(amount=5), scope="order:2")
            except PayloadMismatch as exc:
                return exc
        raise AssertionError("no PayloadMismatch")

    sync_error = await asyncio.to_thread(sync_mismatch)
    assert sync_error.stored_fingerprint == first.action.fingerprint != sync_error.fingerprint
    assert len(effects(sim)) == 1


async def test_typed_errors_carry_reason_and_details(target: str) -> None:
    async with EffectGateClient(target) as client:
        with pytest.raises(NotFound) as missing:
            await client.get("act_does_not_exist")
        assert missing.value.reason == "ACTION_NOT_FOUND" and missing.value.action_id == "act_does_not_exist"
        with run("run-bad"), step("s"), pytest.raises(InvalidRequest) as bad:
            await client.execute("launch_rockets", charge(), scope="x")
        assert bad.value.reason == "INVALID_REQUEST"
        assert "tool" in [field for field, _ in bad.value.field_violations]


async def test_verify_by_id_and_by_ref_get_and_list_pages(target: str) -> None:
    async with EffectGateClient(target) as client:
        with run("run-list"):
            ids = []
            for i in range(5):
                with step(f"step-{i}"), subagent("biller"):
                    ids.append((await client.execute("charge_card", charge(), scope="order:9")).action.action_id)
            with step("step-3"):
                by_ref = await client.verify(tool="charge_card", scope="order:9")
        assert by_ref.action.action_id == ids[3]
        assert (await client.verify(ids[0])).action.state == State.CONFIRMED
        assert (await client.get(ids[4])).context.agent == "biller"
        pages = [len(p.actions) async for p in client.pages(run_id="run-list", page_size=2)]
        assert pages == [2, 2, 1]
        listed = [a.action_id async for a in client.list(run_id="run-list", state=State.CONFIRMED, page_size=2)]
        assert listed == ids


async def two_replicas(tmp_path: Path, sim: StripeSimulator) -> tuple[Gateway, Gateway]:
    """Two gateways on one SQLite file: the holder drives with a long budget, the other answers
    IN_FLIGHT after 0.3 s (its tool deadline) while the holder's lease is live."""
    holder = await Gateway.start(parse_config(doc(tmp_path, sim)))
    impatient = await Gateway.start(parse_config(doc(tmp_path, sim, deadline="0.3s")))
    return holder, impatient


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_in_flight_is_retried_after_retry_info_then_stored_answer(
    tmp_path: Path, sim: StripeSimulator, caplog: pytest.LogCaptureFixture, flavour: str
) -> None:
    holder, impatient = await two_replicas(tmp_path, sim)
    sim.latency = 1.5
    try:
        async with EffectGateClient(f"127.0.0.1:{holder.port}") as first:
            with run("run-if"), step("charge"):
                driving = asyncio.ensure_future(first.execute("charge_card", charge(), scope="order:3"))
                await asyncio.sleep(0.3)  # the holder has claimed and dispatched
                other = f"127.0.0.1:{impatient.port}"
                async with EffectGateClient(other) as plain:
                    with pytest.raises(InFlight) as caught:
                        await plain.execute("charge_card", charge(), scope="order:3")
                assert caught.value.reason == "IN_FLIGHT" and caught.value.retry_after is not None
                assert caught.value.retry_after > 0
                caplog.set_level(logging.INFO, logger="effectgate.client")
                policy = RetryPolicy(max_attempts=10, total_budget=60)
                if flavour == "async":
                    async with EffectGateClient(other, retry=policy) as retrying:
                        answer = await retrying.execute("charge_card", charge(), scope="order:3")
                else:

                    def call() -> Any:
                        with SyncEffectGateClient(other, retry=policy) as retrying, run("run-if"), step("charge"):
                            return retrying.execute("charge_card", charge(), scope="order:3")

                    answer = await asyncio.to_thread(call)
                first_answer = await driving
        assert answer.replayed and answer.action.state == State.CONFIRMED
        assert answer.action.action_id == first_answer.action.action_id
        retries = [r.getMessage() for r in caplog.records if r.name == "effectgate.client"]
        assert retries and all("IN_FLIGHT" in m for m in retries), retries
        assert len(effects(sim)) == 1
    finally:
        await impatient.stop()
        await holder.stop()


async def test_unreachable_gateway_is_typed_unavailable(sim: StripeSimulator) -> None:
    """Nothing reached a gateway: UNAVAILABLE, without ErrorInfo, and no effect."""
    async with EffectGateClient("127.0.0.1:1", timeout=5) as client:
        with run("r"), step("s"), pytest.raises(Unavailable) as caught:
            await client.execute("charge_card", charge(), scope="x")
    assert caught.value.reason == ""  # not from the gateway: no ErrorInfo
    assert effects(sim) == []


async def test_store_unavailable_is_retried_then_confirmed(
    tmp_path: Path, sim: StripeSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    """UNAVAILABLE/STORE_UNAVAILABLE means nothing was sent: the client waits what RetryInfo
    asks and calls again with the same context; the action then happens once."""
    config = doc(tmp_path, sim)
    config["store"]["url"] += "?busy_timeout_ms=200"
    gateway = await Gateway.start(parse_config(config))
    blocker = sqlite3.connect(tmp_path / "eg.db", isolation_level=None)
    caplog.set_level(logging.INFO, logger="effectgate.client")
    try:
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        async with EffectGateClient(f"127.0.0.1:{gateway.port}", retry=RetryPolicy(max_attempts=50)) as client:
            with run("run-store"), step("charge"):
                call = asyncio.ensure_future(client.execute("charge_card", charge(), scope="order:5"))
            for _ in range(600):  # until the client has been refused once and waits to retry
                if any("STORE_UNAVAILABLE" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            assert sim.request_count == 0, "refused before anything was sent"
            blocker.execute("ROLLBACK")
            answer = await call
        assert answer.action.state == State.CONFIRMED and not answer.replayed
        assert len(effects(sim)) == 1
    finally:
        blocker.close()
        await gateway.stop()
