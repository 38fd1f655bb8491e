"""The `ChargeCard` payload as every payment adapter normalises it (Stripe, Square, your own)."""

from __future__ import annotations

from google.protobuf.message import Message

from effectgate.adapters.base import InvalidPayload
from effectgate.tools.v1.tools_pb2 import ChargeCard


def normalize_charge(payload: Message) -> ChargeCard:
    """Trimmed strings, a lower-case three-letter currency, a positive amount in minor units, a
    customer: the canonical form the fingerprint is taken of. A provider adds its own rules."""
    if not isinstance(payload, ChargeCard):
        raise InvalidPayload("payload", f"expected ChargeCard, got {payload.DESCRIPTOR.full_name}")
    charge = ChargeCard(
        customer=payload.customer.strip(),
        amount=payload.amount,
        currency=payload.currency.strip().lower(),
        payment_method=payload.payment_method.strip(),
        description=payload.description.strip(),
    )
    if not charge.customer:
        raise InvalidPayload("customer", "customer is required")
    if charge.amount <= 0:
        raise InvalidPayload("amount", "amount must be a positive number of minor units")
    if not charge.currency:
        raise InvalidPayload("currency", "currency is required")
    if len(charge.currency) != 3 or not charge.currency.isalpha():
        raise InvalidPayload("currency", "currency must be a three-letter ISO code")
    return charge
