"""What a PaymentIntent says about an action: the metadata marks that tie it to its action and its
generation, its result and receipt, and the payload fields it does not match."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stripe

from effectgate.adapters.base import ActionCall, Receipt
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.secrets import resolved_secrets
from effectgate.tools.v1.tools_pb2 import ChargeCard

# The PaymentIntent metadata key that ties an intent to its action (verify searches on it).
ACTION_METADATA_KEY = "effectgate_action_id"
# The metadata key holding the provider key of the generation that made the intent: every
# generation of an action (a new one after each operator-granted bypass) shares the action id, so
# this is what tells one generation's charge from another's.
KEY_METADATA_KEY = "effectgate_provider_key"


def _customer_id(customer: Any) -> str:
    """A PaymentIntent's `customer`: an id, or the expanded customer whose id it is. The
    expanded customer is a JSON object (create's raw answer) or a `StripeObject` (verify's
    reads); both are indexed by key, and a `StripeObject` has no `.get`."""
    if customer is None or isinstance(customer, str):
        return customer or ""
    return str(_get(customer, "id") or "")


def _result(intent: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "status": intent.get("status"),
        "amount": intent.get("amount"),
        "currency": intent.get("currency"),
        "customer": _customer_id(intent.get("customer")),
    }


def _receipt(intent: Mapping[str, Any], request_id: str) -> Receipt:
    """From a PaymentIntent's JSON. What the provider sent back is stored and returned to agents:
    no configured secret in it."""
    secrets = resolved_secrets()
    return Receipt(
        scrub(str(intent.get("id") or ""), secrets, None),
        scrub(request_id, secrets, None),
        scrub_json(_result(intent), secrets),
    )


def _request_id(obj: stripe.StripeObject) -> str:
    response = obj.last_response
    return (response.request_id or "") if response is not None else ""


def _get(obj: Any, name: str) -> Any:
    """A field of a StripeObject or dict, None when absent or null (a StripeObject has no `.get`
    and raises AttributeError for a field the answer left out)."""
    try:
        return obj[name] if name in obj else None  # noqa: SIM401 - no .get on a StripeObject
    except TypeError:  # not a mapping at all
        return None


def _metadata(intent: stripe.PaymentIntent, key: str) -> str:
    metadata = _get(intent, "metadata")
    value = _get(metadata, key) if metadata else None
    return "" if value is None else str(value)


def _action_of(intent: stripe.PaymentIntent) -> str:
    return _metadata(intent, ACTION_METADATA_KEY)


def _key_of(intent: stripe.PaymentIntent) -> str:
    return _metadata(intent, KEY_METADATA_KEY)


# Why an unmarked intent keeps a later generation in doubt (`_generation_matches`).
_UNMARKED = (
    "a PaymentIntent of this action written before generations were marked may be this generation's: "
    "an operator decides"
)


def _generation_matches(intent: stripe.PaymentIntent, call: ActionCall) -> bool:
    """Whether the intent (already known to be the action's) was made by `call`'s generation.

    An intent carries the provider key of the generation that made it (`KEY_METADATA_KEY`). One
    without it was made before the key was written, by some generation up to the action's current
    one. For generation 0 that can only be generation 0 itself (generations only grow), so it
    counts as its own, exactly as before. For a later generation it is not counted as this
    generation's (it is far more likely the first charge, whose confirmation of a bypass would be a
    false success), and it is not ignored either: if it moved money and nothing marked with this
    generation's key confirms, the read answers UNKNOWN (`_UNMARKED`) instead of NOT_FOUND, because
    it may be this generation's own charge, made before the upgrade and still in doubt, and a
    NOT_FOUND would send the generation again. Only actions sent before the upgrade meet this.
    """
    key = _key_of(intent)
    return key == call.provider_key if key else call.generation == 0


def _metadata_query(action_id: str) -> str:
    escaped = action_id.replace("\\", "\\\\").replace("'", "\\'")
    return f"metadata['{ACTION_METADATA_KEY}']:'{escaped}'"


def _differences(intent: stripe.PaymentIntent, charge: ChargeCard) -> list[str]:
    """The payload fields the intent does not match (amount, currency, customer)."""
    diffs = []
    if _get(intent, "amount") != charge.amount:
        diffs.append("amount")
    if str(_get(intent, "currency") or "").lower() != charge.currency:
        diffs.append("currency")
    if _customer_id(_get(intent, "customer")) != charge.customer:
        diffs.append("customer")
    return diffs
