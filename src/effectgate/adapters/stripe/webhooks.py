"""Stripe's signed events: `Stripe-Signature` verified by the SDK itself, mapped to actions.

The signing secret (`webhook_secret_env` / `webhook_secret_file`) may hold several secrets
separated by commas or whitespace: during a rotation Stripe signs with both the old and the new
one, and a delivery is genuine when any of them verifies (`WebhookSignature.verify_header`, with
the configured tolerance). An event's action comes from the `effectgate_action_id` metadata the
adapter writes on each PaymentIntent; a charge or a dispute names its PaymentIntent, which is
retrieved (a read, never a write) when the object carries no metadata of its own.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import stripe

from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected

SIGNATURE_HEADER = "stripe-signature"
KINDS = {
    "payment_intent.succeeded": EventKind.SUCCEEDED,
    "payment_intent.payment_failed": EventKind.FAILED,
    "payment_intent.canceled": EventKind.CANCELED,
    "charge.refunded": EventKind.REFUNDED,
    "charge.dispute.created": EventKind.DISPUTED,
}
_SAFE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
# Finds a PaymentIntent's action id: (PaymentIntent id) -> action id or "".
Resolver = Callable[[str], Awaitable[str]]


def split_secrets(value: str) -> list[str]:
    return [s for s in re.split(r"[\s,]+", value) if s]


def _safe(value: object) -> str:
    text = "" if value is None else str(value)
    return text if _SAFE.fullmatch(text) else ""


def verify(body: bytes, headers: Mapping[str, str], secrets: list[str], tolerance: float) -> stripe.Event:
    """The event, if one of `secrets` signed `body` within `tolerance` seconds; else WebhookRejected."""
    header = headers.get(SIGNATURE_HEADER)
    if not header:
        raise WebhookRejected("forged", "no Stripe-Signature header")
    try:
        body.decode("utf-8")  # the SDK decodes it to check the signature
    except UnicodeDecodeError:
        raise WebhookRejected("malformed", "the body is not UTF-8") from None
    stale = False
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(body, header, secret, int(tolerance))
        except stripe.SignatureVerificationError as exc:
            stale = stale or "tolerance" in str(exc).lower()
            continue
        break
    else:
        if stale:
            raise WebhookRejected("stale", "signed outside the tolerance window")
        raise WebhookRejected("forged", "no configured secret signed this payload")
    # The SDK refuses only the past; a time ahead of ours by more than the tolerance is refused
    # alike (a captured body re-signed ahead would otherwise stay replayable for that long).
    if _signed_at(header) > time.time() + tolerance:
        raise WebhookRejected("stale", "signed in the future, beyond the tolerance window")
    try:
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("data"), dict):
            raise ValueError("not an event")
        return stripe.Event.construct_from(data, stripe.api_key)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than a parser goes
        raise WebhookRejected("malformed", "the signed payload is not a Stripe event") from None


def _signed_at(header: str) -> float:
    """The `t=` of a Stripe-Signature header (verified already), 0 when unreadable."""
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            return float(value)
    return 0.0


def _field(obj: Any, name: str) -> Any:
    """A field of a StripeObject (indexed by key, no `.get`), None when absent, null, or when
    `obj` is no object at all (a signed body may hold anything)."""
    if not isinstance(obj, dict | stripe.StripeObject):
        return None
    return obj[name] if name in obj else None  # noqa: SIM401 - no .get on a StripeObject


def _metadata_action(obj: Any, key: str) -> str:
    return _safe(_field(_field(obj, "metadata"), key))


async def to_event(event: stripe.Event, key: str, resolve: Resolver) -> ProviderEvent:
    kind = KINDS.get(str(_field(event, "type")), EventKind.OTHER)
    obj = _field(_field(event, "data"), "object")
    if not isinstance(obj, dict | stripe.StripeObject):
        return ProviderEvent(
            event_id=_safe(_field(event, "id")), kind=EventKind.OTHER, type=_safe(_field(event, "type")), action_id=""
        )
    object_id = _safe(_field(obj, "id"))
    detail: dict[str, Any] = {}
    action = _metadata_action(obj, key)
    intent_id = object_id
    if kind in (EventKind.REFUNDED, EventKind.DISPUTED):
        intent_id = _safe(_field(obj, "payment_intent"))
        if kind is EventKind.REFUNDED:
            detail = {
                "charge": object_id,
                "amount_refunded": _field(obj, "amount_refunded"),
                "currency": _field(obj, "currency"),
            }
        else:
            detail = {"dispute": object_id, "amount": _field(obj, "amount"), "reason": _safe(_field(obj, "reason"))}
        if not action and intent_id:
            action = await resolve(intent_id)
    return ProviderEvent(
        event_id=_safe(_field(event, "id")),
        kind=kind,
        type=_safe(_field(event, "type")),
        action_id=action,
        object_id=intent_id,
        detail=detail,
        raw=obj,
    )
