"""Signed webhooks through the generic HTTP adapter (its `webhook` table): the CRM simulator
signs `invoice.recorded` (HMAC-SHA256 of "timestamp.body"), the adapter's request carries the
action id as the invoice's `reference`, and a lost answer whose write reads do not show yet
(UNKNOWN) settles CONFIRMED from the event before its next read-back; a forged or stale delivery
is refused and changes nothing. One invoice row at the simulator."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.client import run, step
from effectgate.client.errors import DeadlineExceeded
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import CANARY, SECRET_ENV, scenario
from tests.harness import LiveGateway, config_doc, start_gateway
from tests.test_webhooks import wait_for

HOOK_ENV = "EFFECTGATE_TEST_CRM_HOOK"
# The window, well inside the simulator's read lag: only the event can settle the action.
WINDOW = 20.0
READ_LAG = 2 * WINDOW


@pytest.fixture
async def crm() -> AsyncIterator[CrmSimulator]:
    sim = CrmSimulator(api_key=CANARY, visibility_lag=READ_LAG)
    await sim.start()
    yield sim
    await sim.webhooks.drain()
    await sim.stop()


@pytest.fixture
async def live(tmp_path: Path, crm: CrmSimulator) -> AsyncIterator[LiveGateway]:
    os.environ[SECRET_ENV] = CANARY
    os.environ[HOOK_ENV] = "crm_hook_secret"
    table = scenario("crm_invoice") | {"base_url": crm.base_url, "token_env": SECRET_ENV}
    table["request"] = dict(table["request"], body=dict(table["request"]["body"], reference="{action_id}"))
    table["webhook"] = {
        "secret_env": HOOK_ENV,
        "action_id": "data.reference",
        "kinds": {"invoice.recorded": "succeeded"},
        "expect": [{"path": "id", "equals": "{id}"}, {"path": "amount", "equals": "{amount}"}],
    }
    tools = {"record_invoice": {"adapter": "crm", "consistency_window": f"{WINDOW}s", "attempt_timeout": "1s"}}
    doc: dict[str, Any] = config_doc(f"sqlite:///{tmp_path}/eg.db", adapters={"crm": table}, tools=tools)
    doc["webhooks"] = {"listen": "127.0.0.1:0"}
    gateway = await start_gateway(doc)
    crm.webhooks.url = f"http://127.0.0.1:{gateway.gateway.webhook_port}/webhooks/crm"
    crm.webhooks.secret = "crm_hook_secret"
    yield gateway
    await gateway.close()


def invoice(n: str) -> struct_pb2.Struct:
    doc = struct_pb2.Struct()
    doc.update({"id": f"inv_{n}", "amount": 1250, "currency": "usd"})
    return doc


async def test_signed_crm_event_settles_unknown(live: LiveGateway, crm: CrmSimulator) -> None:
    # The UNKNOWN answer (the 1 s attempt timed out, the reads show nothing yet; the gateway
    # answers before the caller's 8 s deadline) comes first; the simulator holds its event until
    # then and sends it well inside the window. (It was sent 4 s after the request, with a 3.5 s
    # deadline: under two suites at once the answer missed that deadline.)
    crm.webhooks.hold = asyncio.Event()
    crm.injector.script(["drop_delayed"])  # the answer is lost and reads do not show the row yet
    with run("hook-1"), step("invoice"):
        try:
            action = (await live.client.execute("record_invoice", invoice("1"), scope="inv_1", timeout=8)).action
        except DeadlineExceeded:  # a very loaded machine (pair U4): the action is stored all the same
            (stored,) = (await live.stub.ListActions(pb.ListActionsRequest(run_id="hook-1"))).actions
            action = await wait_for(live, stored.action_id, pb.EFFECT_STATE_UNKNOWN, time.time() + 30)
    assert action.state == pb.EFFECT_STATE_UNKNOWN, action.reason
    assert crm.webhooks.sent == []
    crm.webhooks.hold.set()
    got = await wait_for(live, action.action_id, pb.EFFECT_STATE_CONFIRMED, time.time() + WINDOW - 1)
    assert got.state == pb.EFFECT_STATE_CONFIRMED, got.reason
    assert time.time() < got.next_check_at.ToNanoseconds() / 1e9 or not got.HasField("next_check_at")
    assert [d.status for d in crm.webhooks.sent] == [200]
    assert len(crm.ledger) == 1


async def test_forged_and_stale_crm_events_are_refused(live: LiveGateway, crm: CrmSimulator) -> None:
    event = {"id": "evt_x", "type": "invoice.recorded", "data": {"id": "inv_9", "amount": 1, "reference": "act_x"}}
    body = json.dumps(event).encode()
    forged = await crm.webhooks.deliver(body, headers=crm.webhooks.headers(body, secret="guess"))
    stale = await crm.webhooks.deliver(body, headers=crm.webhooks.headers(body, timestamp=int(time.time()) - 900))
    assert (forged.status, forged.answer) == (400, {"error": "forged"})
    assert (stale.status, stale.answer) == (400, {"error": "stale"})
    fine = await crm.webhooks.deliver(body)
    assert (fine.status, fine.answer.get("outcome")) == (200, "unmatched")  # no such action: nothing to change
    # Nothing of ours: nothing is kept either, so the same event is unmatched again.
    assert (await crm.webhooks.deliver(body)).answer.get("outcome") == "unmatched"
    ahead = await crm.webhooks.deliver(body, headers=crm.webhooks.headers(body, timestamp=int(time.time()) + 900))
    assert (ahead.status, ahead.answer) == (400, {"error": "stale"})


async def test_an_event_with_a_nul_changes_nothing_and_is_never_retried(live: LiveGateway, crm: CrmSimulator) -> None:
    # PostgreSQL text cannot keep a NUL (SQLite can): the adapter reads ids through a safe
    # alphabet, so a NUL never reaches a store; an event id with one is refused for good (not a
    # 503 the provider would retry for days), a reference with one is nobody's action.
    answers = []
    for event_id, reference in (("evt_\x00", "act_x"), ("evt_y", "act_\x00")):
        data = {"id": "inv_9", "amount": 1, "reference": reference}
        event = {"id": event_id, "type": "invoice.recorded", "data": data}
        answers.append(await crm.webhooks.deliver(json.dumps(event).encode()))
    assert [(a.status, a.answer) for a in answers] == [
        (400, {"error": "malformed"}),
        (
            200,
            {
                "outcome": "unmatched",
                "event": "evt_y",
                "reason": "no action this adapter dispatched (for a tenant it serves) carries the event's action id",
            },
        ),
    ]
    assert not (await live.stub.ListActions(pb.ListActionsRequest())).actions and crm.ledger == []
