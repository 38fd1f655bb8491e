"""The adapters' judges take the providers' documented shapes with optional fields absent or null
(a failed 3-D Secure check has no `decline_code`, a canceled intent no `last_payment_error`, a
Square payment may come without `card_details` or `customer_id`): a table of shapes per provider,
each judged without an exception, and to the outcome it proves. Unit tests of one function each
(the read-back judge, the event reader); the end-to-end paths are in test_webhook_binding.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import stripe

from effectgate.adapters.base import ActionCall, Outcome
from effectgate.adapters.capabilities import EventKind
from effectgate.adapters.square import webhooks as square_hooks
from effectgate.adapters.square.adapter import SquareAdapter
from effectgate.adapters.stripe import webhooks as stripe_hooks
from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY, StripeAdapter
from effectgate.tools.v1.tools_pb2 import ChargeCard

ACTION = "act_judged"
CHARGE = ChargeCard(customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_visa")
CALL = ActionCall(ACTION, "key", CHARGE, "order:1", "charge_card", "acme")

_INTENT: dict[str, Any] = {
    "id": "pi_1",
    "object": "payment_intent",
    "amount": 1000,
    "currency": "usd",
    "customer": "cus_42",
    "created": 1,
    "metadata": {ACTION_METADATA_KEY: ACTION},
    "status": "succeeded",
}
FAILED_3DS = {"type": "card_error", "code": "payment_intent_authentication_failure"}
STRIPE_SHAPES: list[tuple[str, dict[str, Any], Outcome]] = [
    ("succeeded", {}, Outcome.CONFIRMED),
    ("customer expanded", {"customer": {"id": "cus_42", "object": "customer"}}, Outcome.CONFIRMED),
    ("customer null", {"customer": None}, Outcome.UNKNOWN),  # differs from the payload's
    (
        "failed, no decline_code",
        {"status": "requires_payment_method", "last_payment_error": FAILED_3DS},
        Outcome.NOT_FOUND,
    ),
    ("failed, error null", {"status": "requires_payment_method", "last_payment_error": None}, Outcome.NOT_FOUND),
    ("failed, error absent", {"status": "requires_payment_method"}, Outcome.NOT_FOUND),
    (
        "failed, decline_code null",
        {"status": "requires_payment_method", "last_payment_error": {"code": "card_declined", "decline_code": None}},
        Outcome.NOT_FOUND,
    ),
    ("canceled, no charges", {"status": "canceled", "charges": None, "latest_charge": None}, Outcome.NOT_FOUND),
    ("processing", {"status": "processing"}, Outcome.UNKNOWN),
    ("metadata null", {"metadata": None}, Outcome.UNKNOWN),  # another action's, as far as we can tell
    ("created absent", {"created": None}, Outcome.CONFIRMED),
    ("amount differs", {"amount": 999}, Outcome.UNKNOWN),
    ("currency null", {"currency": None}, Outcome.UNKNOWN),
]


@pytest.fixture
async def stripe_adapter() -> AsyncIterator[StripeAdapter]:
    adapter = StripeAdapter("stripe", api_key="sk_test_judge")
    yield adapter
    await adapter.close()


@pytest.mark.parametrize(("name", "changes", "outcome"), STRIPE_SHAPES, ids=[s[0] for s in STRIPE_SHAPES])
async def test_stripe_judge_takes_every_documented_shape(
    stripe_adapter: StripeAdapter, name: str, changes: dict[str, Any], outcome: Outcome
) -> None:
    shape = {k: v for k, v in {**_INTENT, **changes}.items() if not (k == "created" and v is None)}
    intent = stripe.PaymentIntent.construct_from(shape, "sk_test_judge")
    observed = stripe_adapter._judge(CALL, CHARGE, [intent], "retrieve", "")
    assert observed.outcome is outcome, (name, observed)
    if outcome is Outcome.NOT_FOUND:
        assert observed.evidence["found"] == 1, "the intent was read: a proof that no money moved"


async def _no_resolver(intent_id: str) -> str:
    return ""


STRIPE_EVENTS: list[tuple[str, dict[str, Any], EventKind, str]] = [
    ("succeeded", {"type": "payment_intent.succeeded", "data": {"object": _INTENT}}, EventKind.SUCCEEDED, ACTION),
    (
        "failed 3DS",
        {
            "type": "payment_intent.payment_failed",
            "data": {"object": {**_INTENT, "status": "requires_payment_method", "last_payment_error": FAILED_3DS}},
        },
        EventKind.FAILED,
        ACTION,
    ),
    (
        "metadata absent",
        {"type": "payment_intent.succeeded", "data": {"object": {"id": "pi_2", "object": "payment_intent"}}},
        EventKind.SUCCEEDED,
        "",
    ),
    ("object absent", {"type": "payment_intent.succeeded", "data": {}}, EventKind.OTHER, ""),
    ("object a list", {"type": "payment_intent.succeeded", "data": {"object": [1, 2]}}, EventKind.OTHER, ""),
    (
        "refund, no payment_intent",
        {"type": "charge.refunded", "data": {"object": {"id": "ch_1", "object": "charge", "payment_intent": None}}},
        EventKind.REFUNDED,
        "",
    ),
    (
        "dispute, reason null",
        {
            "type": "charge.dispute.created",
            "data": {"object": {"id": "dp_1", "object": "dispute", "payment_intent": "pi_1", "reason": None}},
        },
        EventKind.DISPUTED,
        "",
    ),
    (
        "type unknown",
        {"type": "customer.created", "data": {"object": {"id": "cus_1", "object": "customer"}}},
        EventKind.OTHER,
        "",
    ),
]


@pytest.mark.parametrize(("name", "event", "kind", "action"), STRIPE_EVENTS, ids=[s[0] for s in STRIPE_EVENTS])
async def test_stripe_events_of_every_documented_shape(
    name: str, event: dict[str, Any], kind: EventKind, action: str
) -> None:
    parsed = stripe.Event.construct_from({"id": "evt_1", "object": "event", **event}, "sk_test_judge")
    found = await stripe_hooks.to_event(parsed, ACTION_METADATA_KEY, _no_resolver)
    assert (found.event_id, found.kind, found.action_id) == ("evt_1", kind, action), name


_PAYMENT: dict[str, Any] = {
    "id": "sq_1",
    "status": "COMPLETED",
    "reference_id": ACTION,
    "amount_money": {"amount": 1000, "currency": "USD"},
    "customer_id": "cus_42",
    "created_at": "2026-01-01T00:00:00Z",
    "card_details": {"status": "CAPTURED", "card": {"card_brand": "VISA"}},
}
SQUARE_SHAPES: list[tuple[str, dict[str, Any], Outcome]] = [
    ("completed", {}, Outcome.CONFIRMED),
    ("card_details absent", {"card_details": None}, Outcome.CONFIRMED),
    ("created_at absent", {"created_at": None}, Outcome.CONFIRMED),
    ("failed, card_details null", {"status": "FAILED", "card_details": None}, Outcome.NOT_FOUND),
    ("failed, card errors absent", {"status": "FAILED", "card_details": {"status": "FAILED"}}, Outcome.NOT_FOUND),
    ("canceled", {"status": "CANCELED"}, Outcome.NOT_FOUND),
    ("approved", {"status": "APPROVED"}, Outcome.UNKNOWN),
    ("amount_money null", {"amount_money": None}, Outcome.UNKNOWN),
    ("amount_money not an object", {"amount_money": "1000"}, Outcome.UNKNOWN),
    ("customer_id absent", {"customer_id": None}, Outcome.UNKNOWN),  # differs from the payload's
    ("reference_id absent", {"reference_id": None}, Outcome.UNKNOWN),
]


@pytest.fixture
async def square_adapter(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SquareAdapter]:
    monkeypatch.setenv("EG_TEST_SQUARE_JUDGE", "EAAA_judge")
    adapter = SquareAdapter.from_settings("square", {"access_token_env": "EG_TEST_SQUARE_JUDGE"})
    yield adapter
    await adapter.close()


@pytest.mark.parametrize(("name", "changes", "outcome"), SQUARE_SHAPES, ids=[s[0] for s in SQUARE_SHAPES])
async def test_square_judge_takes_every_documented_shape(
    square_adapter: SquareAdapter, name: str, changes: dict[str, Any], outcome: Outcome
) -> None:
    observed = square_adapter.judge(CALL, CHARGE, [{**_PAYMENT, **changes}], "get")
    assert observed.outcome is outcome, (name, observed)
    if outcome is Outcome.NOT_FOUND:
        assert observed.evidence["found"] == 1, "the payment was read: a proof that no money moved"


SQUARE_EVENTS: list[tuple[str, dict[str, Any], EventKind, str]] = [
    (
        "payment completed",
        {"type": "payment.updated", "data": {"object": {"payment": _PAYMENT}}},
        EventKind.SUCCEEDED,
        ACTION,
    ),
    (
        "payment failed, no card_details",
        {
            "type": "payment.updated",
            "data": {"object": {"payment": {**_PAYMENT, "status": "FAILED", "card_details": None}}},
        },
        EventKind.FAILED,
        ACTION,
    ),
    ("object null", {"type": "payment.updated", "data": {"object": None}}, EventKind.OTHER, ""),
    ("object a list", {"type": "payment.updated", "data": {"object": ["x"]}}, EventKind.OTHER, ""),
    (
        "refund pending",
        {
            "type": "refund.updated",
            "data": {"object": {"refund": {"id": "r1", "status": "PENDING", "payment_id": "sq_1"}}},
        },
        EventKind.OTHER,
        "",
    ),
    (
        "refund, amount_money null",
        {
            "type": "refund.updated",
            "data": {
                "object": {"refund": {"id": "r1", "status": "COMPLETED", "payment_id": "sq_1", "amount_money": None}}
            },
        },
        EventKind.REFUNDED,
        "",
    ),
    (
        "dispute, disputed_payment a string",
        {"type": "dispute.created", "data": {"object": {"dispute": {"id": "d1", "disputed_payment": "sq_1"}}}},
        EventKind.DISPUTED,
        "",
    ),
    (
        "dispute, nothing optional",
        {"type": "dispute.created", "data": {"object": {"dispute": {}}}},
        EventKind.DISPUTED,
        "",
    ),
]


@pytest.mark.parametrize(("name", "event", "kind", "action"), SQUARE_EVENTS, ids=[s[0] for s in SQUARE_EVENTS])
async def test_square_events_of_every_documented_shape(
    name: str, event: dict[str, Any], kind: EventKind, action: str
) -> None:
    found = await square_hooks.to_event({"event_id": "e-1", **event}, _no_resolver)
    assert (found.event_id, found.kind, found.action_id) == ("e-1", kind, action), name
