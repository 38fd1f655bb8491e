"""The notifications' outbox on both SQL backends (store/trail/outbox.py): the start (or else the
first lease) sets the cursors at the chains' heads once (no history replayed, nothing after the
start skipped), one holder at a time, staging moves a cursor and inserts its rows in one
transaction (compare-and-set: a second stager of the same range writes nothing), and failed rows
are listed and made due again. And a gateway on each store
(PostgreSQL included) delivering a signed webhook."""

from __future__ import annotations

import time

import pytest
from standardwebhooks import Webhook

from effectgate.client import RunContext, State
from effectgate.gateway.model.domain import ActionEvent
from effectgate.gateway.model.domain import State as Stored
from effectgate.gateway.model.notify import Outgoing
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from tests.notify_kit import SECRET, Receiver, webhook_sink
from tests.store_backends import Backend, record


def row(event_id: str, at: float = 1.0, sink: str = "hook") -> Outgoing:
    return Outgoing(sink, event_id, "acme", "approval_waiting", at, '{"type":"x"}', next_at=at)


async def test_cursors_lease_stage_and_retry(backend: Backend) -> None:
    store, other = await backend.store(), await backend.store()
    for name in ("before-1", "before-2"):
        await store.insert_if_absent(record(name), ActionEvent(name, 1.0, "claim", Stored.DISPATCHED))
    # The first lease ever: the cursors start at the heads, so the two events are history.
    assert await store.notify_lease("replica-a", 10.0, 5.0)
    assert await store.notify_cursors() == {"acme": 2}
    assert not await other.notify_lease("replica-b", 12.0, 5.0)  # held
    assert await store.notify_lease("replica-a", 13.0, 5.0)  # renewed
    assert await other.notify_lease("replica-b", 18.5, 5.0)  # lapsed: taken over
    await other.notify_release("replica-b")
    assert await store.notify_lease("replica-a", 19.0, 5.0)  # handed back: at once
    await store.insert_if_absent(record("after"), ActionEvent("after", 20.0, "claim", Stored.AWAITING_APPROVAL))
    (trail,) = await store.chain_rows("acme", 2, 10)
    assert trail.n == 3
    assert await store.notify_stage("acme", 2, 3, [row("evt_1")])
    assert not await other.notify_stage("acme", 2, 3, [row("evt_1", sink="again")])  # moved already
    assert await store.notify_cursors() == {"acme": 3}
    assert [r.event_id for r in await store.notify_due(5.0, 10)] == ["evt_1"]
    await store.notify_post([row("evt_1"), row("ntc_2", at=2.0)])  # evt_1 stays as it is
    due = await store.notify_due(5.0, 10)
    assert [(r.sink, r.event_id) for r in due] == [("hook", "evt_1"), ("hook", "ntc_2")]
    failed = Outgoing(**{**due[0].__dict__, "attempts": 3, "last_error": "HTTP 503", "failed": True})
    await store.notify_retry(failed)
    assert [r.event_id for r in await store.notify_rows(True, 10)] == ["evt_1"]
    assert sorted(await store.notify_counts()) == [("hook", False, 1), ("hook", True, 1)]
    assert await store.notify_requeue(30.0, event_id="evt_1") == 1
    again = (await store.notify_rows(False, 10))[0]
    assert (again.event_id, again.attempts, again.next_at, again.failed) == ("evt_1", 0, 30.0, False)
    await store.notify_done("hook", "evt_1")
    await store.notify_done("hook", "ntc_2")
    assert await store.notify_counts() == []


async def test_the_start_sets_the_cursors_once_so_an_event_before_the_first_pass_is_news(
    backend: Backend,
) -> None:
    # The gateway marks the start before it serves; its first pass (a background job) may come
    # after an agent's first action, which must then be notified, not taken for history. A
    # regression: the first lease used to take the snapshot, so such an action was never notified.
    store, other = await backend.store(), await backend.store()
    await store.insert_if_absent(record("history"), ActionEvent("history", 1.0, "claim", Stored.DISPATCHED))
    await store.notify_start()
    assert await store.notify_cursors() == {"acme": 1}
    await store.insert_if_absent(record("news"), ActionEvent("news", 2.0, "claim", Stored.AWAITING_APPROVAL))
    await other.notify_start()  # a second replica starting: the mark is there, nothing moves
    assert await other.notify_lease("replica-b", 3.0, 5.0)  # the first pass: the lease is free
    assert await store.notify_cursors() == {"acme": 1}
    (trail,) = await store.chain_rows("acme", 1, 10)
    assert trail.n == 2 and trail.event.action_id == "news"
    assert not await store.notify_lease("replica-a", 4.0, 5.0)  # held by replica-b


async def test_a_gateway_on_each_store_delivers_a_signed_webhook(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EG_NOTIFY_SECRET", SECRET)
    receiver = await Receiver().start()
    card = ChargeCard(customer="cus_9", amount=999, currency="usd", payment_method="pm_x")
    try:
        async with gateway(
            adapters={"payments": ScriptedAdapter(time.time)},
            tools={"charge_card": {"adapter": "payments", "approval": "required"}},
            store=await backend.store(open_it=False),
            settings={"notify_interval": "0.1s"},
            tables={"notify": [webhook_sink(receiver.url)]},
        ) as gw:
            answer = await gw.client.execute("charge_card", card, scope="o:1", context=RunContext("run-pg", "pay"))
            assert answer.action.state == State.AWAITING_APPROVAL
            await receiver.until(lambda got: len(got) >= 1, "the notification")
        doc = Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)
        assert doc["data"]["money"]["text"] == "$9.99" and doc["data"]["action_id"] == answer.action.action_id
    finally:
        await receiver.stop()
