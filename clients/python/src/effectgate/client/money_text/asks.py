"""What an action asks for, in a person's words, read from its payload as GetAction answers it
to operators and observers (JSON-like values, sensitive fields masked): the amount and its
currency, to whom (a customer, a recipient) and the description. Shared by the console's pages
and the CLI's tables; a payload without these fields asks for nothing this can name.

The payload crossed the wire as a google.protobuf.Struct: int64 fields arrive as strings (proto
JSON), other numbers as doubles. `typed` gives integers back their type for display, so a
person reads `4200`, never `4200.0`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effectgate.client.money_text.money import Money

_INTEGER = re.compile(r"-?[0-9]{1,19}")
# Field names, in the order they are tried: the built-in tools' (ChargeCard, SendEmail), then
# what HTTP and custom tools commonly call them.
AMOUNT_FIELDS = ("amount", "amount_minor", "amount_cents")
NESTED_MONEY = ("amount_money", "money")  # Square: {"amount": 4200, "currency": "EUR"}
CURRENCY_FIELDS = ("currency", "currency_code")
PARTY_FIELDS = ("customer", "to", "recipient", "customer_id", "destination", "email", "phone")
ABOUT_FIELDS = ("description", "subject", "statement_descriptor", "memo", "note", "reference")


@dataclass(frozen=True)
class Ask:
    money: Money | None
    party: str  # to whom: the customer or the recipient
    about: str  # the description or the subject


def typed(value: Any) -> Any:
    """JSON-like data with integral doubles back as integers (recursively)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [typed(v) for v in value]
    return value


def typed_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A payload for display: `typed`, and its amounts (an int64 is a string in proto JSON) as
    integers of minor units, at the top level and one level down (Square's `amount_money`)."""
    out: dict[str, Any] = typed(payload)
    for key, value in out.items():
        if key in AMOUNT_FIELDS and minor_units(value) is not None:
            out[key] = minor_units(value)
        elif key in NESTED_MONEY and isinstance(value, dict):
            out[key] = typed_payload(value)
    return out


def minor_units(value: Any) -> int | None:
    """An amount in minor units: an integer, an integral double, or an int64's decimal string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def _first_text(fields: Mapping[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        value = fields.get(name)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return ", ".join(value)
    return ""


def money_of(fields: Mapping[str, Any]) -> Money | None:
    """The amount and currency of a payload, at the top level or one level down (Square)."""
    for name in AMOUNT_FIELDS:
        minor = minor_units(fields.get(name))
        if minor is not None:
            return Money(minor, _first_text(fields, CURRENCY_FIELDS).upper())
    for name in NESTED_MONEY:
        nested = fields.get(name)
        if isinstance(nested, Mapping):
            found = money_of(nested)
            if found is not None:
                return found
    return None


def ask_of(payload: Mapping[str, Any]) -> Ask:
    return Ask(money_of(payload), _first_text(payload, PARTY_FIELDS), _first_text(payload, ABOUT_FIELDS))
