"""Signed webhooks settle outcomes early (docs/webhooks.md), against the Stripe simulator and a
real gateway on port 0 with its webhook listener: an UNKNOWN (answer lost, read lag longer than
the window) settles CONFIRMED from `payment_intent.succeeded` before its next scheduled
read-back; forged, stale and replayed deliveries are refused (400) and change nothing; a refund
and a dispute go into the action's history while it stays CONFIRMED. Effects are counted at the
simulator."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from effectgate_lab.simulators.webhook_sender import WebhookSender
from tests.harness import API_KEY, LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import effects, request

SECRET_ENV = "EFFECTGATE_TEST_WEBHOOK_SECRETS"
OLD, NEW = "whsec_old_rotated_out", "whsec_new_current"
READ_LAG = 8.0  # search shows an intent this long after it was made
WINDOW = 5.0  # shorter than the lag; the parked action's next read-back is this far away
# An UNKNOWN whose read-back timed out (a loaded machine) is read again this late: not in the
# middle of a test (a parked one is read again when its window closes, whatever this is).
RECHECK_MIN = "300s"


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    simulator = StripeSimulator(api_key=API_KEY, search_lag=READ_LAG)
    await simulator.start()
    yield simulator
    await simulator.webhooks.drain()
    await simulator.stop()


@pytest.fixture
async def live(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[LiveGateway]:
    os.environ[SECRET_ENV] = f"{OLD}, {NEW}"  # a rotation: both verify
    parts = stripe_tools(
        sim.base_url, consistency_window=f"{WINDOW}s", attempt_timeout="1s", deadline="10s", max_attempts=1
    )
    parts["adapters"]["stripe"] |= {"webhook_secret_env": SECRET_ENV, "webhook_tolerance": 300}
    doc: dict[str, Any] = config_doc(f"sqlite:///{tmp_path}/eg.db", gateway={"recheck_min": RECHECK_MIN}, **parts)
    doc["webhooks"] = {"listen": "127.0.0.1:0"}
    gateway = await start_gateway(doc)
    sim.webhooks.url = f"http://127.0.0.1:{gateway.gateway.webhook_port}/webhooks/stripe"
    sim.webhooks.secret = NEW
    yield gateway
    await gateway.close()


async def wait_for(live: LiveGateway, action: str, state: int, until: float) -> pb.Action:
    while True:
        got = await live.stub.GetAction(pb.GetActionRequest(action_id=action))
        if got.state == state or time.time() > until:
            return got
        await asyncio.sleep(0.05)


async def parked_unknown(live: LiveGateway, sim: SimulatorServer) -> pb.Action:
    """A charge whose answer is lost, with no time left to wait out the window: UNKNOWN. (The
    gateway answers 0.75 s before the caller's 1.5 s deadline; a loaded machine has held that
    answer past it, or held the attempt's end past the answer time, which is answered IN_FLIGHT.
    The action is parked all the same: then it is read back. A loaded machine has also timed the
    read-back out: that UNKNOWN is read again `RECHECK_MIN` later, after the test.)"""
    sim.injector.script(["drop_after_commit"])
    try:
        action = (await live.stub.Execute(request(), timeout=1.5)).action
    except grpc.aio.AioRpcError as exc:
        in_flight = exc.code() == grpc.StatusCode.ABORTED and "is in flight" in (exc.details() or "")
        if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED and not in_flight:
            raise
        (only,) = (await live.stub.ListActions(pb.ListActionsRequest())).actions
        action = await wait_for(live, only.action_id, pb.EFFECT_STATE_UNKNOWN, time.time() + 30)
    assert action.state == pb.EFFECT_STATE_UNKNOWN, action.reason
    return action


async def test_signed_webhook_settles_unknown_before_the_next_read_back(
    live: LiveGateway, sim: StripeSimulator
) -> None:
    sim.webhooks.delay = 2.5  # after the caller got UNKNOWN (its deadline is 1.5 s)
    action = await parked_unknown(live, sim)
    parked_at = time.time()
    next_read_back = action.next_check_at.ToNanoseconds() / 1e9
    reads_before = sim.request_count
    settled = await wait_for(live, action.action_id, pb.EFFECT_STATE_CONFIRMED, parked_at + WINDOW - 1.0)
    assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled.reason
    assert time.time() < parked_at + WINDOW - 0.5
    assert parked_at + WINDOW - 1.5 < next_read_back, "the read-back is scheduled when the window closes"
    assert time.time() < next_read_back
    assert sim.request_count == reads_before + 1  # one read, of the event's object: it settled it
    evidence = json_format.MessageToDict(settled.observation.evidence)
    assert evidence.get("source") == "webhook" and evidence.get("event_id", "").startswith("evt_"), evidence
    assert evidence.get("lookup") == "retrieve", "the evidence is the read of the event's intent, not the event"
    assert settled.receipt.external_id.startswith("pi_")
    assert len(effects(sim)) == 1
    assert [d.status for d in sim.webhooks.sent] == [200]


async def test_forged_stale_and_replayed_deliveries_change_nothing(live: LiveGateway, sim: StripeSimulator) -> None:
    action = await parked_unknown(live, sim)
    intent = next(iter(sim.intents.values())).data
    event = sim.webhooks.stripe_event("payment_intent.succeeded", dict(intent))
    body = json.dumps(event).encode()
    sender = sim.webhooks
    forged = await sender.deliver(body, headers=sender.headers(body, secret="whsec_attacker"))
    stale = await sender.deliver(body, headers=sender.headers(body, timestamp=int(time.time()) - 3600))
    tampered_body = body.replace(b'"amount": 1000', b'"amount": 1')
    tampered = await sender.deliver(tampered_body, headers=sender.headers(body))
    assert (forged.status, forged.answer) == (400, {"error": "forged"})
    assert (stale.status, stale.answer) == (400, {"error": "stale"})
    assert (tampered.status, tampered.answer) == (400, {"error": "forged"})
    unchanged = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert unchanged.state == pb.EFFECT_STATE_UNKNOWN
    # Signed with the old secret of the rotation: genuine, applied once.
    first = await sender.deliver(body, headers=sender.headers(body, secret=OLD))
    assert first.status == 200 and first.answer["outcome"] == "settled", first
    replayed = await sender.deliver(body)  # settled now: answered from the record, without its lock
    assert (replayed.status, replayed.answer["outcome"]) == (200, "ignored"), replayed
    # The answer says why nothing changed (`effectgate dev trigger webhook` prints it).
    why = f"{action.action_id} is settled already: a payment_intent.succeeded changes nothing"
    assert replayed.answer["reason"] == why, replayed
    settled = await live.stub.GetAction(pb.GetActionRequest(action_id=action.action_id))
    assert settled.state == pb.EFFECT_STATE_CONFIRMED
    assert len(effects(sim)) == 1


async def test_refund_and_dispute_go_into_the_history(live: LiveGateway, sim: StripeSimulator) -> None:
    # Its succeeded event is sent once the action is settled (sooner, it may meet the drive's lease: 503).
    hook, sim.webhooks.url = sim.webhooks.url, ""
    answer = await live.stub.Execute(request(), timeout=10)
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    sim.webhooks.url = hook
    intent = dict(sim.intents[answer.action.receipt.external_id].data)
    await sim.webhooks.deliver(json.dumps(sim.webhooks.stripe_event("payment_intent.succeeded", intent)).encode())
    assert [d.answer.get("outcome") for d in sim.webhooks.sent] == ["ignored"]  # settled: nothing to change
    settled = await live.stub.GetAction(pb.GetActionRequest(action_id=answer.action.action_id))
    assert settled.HasField("settled_at"), "the test's principal sees the people's view"
    intent_id = answer.action.receipt.external_id
    sim.refund(intent_id, delay=0)
    await sim.webhooks.drain()
    sim.dispute(intent_id, delay=0)  # one at a time: a delivery meeting a held lease gets 503 (retry)
    await sim.webhooks.drain()
    assert [d.answer.get("outcome") for d in sim.webhooks.sent[1:]] == ["noted", "noted"]
    after = await live.stub.GetAction(pb.GetActionRequest(action_id=answer.action.action_id))
    assert after.state == pb.EFFECT_STATE_CONFIRMED
    assert any(n.startswith("refunded reported by stripe (event evt_") for n in after.notes), after.notes
    assert any("amount_refunded=1000" in n for n in after.notes), after.notes
    assert any(n.startswith("disputed reported by stripe") and "reason=fraudulent" in n for n in after.notes)
    # Noted later, settled then: the notes moved the record's updated_at, not when it settled.
    assert after.settled_at == settled.settled_at
    assert after.updated_at.ToNanoseconds() > settled.settled_at.ToNanoseconds()
    assert len(effects(sim)) == 1


async def test_unknown_route_and_unsigned_post(live: LiveGateway, sim: StripeSimulator) -> None:
    other = WebhookSender(url=sim.webhooks.url.replace("/stripe", "/nosuch"), secret=NEW)
    missing = await other.deliver(b"{}")
    assert missing.status == 404
    unsigned = await sim.webhooks.deliver(b"{}", headers={"Content-Type": "application/json"})
    assert (unsigned.status, unsigned.answer) == (400, {"error": "forged"})
