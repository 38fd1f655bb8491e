"""The model's webhook door: deliveries to a replica's listener, valid, replayed, forged or signed
by another adapter (docs/webhooks.md). What each may answer is asserted here; what it may settle is
left to the machine's invariants, checked after the step."""

from __future__ import annotations

import uuid
from typing import Any

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from tests.model import calls
from tests.model import world as w
from tests.model.expect import Logical

KINDS = ("valid", "replayed", "forged", "other_adapter")
Delivered = tuple[str, bytes]  # (route, body) of the last event a listener took


def intent_of(world: w.World, action_id: str) -> dict[str, Any] | None:
    """The provider's newest payment intent for the action, or None."""
    found = [i for i in world.intents() if (i.get("metadata") or {}).get(ACTION_METADATA_KEY) == action_id]
    return found[-1] if found else None


def deliver(world: w.World, logical: Logical, kind: str, via: int, last: Delivered | None) -> Delivered | None:
    """Delivers one webhook of `kind` about `logical`'s action; answers the last event taken."""
    assert logical.action_id
    adapter = w.TOOL_ADAPTER[logical.key.tool]
    other = "stripe_b" if adapter == "stripe" else "stripe"
    port = world.replica(via).webhook_port
    intent = intent_of(world, logical.action_id)
    event_id = f"evt_{uuid.uuid4().hex[:20]}"
    if kind == "replayed":
        if last is None:
            return last
        route, body = last
        status, answer = world.run(calls.deliver(world.http, port, route, body, w.SECRETS[route]))
        # An applied id is refused; one about an action settled since is `ignored`; one that
        # changed nothing was not kept and is judged again from a read (docs/webhooks.md).
        if status == 400:
            assert answer.get("error") == "replayed", answer
        else:
            assert status in (200, 503), (status, answer)
        return last
    if kind == "valid":
        if intent is None or intent.get("status") != "succeeded":
            return last
        body = calls.event("payment_intent.succeeded", intent, event_id)
        status, answer = world.run(calls.deliver(world.http, port, adapter, body, w.SECRETS[adapter]))
        # 503: the action is leased right now (a drive is in flight); the provider retries.
        assert status in (200, 503), (status, answer)
        return (adapter, body) if status == 200 else last
    # A lie: the effect did not happen (or did, and "failed"): forged, or signed by another adapter.
    if intent is None:
        lie = {
            "id": f"pi_{uuid.uuid4().hex[:24]}",
            "object": "payment_intent",
            "status": "succeeded",
            "amount": logical.amount,
            "currency": "usd",
            "customer": "cus_model",
            "metadata": {ACTION_METADATA_KEY: logical.action_id},
        }
        body = calls.event("payment_intent.succeeded", lie, event_id)
    else:
        body = calls.event("payment_intent.payment_failed", {**intent, "status": "requires_payment_method"}, event_id)
    route, secret = (adapter, "whsec_attacker") if kind == "forged" else (other, w.SECRETS[other])
    status, answer = world.run(calls.deliver(world.http, port, route, body, secret))
    assert status < 500, (status, answer)
    if kind == "forged":
        assert (status, answer.get("error")) == (400, "forged"), (status, answer)
    return last
