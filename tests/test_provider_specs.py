"""The Stripe and Square adapters against their simulators over loopback, every exchange captured
by a recording proxy and judged by the provider's published OpenAPI spec (tests/openapi/, with its
source and version): each request the adapter sends and each answer the simulator gives, the error
answers included (declined card, idempotency key reused and in use, a lock, 404, 401, 429, 500). A
drift on either side (an adapter sending a field the provider does not take, a simulator answering in
a shape the provider never sends) fails here. Each test also checks that it saw every operation and
status it means to judge, so a path that stopped being exercised cannot pass quietly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from effectgate.adapters.base import ActionCall, AdapterError, Receipt
from effectgate.adapters.square.adapter import SquareAdapter, SquareSettings
from effectgate.adapters.stripe.adapter import StripeAdapter
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.openapi_check import Exchange, Spec
from tests.wire_tap import WireTap

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

STRIPE_KEY = "sk_test_specs"
SQUARE_TOKEN = "EAAA_specs"
STRIPE = Spec("stripe")
SQUARE = Spec("square", errors_in_success=True)


def call(action: str, key: str, receipt: Receipt | None = None, **payload: Any) -> ActionCall:
    fields: dict[str, Any] = {"customer": "cus_42", "amount": 2500, "currency": "usd", "payment_method": "pm_card_visa"}
    fields.update(payload)
    return ActionCall(action, key, ChargeCard(**fields), "customer:cus_42", "charge_card", "t1", receipt=receipt)


async def attempt(coroutine: Any) -> Any:
    """The adapter's answer or its error: here only the wire matters."""
    try:
        return await coroutine
    except AdapterError as error:
        return error


def judged(spec: Spec, exchanges: list[Exchange]) -> set[str]:
    problems = [p for e in exchanges for p in spec.check(e)]
    assert problems == [], "\n".join(problems)
    return {spec.template(e) for e in exchanges}


@pytest.fixture
async def stripe_wire(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[StripeSimulator, WireTap, StripeAdapter]]:
    sim = StripeSimulator(api_key=STRIPE_KEY, settle_seconds=0.2)
    await sim.start()
    tap = WireTap(sim.base_url)
    await tap.start()
    monkeypatch.setenv("SPECS_STRIPE_KEY", STRIPE_KEY)
    adapter = StripeAdapter.from_settings(
        "stripe", {"api_base": tap.base_url, "api_key_env": "SPECS_STRIPE_KEY", "timeout": 5}
    )
    try:
        yield sim, tap, adapter
    finally:
        await adapter.close()
        await tap.stop()
        await sim.stop()


async def test_stripe_traffic_conforms_to_stripes_spec(
    stripe_wire: tuple[StripeSimulator, WireTap, StripeAdapter], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim, tap, adapter = stripe_wire
    paid = await adapter.execute(call("act-1", "key-1", description="order 7"))
    await adapter.execute(call("act-1", "key-1", description="order 7"))  # replayed
    await attempt(adapter.execute(call("act-1", "key-1", amount=9999)))  # key reused: idempotency_error
    await attempt(adapter.execute(call("act-2", "key-2", payment_method="pm_card_chargeDeclined")))
    await attempt(adapter.execute(call("act-3", "key-3", payment_method="pm_card_chargeDeclinedExpiredCard")))
    sim.injector.script(["conflict", "rate_limit", "error_after_commit", "partial"])
    for n in range(4, 8):
        await attempt(adapter.execute(call(f"act-{n}", f"key-{n}")))
    # Two sends of one key at once: the second is refused while the first runs (a second's latency
    # holds the first open far longer than the second takes to arrive, even on a loaded machine).
    sim.latency = 1.0
    await asyncio.gather(*(attempt(adapter.execute(call("act-8", "key-8"))) for _ in range(2)))
    sim.latency = 0.0
    await adapter.verify(call("act-1", "key-1", receipt=paid))  # retrieve
    await attempt(adapter.verify(call("act-9", "key-9", receipt=Receipt("pi_" + "0" * 24))))  # 404
    await adapter.verify(call("act-2", "key-2"))  # search
    await adapter.list_effects(0.0)  # list
    await adapter.probe()
    monkeypatch.setenv("SPECS_STRIPE_KEY", "sk_test_wrong_key_0000")
    stranger = StripeAdapter.from_settings("stripe", {"api_base": tap.base_url, "api_key_env": "SPECS_STRIPE_KEY"})
    try:
        await attempt(stranger.probe())  # 401
    finally:
        await stranger.close()

    seen = judged(STRIPE, tap.exchanges)
    post = "POST /v1/payment_intents"
    assert {f"{post} {s}" for s in (200, 400, 402, 409, 429, 500)} <= seen
    assert {"GET /v1/payment_intents/{intent} 200", "GET /v1/payment_intents/{intent} 404"} <= seen
    assert {"GET /v1/payment_intents/search 200", "GET /v1/payment_intents 200", "GET /v1/payment_intents 401"} <= seen
    codes = {json.loads(e.response_body)["error"].get("code") for e in tap.exchanges if e.status == 409}
    assert codes == {"lock_timeout", "idempotency_key_in_use"}


async def test_a_declined_card_names_a_payment_method_as_stripe_does(
    stripe_wire: tuple[StripeSimulator, WireTap, StripeAdapter],
) -> None:
    """Stripe answers a decline with the PaymentMethod it created from the test token: a `pm_...`
    id (never the `pm_card_chargeDeclined` alias), `billing_details`, `created`, `livemode` and the
    card's details, the same object under the intent's `last_payment_error`."""
    _, tap, adapter = stripe_wire
    await attempt(adapter.execute(call("act-1", "key-1", payment_method="pm_card_chargeDeclined")))
    [declined] = tap.exchanges
    assert declined.status == 402 and STRIPE.check(declined) == []
    error = json.loads(declined.response_body)["error"]
    method = error["payment_method"]
    assert method["id"].startswith("pm_") and method["id"] != "pm_card_chargeDeclined"
    assert {"billing_details", "created", "livemode", "card"} <= set(method)
    assert error["payment_intent"]["last_payment_error"]["payment_method"] == method
    assert error["payment_intent"]["payment_method"] is None  # the intent lets go of a declined method


@pytest.fixture
async def square_wire() -> AsyncIterator[tuple[SquareSimulator, WireTap, SquareAdapter]]:
    sim = SquareSimulator(access_token=SQUARE_TOKEN, settle_seconds=0.2)
    await sim.start()
    tap = WireTap(sim.base_url)
    await tap.start()
    sources = {"pm_card_visa": "cnon:card-nonce-ok", "pm_card_chargeDeclined": "cnon:card-nonce-declined"}
    settings = SquareSettings(base_url=tap.base_url, source_ids=sources, location_id="L_SIM_MAIN")
    adapter = SquareAdapter("square", access_token=SQUARE_TOKEN, settings=settings)
    try:
        yield sim, tap, adapter
    finally:
        await adapter.close()
        await tap.stop()
        await sim.stop()


async def test_square_traffic_conforms_to_squares_spec(
    square_wire: tuple[SquareSimulator, WireTap, SquareAdapter],
) -> None:
    sim, tap, adapter = square_wire
    paid = await adapter.execute(call("act_1", "key-1", description="order 7"))
    await adapter.execute(call("act_1", "key-1", description="order 7"))  # replayed
    await attempt(adapter.execute(call("act_1", "key-1", amount=9999)))  # IDEMPOTENCY_KEY_REUSED
    await attempt(adapter.execute(call("act_2", "key-2", payment_method="pm_card_chargeDeclined")))
    sim.injector.script(["conflict", "rate_limit", "error_after_commit", "partial"])
    for n in range(4, 8):
        await attempt(adapter.execute(call(f"act_{n}", f"key-{n}")))
    await adapter.verify(call("act_1", "key-1", receipt=paid))  # get
    await attempt(adapter.verify(call("act_9", "key-9", receipt=Receipt("nothere"))))  # 404
    await adapter.verify(call("act_2", "key-2"))  # list by time and total
    await adapter.list_effects(0.0)
    await adapter.probe()
    stranger = SquareAdapter("square", access_token="EAAA_wrong", settings=SquareSettings(base_url=tap.base_url))
    try:
        await attempt(stranger.probe())  # 401
    finally:
        await stranger.close()

    seen = judged(SQUARE, tap.exchanges)
    assert {f"POST /v2/payments {s}" for s in (200, 400, 402, 409, 429, 500)} <= seen
    assert {"GET /v2/payments/{payment_id} 200", "GET /v2/payments/{payment_id} 404"} <= seen
    assert {"GET /v2/payments 200", "GET /v2/payments 401"} <= seen


def test_the_specs_name_their_source_and_the_checker_sees_a_drift() -> None:
    """The committed subsets say where they come from; and the checker is not vacuous: a Stripe
    decline without `livemode`, an extra form field, a Square payment with an unknown status and an
    undocumented status code are each caught."""
    for spec in (STRIPE, SQUARE):
        source = spec.source
        assert source["repository"].startswith("https://github.com/") and len(source["commit"]) == 40
        assert source["spec_version"] and source["api_version"] and source["license"]
    body = {"error": {"type": "card_error", "payment_method": {"id": "pm_1", "object": "payment_method"}}}
    exchange = Exchange(
        "POST",
        "/v1/payment_intents",
        [],
        "application/x-www-form-urlencoded",
        b"amount=100&currency=usd",
        402,
        "application/json",
        json.dumps(body).encode(),
    )
    assert any("billing_details" in p for p in STRIPE.check(exchange))
    unknown_field = replace(exchange, request_body=b"amount=100&currency=usd&colour=red", status=200)
    assert any("colour" in p for p in STRIPE.check_request(unknown_field))
    not_a_number = replace(exchange, request_body=b"amount=ten&currency=usd")
    assert any("amount" in p for p in STRIPE.check_request(not_a_number))
    payment = {"payment": {"id": "p1", "status": "SETTLING", "amount_money": {"amount": 1, "currency": "usd"}}}
    square = Exchange("GET", "/v2/payments/p1", [], "", b"", 200, "application/json", json.dumps(payment).encode())
    assert any("currency" in p for p in SQUARE.check(square))
    assert STRIPE.check_response(replace(exchange, status=200, response_body=b"{}")) != []
    assert any(
        "query parameter 'colour'" in p for p in SQUARE.check_request(replace(square, query=[("colour", "red")]))
    )


async def test_the_simulators_other_answers_conform() -> None:
    """What the adapters never provoke, each simulator still answers in its provider's shape: bad
    parameters, an unknown payment method or source, an unconfirmed intent, pages of a list. Only
    the answers are judged (some requests are wrong on purpose)."""
    stripe_sim, square_sim = StripeSimulator(api_key=STRIPE_KEY), SquareSimulator(access_token=SQUARE_TOKEN)
    async with stripe_sim, square_sim:
        stripe_tap, square_tap = WireTap(stripe_sim.base_url), WireTap(square_sim.base_url)
        await stripe_tap.start()
        await square_tap.start()
        try:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {STRIPE_KEY}"}) as web:
                intents = f"{stripe_tap.base_url}/v1/payment_intents"
                for form in (
                    {"currency": "usd"},  # amount missing
                    {"amount": "-5", "currency": "usd"},
                    {"amount": "100", "currency": "USDX"},
                    {"amount": "100", "currency": "usd", "payment_method": "pm_card_unknown"},
                    {"amount": "100", "currency": "usd", "confirm": "true"},  # no method to confirm
                    {"amount": "100", "currency": "usd", "payment_method": "pm_card_visa"},  # not confirmed
                    {"amount": "100", "currency": "usd"},
                ):
                    await (await web.post(intents, data=form)).read()
                for query in ({}, {"query": "amount>1"}, {"query": "status:'succeeded'", "limit": "500"}):
                    await (await web.get(f"{intents}/search", params=query)).read()
                first = await (await web.get(intents, params={"limit": "1"})).json()
                await (await web.get(intents, params={"starting_after": first["data"][0]["id"]})).read()
                await (await web.get(intents, params={"created[gte]": "soon"})).read()
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {SQUARE_TOKEN}"}) as web:
                payments = f"{square_tap.base_url}/v2/payments"
                money = {"amount": 100, "currency": "USD"}
                good = {"idempotency_key": "k1", "source_id": "cnon:card-nonce-ok", "amount_money": money}
                for body in (
                    [1, 2],
                    {**good, "idempotency_key": "k" * 46},
                    {**good, "amount_money": {"amount": 0, "currency": "USD"}},
                    {**good, "amount_money": {"amount": 100, "currency": "usd"}},
                    {**good, "source_id": "cnon:unknown"},
                    {**good, "reference_id": "r" * 41},
                    {**good, "source_id": "cnon:card-nonce-rejected-cvv", "idempotency_key": "k2"},
                    good,
                    {**good, "idempotency_key": "k3", "autocomplete": False},
                ):
                    await (await web.post(payments, json=body)).read()
                await (await web.get(payments, params={"limit": "1", "sort_order": "ASC"})).read()
                await (await web.get(payments, params={"cursor": "1", "limit": "1"})).read()
                await (await web.get(payments, params={"begin_time": "yesterday"})).read()
        finally:
            await stripe_tap.stop()
            await square_tap.stop()
    for spec, tap in ((STRIPE, stripe_tap), (SQUARE, square_tap)):
        problems = [p for e in tap.exchanges for p in spec.check_response(e)]
        assert problems == [], "\n".join(problems)
    assert {e.status for e in stripe_tap.exchanges} == {200, 400}
    assert {e.status for e in square_tap.exchanges} == {200, 400, 402}
    assert len(stripe_tap.exchanges) == 13 and len(square_tap.exchanges) == 12
