"""Stripe's test payment-method tokens and the PaymentMethod objects Stripe makes of them.

A token such as `pm_card_visa` is an alias: confirming an intent with it makes a new PaymentMethod
(`pm_` and a random id) of the test card behind it, and that object (billing details, card, created,
livemode) is what Stripe's answers carry: the intent's `payment_method` id, and on a decline the
`error.payment_method` and `last_payment_error.payment_method` objects (Stripe's spec requires
`billing_details`, `created`, `id`, `livemode`, `object`, `type`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Card:
    brand: str
    last4: str
    funding: str = "credit"
    # A decline: (error code, decline code)
    declines: tuple[str, str] | None = None


# Stripe's documented test cards behind each token (https://docs.stripe.com/testing).
TEST_CARDS: dict[str, Card] = {
    "pm_card_visa": Card("visa", "4242"),
    "pm_card_mastercard": Card("mastercard", "4444"),
    "pm_card_amex": Card("amex", "8431"),
    "pm_card_chargeDeclined": Card("visa", "0002", declines=("card_declined", "generic_decline")),
    "pm_card_chargeDeclinedInsufficientFunds": Card("visa", "9995", declines=("card_declined", "insufficient_funds")),
    "pm_card_chargeDeclinedExpiredCard": Card("visa", "0069", declines=("expired_card", "expired_card")),
}


def payment_method(token: str, now: float) -> dict[str, Any]:
    """The PaymentMethod Stripe creates from a test token, in the shape its API answers."""
    card = TEST_CARDS[token]
    year = datetime.fromtimestamp(now, UTC).year
    address = dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state"))
    return {
        "id": f"pm_{secrets.token_hex(12)}",
        "object": "payment_method",
        "billing_details": {"address": address, "email": None, "name": None, "phone": None},
        "card": {
            "brand": card.brand,
            "checks": {"address_line1_check": None, "address_postal_code_check": None, "cvc_check": None},
            "country": "US",
            "exp_month": 12,
            "exp_year": year + 1,
            "fingerprint": secrets.token_hex(8),
            "funding": card.funding,
            "generated_from": None,
            "last4": card.last4,
            "networks": {"available": [card.brand], "preferred": None},
            "three_d_secure_usage": {"supported": True},
            "wallet": None,
        },
        "created": int(now),
        "customer": None,
        "livemode": False,
        "metadata": {},
        "type": "card",
    }
