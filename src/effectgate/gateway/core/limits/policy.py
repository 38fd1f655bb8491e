"""A tool's limits, compiled once: payload bounds, what a new action reserves, its action id
under `unique = "scope"`, and whether the approval rules hold it (docs/limits.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from effectgate.gateway.config import ToolLimits, Unique
from effectgate.gateway.core.limits.rules import USAGE_VARIABLES, Rule, RuleError
from effectgate.gateway.model import (
    MAX_COUNT,
    ActionIdentity,
    Bucket,
    BudgetExceeded,
    InvalidRequest,
    Reservation,
    keys,
)

# Bidirectional control characters (the "Trojan Source" set): text that reads one way and runs another.
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_INTEGERS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
}
# The currency of the rows that count effects of every currency.
ALL = "*"
# (currency, bucket, effects, spent): a store's counter rows (`Store.usage`).
UsageRow = tuple[str, str, int, int]


class PolicyError(ValueError):
    """A limit the tool's payload cannot support; one line naming the key."""


class ToolPolicy:
    def __init__(self, tool: str, limits: ToolLimits, payload_type: type[Message]) -> None:
        self.tool = tool
        self.limits = limits
        fields = {f.name: f for f in payload_type.DESCRIPTOR.fields}
        name = payload_type.DESCRIPTOR.full_name
        # The amount and currency fields are read when the payload has them (rules may use them)
        # and must exist when a budget or a bound needs them.
        amount = fields.get(limits.amount_field)
        self._amount_field = limits.amount_field if amount is not None and amount.type in _INTEGERS else ""
        if not self._amount_field and (limits.budget or limits.run_budget or limits.max_amount is not None):
            raise PolicyError(f"amount_field: {limits.amount_field!r} is not an integer field of {name}")
        currency = fields.get(limits.currency_field)
        self._currency_field = limits.currency_field if currency is not None else ""
        if limits.currency_field and not self._currency_field and (limits.budget or limits.run_budget):
            raise PolicyError(f"currency_field: {limits.currency_field!r} is not a field of {name}")
        for name in limits.no_bidi:
            found = fields.get(name)
            if found is None or found.type != FieldDescriptor.TYPE_STRING:
                raise PolicyError(f"no_bidi: {name!r} is not a text field of {payload_type.DESCRIPTOR.full_name}")
        try:
            self.rules = tuple(Rule(source, fields) for source in limits.require_approval_when)
        except RuleError as exc:
            raise PolicyError(f"require_approval_when: {exc}") from None
        # Rules that read the counters are decided in the claim's transaction (`ruling`); the
        # others, on the payload alone, before it.
        self.counter_rules = tuple(rule for rule in self.rules if rule.names & USAGE_VARIABLES)
        self.payload_rules = tuple(rule for rule in self.rules if not rule.names & USAGE_VARIABLES)
        self.counted = limits.counted

    # -- before anything is stored ---------------------------------------------------------------

    def check(self, identity: ActionIdentity, payload: Message) -> None:
        """The payload bounds: INVALID_ARGUMENT naming each field out of bounds (and each text
        field a store cannot hold, whatever the tool's limits)."""
        limits = self.limits
        violations = unstorable(payload, "payload.")
        if (limits.scope == "required" or limits.unique is Unique.SCOPE) and not identity.scope.strip():
            violations.append(("scope", f"tool {self.tool!r} needs a scope (the business object the effect is about)"))
        if limits.max_amount is not None:
            amount = self.amount(payload)
            if amount > limits.max_amount or amount < 0:
                violations.append(
                    (f"payload.{self._amount_field}", f"{amount} is out of bounds (0 to {limits.max_amount})")
                )
        for name in limits.no_bidi:
            if BIDI.search(getattr(payload, name)):
                violations.append((f"payload.{name}", "contains bidirectional control characters"))
        counted = self.amount(payload) if limits.budget or limits.run_budget else 0
        if counted < 0:  # a negative charge would give budget back
            violations.append((f"payload.{self._amount_field}", f"{counted} is negative; a budget counts amounts >= 0"))
        if violations:
            raise InvalidRequest(violations)
        if counted > MAX_COUNT:
            raise self._past_count(counted, self.currency(payload))

    def _past_count(self, amount: int, currency: str) -> BudgetExceeded:
        """An amount no budget can ever hold (counters stop at MAX_COUNT): refused before anything
        is stored, and no limit grant lets it through."""
        return BudgetExceeded(
            f"tool {self.tool!r}: an amount of {amount} {currency} is more than any budget counts "
            f"({MAX_COUNT}, the most a counter holds); no limit grant lets it through; nothing was sent",
            {
                "tool": self.tool,
                "limit": "max_count",
                "max_count": str(MAX_COUNT),
                "currency": currency,
                "amount": str(amount),
            },
        )

    def action_id(self, identity: ActionIdentity) -> str:
        if self.limits.unique is Unique.SCOPE:
            return keys.scope_action_id(identity.tenant, identity.tool, identity.scope)
        return identity.action_id

    def amount(self, payload: Message) -> int:
        return int(getattr(payload, self._amount_field)) if self._amount_field else 0

    def currency(self, payload: Message) -> str:
        return str(getattr(payload, self._currency_field)).lower() if self._currency_field else ""

    # -- the reservation --------------------------------------------------------------------------

    def reservation(
        self, identity: ActionIdentity, payload: Message, now: float, *, forced: bool = False
    ) -> Reservation | None:
        """What a new action (or a re-dispatch, at `now`) adds to its buckets; None when uncounted."""
        if not self.counted:
            return None
        limits = self.limits
        currency = self.currency(payload)
        amount = self.amount(payload) if limits.budget or limits.run_budget else 0
        start = math.floor(now / limits.window) * limits.window
        buckets: list[Bucket] = []
        for key, max_effects, budget, names, resets_at in (
            (f"w:{start:.0f}", limits.max_effects, limits.budget, ("max_effects", "budget"), start + limits.window),
            (
                f"r:{identity.run_id}",
                limits.run_max_effects,
                limits.run_budget,
                ("run_max_effects", "run_budget"),
                None,
            ),
        ):
            if max_effects is not None:  # effects of every currency, in rows of their own
                buckets.append(Bucket(ALL, key, 0, max_effects, None, names[0], names[1], resets_at))
            if budget:  # a currency with no budget has none to spend
                buckets.append(
                    Bucket(currency, key, amount, None, budget.get(currency, 0), names[0], names[1], resets_at)
                )
        return Reservation(identity.tenant, identity.tool, currency, amount, tuple(buckets), forced, now)

    # -- approval ---------------------------------------------------------------------------------

    def needs_approval(
        self,
        identity: ActionIdentity,
        payload: Message,
        now: float,
        usage: Sequence[UsageRow] = (),
        *,
        rules: Sequence[Rule] | None = None,
    ) -> bool:
        """Whether any of `rules` (all the tool's by default) holds the action for a person."""
        chosen = self.rules if rules is None else rules
        if not chosen:
            return False
        activation = {
            "amount": self.amount(payload),
            "currency": self.currency(payload),
            "scope": identity.scope,
            "run_id": identity.run_id,
            "step_id": identity.step_id,
            "agent": identity.agent,
            "payload": _fields(payload),
            **self._left(identity, payload, now, usage),
        }
        return any(rule.holds(activation) for rule in chosen)

    def usage_keys(self, identity: ActionIdentity, payload: Message, now: float) -> tuple[tuple[str, str], ...]:
        """The counter rows the rules' variables read: (currency, bucket)."""
        currency = self.currency(payload)
        window = f"w:{math.floor(now / self.limits.window) * self.limits.window:.0f}"
        run = f"r:{identity.run_id}"
        return ((ALL, window), (currency, window), (ALL, run), (currency, run))

    def _left(
        self, identity: ActionIdentity, payload: Message, now: float, usage: Sequence[UsageRow]
    ) -> dict[str, int]:
        """What is left now (a large number when a limit is not set)."""
        limits = self.limits
        currency = self.currency(payload)
        window = f"w:{math.floor(now / limits.window) * limits.window:.0f}"
        run = f"r:{identity.run_id}"
        counters = {(c, b): (e, s) for c, b, e, s in usage}
        effects, spent = counters.get((ALL, window), (0, 0))[0], counters.get((currency, window), (0, 0))[1]
        run_effects, run_spent = counters.get((ALL, run), (0, 0))[0], counters.get((currency, run), (0, 0))[1]
        unlimited = 1 << 62
        budget = limits.budget.get(currency, 0) if limits.budget else unlimited
        max_effects = limits.max_effects if limits.max_effects is not None else unlimited
        return {
            "budget_left": max(budget - spent, 0),
            "effects_left": max(max_effects - effects, 0),
            "run_spent": run_spent,
            "run_effects": run_effects,
        }


def _fields(payload: Message) -> dict[str, object]:
    out: dict[str, object] = {}
    for field in payload.DESCRIPTOR.fields:
        value = getattr(payload, field.name)
        if isinstance(value, str | int | float | bool):
            out[field.name] = value
    return out


# -- text no store can hold ----------------------------------------------------------------------
#
# Text a store cannot hold, found in any message: refused at the edge, the same on every store.
#
# PostgreSQL text cannot hold NUL (SQLite can); a value that one store keeps and another refuses
# would make the same call succeed or fail by backend.
# So every text field of every request (and of an Execute payload) is checked before anything is
# read or stored, and each bad one is named in a field violation (INVALID_ARGUMENT).

# NUL is the one character PostgreSQL text cannot hold that a protobuf string can carry (a
# parsed string is valid UTF-8: no lone surrogates); `in` is the fastest test of a str.
_NUL = "\x00"
_STRING, _MESSAGE = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
_WHY = "contains a NUL (a character the store cannot keep as text)"


def unstorable(message: Message, prefix: str = "") -> list[tuple[str, str]]:
    """(field path, why) for each text value of `message`, nested ones included, that a store
    cannot hold. The contents of an `Any` are the owner's to check (its type is known later).
    Names are made only for a field found bad: this runs on every request."""
    found: list[tuple[str, str]] = []
    for field, value in message.ListFields():
        kind = field.type
        if kind == _STRING:
            if not field.is_repeated:
                if _NUL in value:
                    found.append((prefix + field.name, _WHY))
            else:
                found.extend((f"{prefix}{field.name}[{i}]", _WHY) for i, v in enumerate(value) if _NUL in v)
        elif kind == _MESSAGE:
            name = prefix + field.name
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    if isinstance(key, str) and _NUL in key:
                        found.append((f"{name}[key]", _WHY))
                    if isinstance(item, str) and _NUL in item:
                        found.append((f"{name}[{key!r}]", _WHY))
                    elif isinstance(item, Message):
                        found.extend(unstorable(item, f"{name}[{key!r}]."))
            elif field.is_repeated:
                for i, item in enumerate(value):
                    found.extend(unstorable(item, f"{name}[{i}]."))
            else:
                found.extend(unstorable(value, name + "."))
    return found


def refuse_unstorable(message: Message, prefix: str = "") -> None:
    """Raises InvalidRequest naming every text field of `message` a store cannot hold."""
    found = unstorable(message, prefix)
    if found:
        raise InvalidRequest(found)
