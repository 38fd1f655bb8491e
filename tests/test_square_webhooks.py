"""Square's signed webhooks (docs/webhooks.md) against the Square simulator and a real gateway on
port 0 with its webhook listener: an UNKNOWN (answer lost, ListPayments lag longer than the
window) settles CONFIRMED from `payment.created` before its next scheduled read-back; a body
signed for another URL, under another key, or tampered with is refused, a replay too, and none
changes anything; a refund and a dispute (which name the payment, not the action) go into the
action's history. Effects are counted at the simulator."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from effectgate.adapters.base import ConfigError
from effectgate.adapters.square.adapter import SquareAdapter
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.square_sim import SquareSimulator
from tests.harness import LiveGateway, config_doc, start_gateway
from tests.test_execute import request
from tests.test_webhooks import RECHECK_MIN, parked_unknown, wait_for

TOKEN_ENV, TOKEN = "EFFECTGATE_TEST_SQUARE_TOKEN", "EAAA_test_square_webhooks"
KEYS_ENV = "EFFECTGATE_TEST_SQUARE_SIGNATURE_KEYS"
OLD, NEW = "sq_key_being_replaced", "sq_key_current"
# What the subscription names (behind a proxy): signed with the body, never the listener's address.
NOTIFICATION_URL = "https://hooks.shop.example/effectgate/square"
READ_LAG = 8.0  # ListPayments shows a payment this long after it was made
WINDOW = 5.0  # shorter than the lag; the parked action's next read-back is this far away


@pytest.fixture
async def sim() -> AsyncIterator[SquareSimulator]:
    simulator = SquareSimulator(access_token=TOKEN, list_lag=READ_LAG)
    await simulator.start()
    yield simulator
    await simulator.webhooks.drain()
    await simulator.stop()


@pytest.fixture
def window() -> float:
    """The tool's consistency window (a test parametrizes it to outlast itself)."""
    return WINDOW


@pytest.fixture
async def live(
    tmp_path: Path, sim: SquareSimulator, monkeypatch: pytest.MonkeyPatch, window: float
) -> AsyncIterator[LiveGateway]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(KEYS_ENV, f"{OLD}, {NEW}")
    adapter = {
        "kind": "square",
        "base_url": sim.base_url,
        "access_token_env": TOKEN_ENV,
        "source_ids": {"pm_card_visa": "cnon:card-nonce-ok"},
        "timeout": 5,
        "webhook_signature_key_env": KEYS_ENV,
        "webhook_url": NOTIFICATION_URL,
    }
    tool: dict[str, Any] = {"adapter": "square", "consistency_window": f"{window}s", "max_attempts": 1}
    tool |= {"attempt_timeout": "1s", "deadline": "10s"}
    doc: dict[str, Any] = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        gateway={"recheck_min": RECHECK_MIN},
        adapters={"square": adapter},
        tools={"charge_card": tool},
    )
    doc["webhooks"] = {"listen": "127.0.0.1:0"}
    gateway = await start_gateway(doc)
    sim.webhooks.url = f"http://127.0.0.1:{gateway.gateway.webhook_port}/webhooks/square"
    sim.webhooks.signed_url = NOTIFICATION_URL
    sim.webhooks.secret = NEW
    yield gateway
    await gateway.close()


def payments(sim: SquareSimulator) -> list[dict[str, Any]]:
    return [e for e in sim.ledger if e["kind"] == "payment"]


async def test_signed_payment_event_settles_unknown_before_the_next_read_back(
    live: LiveGateway, sim: SquareSimulator
) -> None:
    sim.webhooks.delay = 2.5  # after the caller got UNKNOWN (its deadline is 1.5 s)
    action = await parked_unknown(live, sim)
    parked_at = time.time()
    next_read_back = action.next_check_at.ToNanoseconds() / 1e9
    reads_before = sim.request_count
    settled = await wait_for(live, action.action_id, pb.EFFECT_STATE_CONFIRMED, parked_at + WINDOW - 1.0)
    assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled.reason
    assert time.time() < next_read_back
    assert sim.request_count == reads_before + 1  # one read, of the event's object: it settled it
    evidence = json_format.MessageToDict(settled.observation.evidence)
    assert evidence.get("source") == "webhook" and evidence.get("event_type") == "payment.created", evidence
    assert evidence.get("lookup") == "get", "the evidence is the read of the event's payment, not the event"
    assert settled.receipt.external_id == payments(sim)[0]["id"]
    assert len(payments(sim)) == 1
    assert [d.status for d in sim.webhooks.sent] == [200]


async def test_wrong_url_key_tampered_and_replayed_deliveries_change_nothing(
    live: LiveGateway, sim: SquareSimulator
) -> None:
    action = await parked_unknown(live, sim)
    payment = next(iter(sim.payments.values())).data
    sender = sim.webhooks
    body = json.dumps(sender.square_event("payment.updated", "payment", dict(payment))).encode()
    forged = await sender.deliver(body, headers=sender.headers(body, secret="sq_key_of_an_attacker"))
    sender.signed_url = "https://elsewhere.example/hook"  # a genuine key, but for another URL
    other_url = await sender.deliver(body)
    sender.signed_url = NOTIFICATION_URL
    tampered = await sender.deliver(body.replace(b'"amount": 1000', b'"amount": 1'), headers=sender.headers(body))
    for refused in (forged, other_url, tampered):
        assert (refused.status, refused.answer) == (400, {"error": "forged"})
    unsigned = await sender.deliver(body, headers={"Content-Type": "application/json"})
    assert (unsigned.status, unsigned.answer) == (400, {"error": "forged"})
    not_an_event = b'{"event_id": "e1"}'
    malformed = await sender.deliver(not_an_event, headers=sender.headers(not_an_event))
    assert (malformed.status, malformed.answer) == (400, {"error": "malformed"})
    unchanged = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert unchanged.state == pb.EFFECT_STATE_UNKNOWN
    # Signed with the key being replaced: genuine, applied once.
    first = await sender.deliver(body, headers=sender.headers(body, secret=OLD))
    assert first.status == 200 and first.answer["outcome"] == "settled", first
    replayed = await sender.deliver(body)  # settled now: answered from the record, without its lock
    assert (replayed.status, replayed.answer["outcome"]) == (200, "ignored"), replayed
    settled = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert settled.state == pb.EFFECT_STATE_CONFIRMED
    assert len(payments(sim)) == 1


def _created(seconds_from_now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds_from_now))


async def test_events_created_outside_the_replay_window_change_nothing(live: LiveGateway, sim: SquareSimulator) -> None:
    """Square retries an event for 24 hours with its original `created_at` (signed with the body):
    older than the 25 h tolerance, or ahead of our clock by more than the skew, is `stale`; none
    is `malformed`. Each is genuinely signed and names a payment that settles the action."""
    hook, sim.webhooks.url = sim.webhooks.url, ""  # the simulator's own payment.created: not sent
    action = await parked_unknown(live, sim)
    sim.webhooks.url = hook
    payment = next(iter(sim.payments.values())).data
    sender = sim.webhooks
    reads_before = sim.request_count

    def signed(created_at: str | None) -> bytes:
        event = sender.square_event("payment.updated", "payment", dict(payment))
        if created_at is None:
            del event["created_at"]
        else:
            event["created_at"] = created_at
        return json.dumps(event).encode()

    for created_at, reason in (
        (_created(-26 * 3600), "stale"),  # a delivery captured a day and more ago
        (_created(-30 * 24 * 3600), "stale"),
        (_created(+3600), "stale"),  # an hour in the future
        (None, "malformed"),
        ("yesterday", "malformed"),
    ):
        body = signed(created_at)
        refused = await sender.deliver(body)
        assert (refused.status, refused.answer) == (400, {"error": reason}), created_at
    assert sim.request_count == reads_before  # refused before any read
    unchanged = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert unchanged.state == pb.EFFECT_STATE_UNKNOWN and unchanged.updated_at == action.updated_at
    # A retry 23 hours after the event, and one a minute ahead (clock skew): inside the window.
    late = await sender.deliver(signed(_created(-23 * 3600)))
    assert late.status == 200 and late.answer["outcome"] == "settled", late
    settled = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert settled.state == pb.EFFECT_STATE_CONFIRMED
    ahead = await sender.deliver(signed(_created(+60)))
    assert ahead.status == 200 and ahead.answer["outcome"] == "ignored", ahead  # settled already
    assert len(payments(sim)) == 1


async def test_refund_and_dispute_go_into_the_history(live: LiveGateway, sim: SquareSimulator) -> None:
    # Its payment.created is sent once the action is settled (sooner, it may meet the drive's lease: 503).
    hook, sim.webhooks.url = sim.webhooks.url, ""
    answer = await live.stub.Execute(request(), timeout=10)
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED, answer.action.reason
    sim.webhooks.url = hook
    payment = dict(sim.payments[answer.action.receipt.external_id].data)
    await sim.webhooks.deliver(json.dumps(sim.webhooks.square_event("payment.created", "payment", payment)).encode())
    assert [d.answer.get("outcome") for d in sim.webhooks.sent] == ["ignored"]  # settled: nothing to change
    payment_id = answer.action.receipt.external_id
    sim.refund(payment_id, delay=0)
    await sim.webhooks.drain()
    sim.dispute(payment_id, delay=0)  # one at a time: a delivery meeting a held lease gets 503 (retry)
    await sim.webhooks.drain()
    assert [d.answer.get("outcome") for d in sim.webhooks.sent[1:]] == ["noted", "noted"]
    after = await live.stub.GetAction(pb.GetActionRequest(action_id=answer.action.action_id))
    assert after.state == pb.EFFECT_STATE_CONFIRMED
    refunded = [n for n in after.notes if n.startswith("refunded reported by square (event ")]
    assert refunded and "amount_refunded=1000" in refunded[0] and "currency=usd" in refunded[0], after.notes
    assert any(n.startswith("disputed reported by square") and "reason=NOT_AS_DESCRIBED" in n for n in after.notes)
    assert len(payments(sim)) == 1


def test_a_signature_key_without_the_notification_url_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(KEYS_ENV, NEW)
    settings = {"access_token_env": TOKEN_ENV, "webhook_signature_key_env": KEYS_ENV}
    with pytest.raises(ConfigError, match="webhook_url is required with a webhook signature key"):
        SquareAdapter.from_settings("square", settings)


@pytest.mark.parametrize("window", [60.0])  # no scheduled read-back while the test runs
async def test_absent_and_differing_payments_change_nothing(live: LiveGateway, sim: SquareSimulator) -> None:
    """Signed, but the provider's read shows no such payment, or another amount or currency than
    the payload's: the action, its story and the payments at Square stay as they were."""
    action = await parked_unknown(live, sim)
    payment = dict(next(iter(sim.payments.values())).data)
    sender = sim.webhooks

    async def snapshot() -> tuple[bytes, int]:
        got = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
        story = await live.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action.action_id))
        return got.SerializeToString(deterministic=True), len(story.events)

    before = await snapshot()
    body = json.dumps(sender.square_event("payment.updated", "payment", payment)).encode()
    stored = sim.payments[payment["id"]].data
    for field, value in (("amount", 999), ("currency", "EUR")):
        original = stored["amount_money"][field]
        stored["amount_money"][field] = value
        answer = await sender.deliver(json.dumps(sender.square_event("payment.updated", "payment", payment)).encode())
        stored["amount_money"][field] = original
        assert (answer.status, answer.answer["outcome"]) == (200, "unconfirmed"), (field, answer)
        assert await snapshot() == before, field
    sim.remove(payment["id"])
    absent = await sender.deliver(body)
    assert (absent.status, absent.answer["outcome"]) == (200, "unconfirmed"), absent
    assert await snapshot() == before
