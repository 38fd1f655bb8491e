"""The Stripe adapter (official SDK) against the Stripe simulator on loopback."""

from __future__ import annotations

import asyncio
import secrets
import traceback
from collections.abc import AsyncIterator
from typing import Any

import pytest
import stripe

from effectgate.adapters.base import (
    ActionCall,
    AdapterError,
    AmbiguousError,
    ConfigError,
    DefinitiveError,
    InvalidPayload,
    NoEffectError,
    Outcome,
    Receipt,
)
from effectgate.adapters.stripe.adapter import StripeAdapter, classify
from effectgate.adapters.stripe.intents import _customer_id
from effectgate.tools.v1.tools_pb2 import ChargeCard, SendEmail
from effectgate_lab.simulators.faults import FaultPlan
from effectgate_lab.simulators.stripe_sim import StripeSimulator

# The SDK's HTTPXClient posts its form body with `data=<str>`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

API_KEY = "sk_test_adapter_" + secrets.token_hex(8)
LAG = 0.3


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    server = StripeSimulator(api_key=API_KEY, search_lag=LAG, settle_seconds=0.3)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def build(sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> StripeAdapter:
    monkeypatch.setenv("TEST_STRIPE_KEY", str(settings.pop("key", API_KEY)))
    return StripeAdapter.from_settings(
        "stripe", {"api_base": sim.base_url, "api_key_env": "TEST_STRIPE_KEY", "timeout": 2, **settings}
    )


@pytest.fixture
async def adapter(sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StripeAdapter]:
    built = build(sim, monkeypatch)
    try:
        yield built
    finally:
        await built.close()


def call(
    action: str = "act-1",
    key: str = "key-1",
    receipt: Receipt | None = None,
    **payload: Any,
) -> ActionCall:
    fields: dict[str, Any] = {
        "customer": "cus_42",
        "amount": 2500,
        "currency": "usd",
        "payment_method": "pm_card_visa",
    }
    fields.update(payload)
    return ActionCall(
        action_id=action,
        provider_key=key,
        payload=ChargeCard(**fields),
        scope="customer:cus_42",
        tool="charge_card",
        tenant="t1",
        receipt=receipt,
    )


async def test_execute_creates_one_confirmed_intent(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    first = call(description="  order 7 ")
    receipt = await adapter.execute(first)
    assert receipt.external_id.startswith("pi_") and receipt.provider_request_id.startswith("req_")
    assert receipt.result == {"status": "succeeded", "amount": 2500, "currency": "usd", "customer": "cus_42"}
    [entry] = sim.ledger
    assert entry["id"] == receipt.external_id and entry["idempotency_key"] == "key-1"
    # The action, and the provider key of the generation that made it (a bypass's is another).
    assert entry["metadata"] == {"effectgate_action_id": "act-1", "effectgate_provider_key": "key-1"}
    assert entry["params"]["description"] == "order 7"
    # The same key again: Stripe replays, no second effect.
    assert (await adapter.execute(first)).external_id == receipt.external_id
    assert len(sim.ledger) == 1
    confirmed = await adapter.verify(call(receipt=receipt))
    assert confirmed.outcome is Outcome.CONFIRMED and confirmed.receipt is not None
    assert confirmed.receipt.external_id == receipt.external_id


async def test_decline_is_definitive_and_verifies_not_found(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    declined = call(payment_method="pm_card_chargeDeclined")
    with pytest.raises(DefinitiveError) as caught:
        await adapter.execute(declined)
    assert caught.value.code == "card_declined"
    assert caught.value.details["decline_code"] == "generic_decline"
    assert caught.value.details["payment_intent"].startswith("pi_")
    assert sim.ledger == []
    await asyncio.sleep(LAG + 0.15)
    observed = await adapter.verify(declined)
    assert observed.outcome is Outcome.NOT_FOUND
    assert observed.evidence["declined"] == {"code": "card_declined", "decline_code": "generic_decline"}


async def test_lost_response_is_ambiguous_and_verify_finds_it_after_the_lag(
    sim: StripeSimulator, adapter: StripeAdapter
) -> None:
    sim.injector.script(["drop_after_commit"])
    with pytest.raises(AmbiguousError) as caught:
        await adapter.execute(call())
    assert caught.value.code == "connection_lost"
    assert len(sim.ledger) == 1
    early = await adapter.verify(call())
    assert early.outcome is Outcome.NOT_FOUND  # search lags: the gateway's window covers this
    await asyncio.sleep(LAG + 0.15)
    late = await adapter.verify(call())
    assert late.outcome is Outcome.CONFIRMED and late.receipt is not None
    assert late.receipt.external_id == sim.ledger[0]["id"]
    assert "duplicates" not in late.evidence
    # A retry with the same key gets the stored success, not a second charge.
    assert (await adapter.execute(call())).external_id == sim.ledger[0]["id"]
    assert len(sim.ledger) == 1


async def test_500_after_commit_is_replayed_on_retry(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    sim.injector.script(["error_after_commit"])
    for _ in range(2):
        with pytest.raises(AmbiguousError) as caught:
            await adapter.execute(call())
        assert caught.value.code == "http_500"
    assert len(sim.ledger) == 1
    await asyncio.sleep(LAG + 0.15)
    assert (await adapter.verify(call())).outcome is Outcome.CONFIRMED


async def test_processing_is_unknown_until_settled(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    sim.injector.script(["partial"])
    with pytest.raises(AmbiguousError) as caught:
        await adapter.execute(call())
    assert caught.value.code == "payment_processing"
    intent_id = caught.value.details["payment_intent"]
    by_id = call(receipt=Receipt(intent_id))
    pending = await adapter.verify(by_id)
    assert pending.outcome is Outcome.UNKNOWN and "processing" in pending.detail
    await asyncio.sleep(0.45)
    settled = await adapter.verify(by_id)
    assert settled.outcome is Outcome.CONFIRMED and settled.receipt is not None
    assert settled.receipt.external_id == intent_id


async def test_conflicts_and_key_reuse_are_ambiguous(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    sim.injector.script(["conflict"])
    with pytest.raises(AmbiguousError) as conflict:
        await adapter.execute(call())
    assert conflict.value.code == "lock_timeout" and sim.ledger == []
    await adapter.execute(call())
    with pytest.raises(AmbiguousError) as reuse:
        await adapter.execute(call(amount=9999))
    assert reuse.value.code == "idempotency_error"
    sim.latency = 0.3
    results = await asyncio.gather(
        adapter.execute(call("act-2", "key-2")),
        adapter.execute(call("act-2", "key-2")),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Receipt) for r in results) == 1
    [in_use] = [r for r in results if isinstance(r, AmbiguousError)]
    assert in_use.code == "idempotency_key_in_use"
    assert len(sim.ledger) == 2


async def test_duplicates_are_reported_and_mismatches_are_unknown(sim: StripeSimulator, adapter: StripeAdapter) -> None:
    await adapter.execute(call(key="key-a"))
    # A second intent of the same action and generation under another idempotency key (made
    # around the adapter, by code that copied its metadata): a real duplicate.
    outside = stripe.StripeClient(API_KEY, base_addresses={"api": sim.base_url}, max_network_retries=0)
    await outside.v1.payment_intents.create_async(
        params={
            "amount": 2500,
            "currency": "usd",
            "customer": "cus_42",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "metadata": {"effectgate_action_id": "act-1", "effectgate_provider_key": "key-a"},
        },
        options={"idempotency_key": "key-outside"},
    )
    await adapter.execute(call(key="key-b"))  # another generation's charge: not this one's duplicate
    await asyncio.sleep(LAG + 0.15)
    observed = await adapter.verify(call(key="key-a"))
    assert observed.outcome is Outcome.CONFIRMED and observed.evidence["duplicates"] == 1
    assert len(observed.evidence["payment_intents"]) == 2
    assert len(observed.evidence["other_generations"]) == 1
    other = await adapter.verify(call(key="key-a", amount=100))
    assert other.outcome is Outcome.UNKNOWN and other.evidence["differences"] == ["amount"]


async def test_timeouts_and_unreachable_provider(sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = build(sim, monkeypatch, timeout=0.2)
    try:
        sim.injector.configure(FaultPlan(slow_seconds=1.0))
        sim.injector.script(["slow"])
        with pytest.raises(AmbiguousError) as caught:
            await slow.execute(call())
        assert caught.value.code == "timeout" and len(sim.ledger) == 1
        await sim.stop()
        with pytest.raises(NoEffectError) as refused:
            await slow.execute(call(key="key-9"))
        assert refused.value.code == "connect"
        unreadable = await slow.verify(call())
        assert unreadable.outcome is Outcome.UNKNOWN and unreadable.evidence["reason"] == "connect"
    finally:
        await slow.close()


async def test_canary_api_key_never_leaks(sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "sk_test_CANARY" + secrets.token_hex(12)
    wrong = build(sim, monkeypatch, key=canary)
    errors: list[AdapterError] = []
    try:
        with pytest.raises(NoEffectError) as caught:
            await wrong.execute(call())
        errors.append(caught.value)
        observed = await wrong.verify(call())
        assert observed.outcome is Outcome.UNKNOWN
        texts = [repr(wrong), str(observed), repr(observed)]
    finally:
        await wrong.close()
    # The provider did echo the key's tail: the adapter must not pass that on.
    assert caught.value.code == "authentication_failed"
    for err in errors:
        assert err.__cause__ is None and err.__context__ is None
        texts += [str(err), repr(err), err.message, err.code, repr(err.details)]
        texts += traceback.format_exception(err)
    for text in texts:
        assert canary not in text and canary[-4:] not in text and "Invalid API Key" not in text


def test_classify_rate_limit_and_server_errors() -> None:
    limited = classify(stripe.RateLimitError("Too many requests", http_status=429), "create payment")
    assert isinstance(limited, NoEffectError) and limited.code == "rate_limited"
    body = {"error": {"type": "api_error", "message": "key sk_live_SECRET broke"}}
    broken = classify(stripe.APIError("key sk_live_SECRET broke", json_body=body, http_status=502), "x")
    assert isinstance(broken, AmbiguousError) and broken.code == "http_502"
    assert "SECRET" not in str(broken)
    weird = stripe.InvalidRequestError("bad", "amount", code="Weird Code sk_live_X")  # type: ignore[no-untyped-call]
    odd = classify(weird, "x")
    assert isinstance(odd, DefinitiveError) and odd.code == "invalid_request"
    assert isinstance(classify(RuntimeError("boom sk_live_X"), "x"), AmbiguousError)


def test_normalize() -> None:
    adapter = StripeAdapter("stripe", api_key=API_KEY, api_base="http://127.0.0.1:9")
    raw = ChargeCard(customer=" cus_1 ", amount=10, currency=" EUR ", payment_method=" pm_card_visa ")
    assert adapter.normalize(raw) == ChargeCard(
        customer="cus_1", amount=10, currency="eur", payment_method="pm_card_visa"
    )
    for bad, field in [
        (ChargeCard(customer="c", amount=0, currency="usd"), "amount"),
        (ChargeCard(customer="c", amount=-5, currency="usd"), "amount"),
        (ChargeCard(customer="  ", amount=5, currency="usd"), "customer"),
        (ChargeCard(customer="c", amount=5, currency=" "), "currency"),
        (ChargeCard(customer="c", amount=5, currency="dollars"), "currency"),
    ]:
        with pytest.raises(InvalidPayload) as caught:
            adapter.normalize(bad)
        assert caught.value.field == field
    with pytest.raises(InvalidPayload):
        adapter.normalize(SendEmail(to="a@b"))


def test_customer_id_of_an_id_and_of_an_expanded_customer() -> None:
    """Create's answer is plain JSON, verify's reads are `StripeObject`s: both expanded forms work."""
    assert _customer_id(None) == ""
    assert _customer_id("cus_1") == "cus_1"
    assert _customer_id({"id": "cus_2", "object": "customer"}) == "cus_2"
    assert _customer_id(stripe.StripeObject.construct_from({"id": "cus_3", "object": "customer"}, API_KEY)) == "cus_3"


def test_settings_and_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_STRIPE_KEY", API_KEY)
    base = {"api_base": "http://127.0.0.1:9", "api_key_env": "TEST_STRIPE_KEY"}
    adapter = StripeAdapter.from_settings("stripe", {**base, "consistency_window": 5})
    caps = adapter.capabilities
    assert (caps.dedups_on_key, caps.key_retention, caps.consistency_window, caps.has_read_api) == (
        True,
        24 * 3600.0,
        5.0,
        True,
    )
    assert StripeAdapter.from_settings("stripe", base).capabilities.consistency_window == 60.0
    with pytest.raises(ConfigError):
        StripeAdapter.from_settings("stripe", {**base, "api_bse": "x"})
    with pytest.raises(ConfigError):
        StripeAdapter.from_settings("stripe", {**base, "api_key_env": "TEST_STRIPE_MISSING"})
    with pytest.raises(ConfigError):
        StripeAdapter.from_settings("stripe", {**base, "api_base": "ftp://x"})
