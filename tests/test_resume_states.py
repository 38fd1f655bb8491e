"""Resume from each state a crashed worker can leave behind (rocket-rides-atomic's recovery
points): the gateway restarted on that store finishes the work with one effect, no agent asking."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.gateway.model.domain import ActionRecord, State
from effectgate.gateway.model.keys import action_id, fingerprint, provider_key
from effectgate.gateway.store.sqlite import SqliteStore
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import CHARGE, effects, request


def seeded(state: State, **changes: object) -> ActionRecord:
    now = time.time()
    record = ActionRecord(
        action_id=action_id("dev", "run-1", "charge", "charge_card", "order:1093"),
        tenant="dev",
        run_id="run-1",
        step_id="charge",
        tool="charge_card",
        scope="order:1093",
        payload_type=CHARGE.DESCRIPTOR.full_name,
        payload=CHARGE.SerializeToString(deterministic=True),
        fingerprint=fingerprint(CHARGE),
        state=state,
        created_at=now - 30,
        updated_at=now - 30,
        fence=3,
        lease_owner="dead-worker",
        lease_expires_at=now - 10,  # the worker died: its lease ran out
        dispatched_at=now - 20 if state is not State.PLANNED else None,
        attempts=0 if state is State.PLANNED else 1,
    )
    return record.evolve(**changes)


async def seed(tmp_path: Path, record: ActionRecord) -> None:
    store = SqliteStore(str(tmp_path / "eg.db"))
    await store.open()
    await store.insert_if_absent(record)
    await store.close()


async def settle(live: LiveGateway, action: str) -> pb.Action:
    for _ in range(100):
        got = await live.stub.GetAction(pb.GetActionRequest(action_id=action))
        if got.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED):
            return got
        await asyncio.sleep(0.1)
    return got


async def provider_already_has_it(sim: StripeSimulator, action: str) -> None:
    """The dead worker's request reached the provider before it died."""
    async with httpx.AsyncClient(base_url=sim.base_url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        answer = await http.post(
            "/v1/payment_intents",
            data={
                "customer": CHARGE.customer,
                "amount": str(CHARGE.amount),
                "currency": CHARGE.currency,
                "payment_method": CHARGE.payment_method,
                "confirm": "true",
                f"metadata[{ACTION_METADATA_KEY}]": action,
            },
            headers={"Idempotency-Key": provider_key(action, 0)},
        )
        answer.raise_for_status()


@pytest.mark.parametrize(
    ("state", "at_provider"),
    [
        (State.PLANNED, False),
        (State.DISPATCHED, False),
        (State.DISPATCHED, True),
        (State.UNKNOWN, True),
    ],
)
async def test_reconciler_resumes(tmp_path: Path, state: State, at_provider: bool) -> None:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    record = seeded(state, next_check_at=time.time() - 1 if state is State.UNKNOWN else None)
    if at_provider:
        await provider_already_has_it(sim, record.action_id)
    await seed(tmp_path, record)
    live = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)))
    try:
        action = await settle(live, record.action_id)
        assert action.state == pb.EFFECT_STATE_CONFIRMED, action
        assert len(effects(sim)) == 1
        assert action.receipt.external_id == effects(sim)[0]["id"]
    finally:
        await live.close()
        await sim.stop()


async def test_not_found_is_dispatched_again_on_the_next_execute(tmp_path: Path) -> None:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    await seed(tmp_path, seeded(State.NOT_FOUND, lease_owner="", lease_expires_at=0.0))
    live = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)))
    try:
        await asyncio.sleep(0.5)
        assert effects(sim) == []  # the reconciler leaves proven absences alone
        answer = await live.stub.Execute(request())
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED and answer.action.attempts == 2
        assert len(effects(sim)) == 1
        assert effects(sim)[0]["idempotency_key"] == provider_key(answer.action.action_id, 0)
    finally:
        await live.close()
        await sim.stop()


async def test_stale_worker_cannot_write(tmp_path: Path) -> None:
    """A worker whose lease was taken over (fence moved on) cannot record anything."""
    store = SqliteStore(str(tmp_path / "eg.db"))
    await store.open()
    record = seeded(State.PLANNED)
    await store.insert_if_absent(record)
    taken = await store.acquire_lease(record.action_id, "new-worker", time.time(), 30)
    assert taken is not None and taken.fence == record.fence + 1
    assert not await store.update(record.evolve(state=State.DISPATCHED))
    stored = await store.get(record.action_id)
    assert stored is not None and stored.state is State.PLANNED and stored.lease_owner == "new-worker"
    await store.close()
