"""Square's signed events: `x-square-hmacsha256-signature` verified, mapped to actions.

Square signs the notification URL followed by the raw body: the header is the base64 HMAC-SHA256
of `notification_url + body` under the subscription's signature key. The URL is part of what is
signed, so the adapter needs it exactly as the subscription names it (`webhook_url`), whatever
address the gateway's listener has behind a proxy. Several keys may be configured (comma or
whitespace separated) while one is being replaced; a delivery is genuine when any verifies.

Square's signature carries no time of its own, but the signed body does: the event's
`created_at`. Square retries an undelivered event for up to 24 hours with the same body, then
discards it, so an event created longer ago than the tolerance (`webhook_tolerance`, default 25 h:
Square's 24 h and an hour of slack) is refused `stale`, and so is one created more than
`FUTURE_SKEW` ahead of our clock (no genuine event comes from the future); an event without a
readable `created_at` is `malformed`. Within the window, a captured delivery sent again is
refused by its event id (the gateway applies each id once).

Events read: `payment.created` / `payment.updated` (an outcome once the payment is `COMPLETED`,
`FAILED` or `CANCELED`; the action is its `reference_id`, without a bypass generation's `-g<N>`),
`refund.created` / `refund.updated` (noted once the refund is `COMPLETED`) and `dispute.created`,
whose payment is retrieved (a read, never a write) to find its `reference_id`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected
from effectgate.adapters.square.wire import action_of_reference, safe_id, timestamp

SIGNATURE_HEADER = "x-square-hmacsha256-signature"
# Square retries an undelivered event for up to 24 hours; an hour more for clocks and queues.
DEFAULT_TOLERANCE = 25 * 3600.0
# How far ahead of our clock an event's `created_at` may be (the two clocks differ a little).
FUTURE_SKEW = 300.0
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


def verify(
    body: bytes,
    headers: Mapping[str, str],
    keys: list[str],
    notification_url: str,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """The event, if one of `keys` signed `body` for `notification_url` and it was created within
    `tolerance` seconds before `now` (not more than `FUTURE_SKEW` after); else WebhookRejected."""
    header = headers.get(SIGNATURE_HEADER, "")
    if not header:
        raise WebhookRejected("forged", "no x-square-hmacsha256-signature header")
    if not any(hmac.compare_digest(signature(body, key, notification_url), header) for key in keys):
        raise WebhookRejected("forged", "no configured signature key signed this payload for this URL")
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        raise WebhookRejected("malformed", "the signed payload is not a Square event")
    created = timestamp(event.get("created_at")) if isinstance(event.get("created_at"), str) else 0.0
    if not created:
        raise WebhookRejected("malformed", "the event has no readable created_at")
    at = time.time() if now is None else now
    if created < at - tolerance:
        raise WebhookRejected("stale", "created before the tolerance window (Square retries for 24 hours)")
    if created > at + FUTURE_SKEW:
        raise WebhookRejected("stale", "created in the future, beyond the allowed clock skew")
    return event


def _dict(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else {} (optional fields come absent, null, or odd)."""
    return value if isinstance(value, dict) else {}


def _object(event: Mapping[str, Any], name: str) -> dict[str, Any]:
    return _dict(_dict(_dict(event.get("data")).get("object")).get(name))


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
        action = action_of_reference(safe_id(payment.get("reference_id")))
        return ProviderEvent(event_id, kind, type_, action, safe_id(payment.get("id")), raw=payment)
    if type_ in _REFUND_EVENTS:
        refund = _object(event, "refund")
        payment_id = safe_id(refund.get("payment_id"))
        if refund.get("status") != "COMPLETED" or not payment_id:
            return ProviderEvent(event_id, EventKind.OTHER, type_, "", payment_id)
        money = _dict(refund.get("amount_money"))
        detail = {"refund": safe_id(refund.get("id")), "amount_refunded": money.get("amount")}
        detail["currency"] = str(money.get("currency") or "").lower()
        return ProviderEvent(event_id, EventKind.REFUNDED, type_, await resolve(payment_id), payment_id, detail)
    if type_ == "dispute.created":
        dispute = _object(event, "dispute")
        payment_id = safe_id(_dict(dispute.get("disputed_payment")).get("payment_id"))
        money = _dict(dispute.get("amount_money"))
        reason = str(dispute.get("reason") or "")
        detail = {"dispute": safe_id(dispute.get("id")), "amount": money.get("amount")}
        detail["reason"] = reason if _REASON.fullmatch(reason) else ""
        action = await resolve(payment_id) if payment_id else ""
        return ProviderEvent(event_id, EventKind.DISPUTED, type_, action, payment_id, detail)
    return ProviderEvent(event_id, EventKind.OTHER, type_, "", "")
