"""Square's signed events: `x-square-hmacsha256-signature` verified, mapped to actions.

Square signs the notification URL followed by the raw body: the header is the base64 HMAC-SHA256
of `notification_url + body` under the subscription's signature key. The URL is part of what is
signed, so the adapter needs it exactly as the subscription names it (`webhook_url`), whatever
address the gateway's listener has behind a proxy. Several keys may be configured (comma or
whitespace separated) while one is being replaced; a delivery is genuine when any verifies.

Square's signature carries no time of its own, and Square retries an undelivered event for days
with the same body: there is no staleness to check; a captured delivery sent again is refused by
its event id (the gateway applies each id once).

Events read: `payment.created` / `payment.updated` (an outcome once the payment is `COMPLETED`,
`FAILED` or `CANCELED`; the action is its `reference_id`), `refund.created` / `refund.updated`
(noted once the refund is `COMPLETED`) and `dispute.created`, whose payment is retrieved (a read,
never a write) to find its `reference_id`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected
from effectgate.adapters.square.wire import safe_id

SIGNATURE_HEADER = "x-square-hmacsha256-signature"
_OUTCOMES = {"COMPLETED": EventKind.SUCCEEDED, "FAILED": EventKind.FAILED, "CANCELED": EventKind.CANCELED}
_PAYMENT_EVENTS = frozenset({"payment.created", "payment.updated"})
_REFUND_EVENTS = frozenset({"refund.created", "refund.updated"})
_TYPE = re.compile(r"[a-z_]{1,64}\.[a-z_]{1,64}")
_REASON = re.compile(r"[A-Z_]{1,64}")
# Finds a payment's action id: (payment id) -> action id or "".
Resolver = Callable[[str], Awaitable[str]]


def split_keys(value: str) -> list[str]:
    return [k for k in re.split(r"[\s,]+", value) if k]


def signature(body: bytes, key: str, notification_url: str) -> str:
    """What Square puts in the header for `body` sent to `notification_url`."""
    mac = hmac.new(key.encode(), notification_url.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def verify(body: bytes, headers: Mapping[str, str], keys: list[str], notification_url: str) -> dict[str, Any]:
    """The event, if one of `keys` signed `body` for `notification_url`; else WebhookRejected."""
    header = headers.get(SIGNATURE_HEADER, "")
    if not header:
        raise WebhookRejected("forged", "no x-square-hmacsha256-signature header")
    if not any(hmac.compare_digest(signature(body, key, notification_url), header) for key in keys):
        raise WebhookRejected("forged", "no configured signature key signed this payload for this URL")
    try:
        event = json.loads(body)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        raise WebhookRejected("malformed", "the signed payload is not a Square event")
    return event


def _object(event: Mapping[str, Any], name: str) -> dict[str, Any]:
    found = (event["data"].get("object") or {}).get(name)
    return found if isinstance(found, dict) else {}


async def to_event(event: Mapping[str, Any], resolve: Resolver) -> ProviderEvent:
    """The verified event as the gateway needs it: its kind, its action, safe details."""
    kind_of = str(event.get("type") or "")
    type_ = kind_of if _TYPE.fullmatch(kind_of) else ""
    event_id = safe_id(event.get("event_id"))
    if not event_id:
        raise WebhookRejected("malformed", "the event has no event_id")
    if type_ in _PAYMENT_EVENTS:
        payment = _object(event, "payment")
        kind = _OUTCOMES.get(str(payment.get("status")), EventKind.OTHER)
        action = safe_id(payment.get("reference_id"))
        return ProviderEvent(event_id, kind, type_, action, safe_id(payment.get("id")), raw=payment)
    if type_ in _REFUND_EVENTS:
        refund = _object(event, "refund")
        payment_id = safe_id(refund.get("payment_id"))
        if refund.get("status") != "COMPLETED" or not payment_id:
            return ProviderEvent(event_id, EventKind.OTHER, type_, "", payment_id)
        money = refund.get("amount_money") or {}
        detail = {"refund": safe_id(refund.get("id")), "amount_refunded": money.get("amount")}
        detail["currency"] = str(money.get("currency") or "").lower()
        return ProviderEvent(event_id, EventKind.REFUNDED, type_, await resolve(payment_id), payment_id, detail)
    if type_ == "dispute.created":
        dispute = _object(event, "dispute")
        payment_id = safe_id((dispute.get("disputed_payment") or {}).get("payment_id"))
        money = dispute.get("amount_money") or {}
        reason = str(dispute.get("reason") or "")
        detail = {"dispute": safe_id(dispute.get("id")), "amount": money.get("amount")}
        detail["reason"] = reason if _REASON.fullmatch(reason) else ""
        action = await resolve(payment_id) if payment_id else ""
        return ProviderEvent(event_id, EventKind.DISPUTED, type_, action, payment_id, detail)
    return ProviderEvent(event_id, EventKind.OTHER, type_, "", "")
