"""effectgate.testing used the way a user would: their own adapter (or the ScriptedAdapter)
behind the in-process gateway, called through the client."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from effectgate.adapters.base import ActionCall, Adapter, Capabilities, Observation, Outcome, Receipt
from effectgate.client import RunContext, State, Unavailable, run, step
from effectgate.testing import FakeClock, Lost, MemoryDatabase, MemoryStore, ScriptedAdapter, gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc

CARD = ChargeCard(customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_visa")


class LedgerAdapter(Adapter):
    """A user's adapter: its "provider" is a ledger of entries that dedups on the key."""

    payload_type: ClassVar[type[Message]] = struct_pb2.Struct

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.calls = 0
        self.closed = False

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> Adapter:
        return cls()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(dedups_on_key=True, key_retention=None, consistency_window=0.0, has_read_api=True)

    async def execute(self, call: ActionCall) -> Receipt:
        self.calls += 1
        entry = self.entries.setdefault(call.provider_key, json_format.MessageToDict(call.payload))
        return Receipt(external_id=f"entry_{len(self.entries)}", result=entry)

    async def verify(self, call: ActionCall) -> Observation:
        if call.provider_key not in self.entries:
            return Observation(Outcome.NOT_FOUND, detail="no entry")
        return Observation(Outcome.CONFIRMED, detail="entry found")

    async def close(self) -> None:
        self.closed = True


def entry(amount: int) -> struct_pb2.Struct:
    payload = struct_pb2.Struct()
    payload.update({"account": "acct_1", "amount": amount})
    return payload


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_two_executes_of_one_step_make_one_effect(store: Any) -> None:
    ledger = LedgerAdapter()
    async with gateway(adapters={"ledger": ledger}, tools={"post_entry": {"adapter": "ledger"}}, store=store) as gw:
        with run("run-1"), step("post-deposit"):
            first = await gw.client.execute("post_entry", entry(25), scope="invoice:7")
            again = await gw.client.execute("post_entry", entry(25), scope="invoice:7")
        assert first.action.state == State.CONFIRMED and not first.replayed
        assert again.replayed and again.action.action_id == first.action.action_id
        assert again.action.receipt.external_id == "entry_1"
        assert ledger.calls == 1 and len(ledger.entries) == 1
        # Another step is another action: a second entry.
        with run("run-1"), step("post-fee"):
            await gw.client.execute("post_entry", entry(2), scope="invoice:7")
        assert len(ledger.entries) == 2
        target = gw.target
    # Stopped cleanly: the adapter closed with the gateway, the port answers no more.
    assert ledger.closed
    async with grpc.aio.insecure_channel(target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gateway_pb2_grpc.EffectGatewayStub(channel).GetAction(pb.GetActionRequest(action_id="x"), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_a_lost_answer_is_verified_not_resent() -> None:
    # A provider without idempotency keys: after a lost answer only a read-back is safe.
    payments = ScriptedAdapter(time.time, dedups_on_key=False, consistency_window=0.0)
    payments.script_execute(Lost())
    async with gateway(adapters={"payments": payments}, tools={"charge_card": {"adapter": "payments"}}) as gw:
        answer = await gw.client.execute("charge_card", CARD, scope="order:1", context=RunContext("run-2", "charge"))
        assert answer.action.state == State.CONFIRMED
        assert answer.action.receipt.external_id == "ex_1"
        assert len(payments.executed) == 1 and len(payments.verified) >= 1
        assert len(payments.effects_of(answer.action.action_id)) == 1
        # The store is the kit's MemoryStore: the record is there, as the gateway wrote it.
        assert isinstance(gw.store, MemoryStore)
        stored = gw.store.db.record(answer.action.action_id)
        assert stored is not None and stored.receipt is not None


async def test_the_fake_clock_drives_the_consistency_window() -> None:
    # The provider shows a write 120 s late and declares a 300 s window: after a lost answer the
    # gateway must not read "not found" as absence, and re-checks until the write shows. On the
    # FakeClock those 120 s pass without real waiting.
    clock = FakeClock(time.time())
    payments = ScriptedAdapter(clock, dedups_on_key=False, consistency_window=300.0, search_lag=120.0)
    payments.script_execute(Lost())
    tools = {"charge_card": {"adapter": "payments", "deadline": "600s"}}
    started, wall = clock(), time.monotonic()
    async with gateway(adapters={"payments": payments}, tools=tools, clock=clock) as gw:
        answer = await gw.client.execute(
            "charge_card", CARD, scope="order:2", context=RunContext("run-3", "charge"), timeout=600
        )
        assert answer.action.state == State.CONFIRMED
    assert len(payments.effects) == 1 and len(payments.executed) == 1
    assert len(payments.verified) >= 2  # NOT_FOUND inside the window, then CONFIRMED
    assert clock() - started >= 120.0
    assert time.monotonic() - wall < 60.0  # virtual time, not real waiting


async def test_a_store_instance_is_served_and_its_faults_reach_the_agent() -> None:
    db = MemoryDatabase()
    payments = ScriptedAdapter(time.time)
    tools = {"charge_card": {"adapter": "payments"}}
    async with gateway(adapters={"payments": payments}, tools=tools, store=MemoryStore(db)) as gw:
        db.down = True
        with pytest.raises(Unavailable):
            await gw.client.execute("charge_card", CARD, scope="order:3", context=RunContext("run-4", "charge"))
        assert payments.executed == []
        db.heal()
        answer = await gw.client.execute("charge_card", CARD, scope="order:3", context=RunContext("run-4", "charge"))
        assert answer.action.state == State.CONFIRMED and len(payments.effects) == 1
        assert gw.server.store is gw.store and db.rows


async def test_a_fake_clock_behind_the_wall_clock_is_refused() -> None:
    with pytest.raises(ValueError, match=r"FakeClock\(time.time\(\)\)"):
        async with gateway(adapters={}, clock=FakeClock()):
            pass
