"""Notifications ([[notify]], docs/notifications.md) from real in-process gateways on SQLite, to
receivers on loopback: the webhook's signature checked by the standardwebhooks library's own
verifier, the money as money, no masked field, a sink that is down for a while."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from standardwebhooks import Webhook

from effectgate.client import RunContext, State
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.testing.gateway import InProcessGateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from tests.notify_kit import SECRET, Receiver, until, until_async, webhook_sink

CARD = ChargeCard(
    customer="cus_marta", amount=4200, currency="eur", payment_method="pm_secret_card", description="Deposit"
)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EG_NOTIFY_SECRET", SECRET)


@asynccontextmanager
async def approving_gateway(sinks: list[dict[str, Any]], **tool: Any) -> AsyncIterator[InProcessGateway]:
    payments = ScriptedAdapter(time.time, consistency_window=0.0)
    tools = {"charge_card": {"adapter": "payments", "approval": "required", **tool}}
    async with gateway(
        adapters={"payments": payments},
        tools=tools,
        store="sqlite",
        settings={"notify_interval": "0.1s"},
        tables={"notify": sinks},
    ) as gw:
        yield gw


async def test_an_approval_waiting_is_a_signed_webhook_with_money_and_no_masked_field() -> None:
    receiver = await Receiver().start()
    try:
        async with approving_gateway([webhook_sink(receiver.url)]) as gw:
            answer = await gw.client.execute("charge_card", CARD, scope="order:1", context=RunContext("run-1", "pay"))
            assert answer.action.state == State.AWAITING_APPROVAL
            await receiver.until(lambda got: len(got) >= 1, "the approval_waiting notification")
            got = receiver.received[0]
            # The library's own verifier: the id, the timestamp and the HMAC over the exact body.
            doc = Webhook(SECRET).verify(got.body, got.headers)
            assert doc["type"] == "approval_waiting"
            data = doc["data"]
            assert got.headers["webhook-id"] == data["event_id"]
            assert data["action_id"] == answer.action.action_id
            assert data["money"] == {"amount_minor": 4200, "currency": "EUR", "text": "€42.00"}
            assert data["party"] == "cus_marta" and data["about"] == "Deposit"
            assert data["link"] == f"https://console.example.test/actions/{answer.action.action_id}"
            assert b"pm_secret_card" not in got.body and "payment_method" not in got.body.decode()

            await gw.client.approve(answer.action.action_id, note="fine by me")
            await receiver.until(lambda got: len(got) >= 2, "the approval_decided notification")
            decided = Webhook(SECRET).verify(receiver.received[1].body, receiver.received[1].headers)
            assert decided["type"] == "approval_decided"
            assert decided["data"]["decision"] == "approved" and decided["data"]["note"] == "fine by me"
            assert gw.server.notifier is not None

            async def outbox_empty() -> bool:
                rows: list[Any] = await gw.store.notify_rows(None, 10)
                return rows == []

            await until_async(outbox_empty, "the outbox to empty")  # taken: nothing left
    finally:
        await receiver.stop()


async def test_a_sink_that_is_down_gets_it_when_it_comes_back_and_execute_does_not_wait() -> None:
    held = asyncio.Event()
    receiver = Receiver(hold=held)
    await receiver.start()
    try:
        async with approving_gateway([webhook_sink(receiver.url, max_attempts=1000)]) as gw:
            first = await gw.client.execute("charge_card", CARD, scope="o:2", context=RunContext("run-2", "a"))
            await until(lambda: receiver.holding >= 1, "a delivery stuck in a sink that never answers")
            # The sink holds the deliverer's request: Execute answers anyway, from its own path.
            second = await gw.client.execute("charge_card", CARD, scope="o:3", context=RunContext("run-2", "b"))
            assert second.action.state == State.AWAITING_APPROVAL and first.action.state == State.AWAITING_APPROVAL
            assert receiver.received == []
            receiver.status, receiver.hold = 503, None  # now down and saying so
            held.set()  # (the stuck request answers 503 too, long after the deliverer gave it up)

            async def retried() -> bool:  # retried while down, the attempts and the error kept
                rows = await gw.store.notify_rows(False, 10)
                return any(r.attempts >= 2 and r.last_error == "HTTP 503" for r in rows)

            await until_async(retried, "two failed attempts")
            receiver.status = 200
            await receiver.until(lambda got: len(got) >= 2, "both deliveries after the sink came back")
            await until_async(lambda: _empty(gw), "the outbox to empty")
        docs = [Webhook(SECRET).verify(r.body, r.headers) for r in receiver.received]
        assert sorted(d["data"]["action_id"] for d in docs) == sorted([first.action.action_id, second.action.action_id])
        assert [d["type"] for d in docs] == ["approval_waiting"] * 2
    finally:
        held.set()
        await receiver.stop()


async def _empty(gw: InProcessGateway) -> bool:
    rows: list[Any] = await gw.store.notify_rows(None, 10)
    return rows == []
