"""The Stripe simulator and the shared fault injection, over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from effectgate_lab.simulators.faults import Fault, FaultInjector, FaultPlan
from effectgate_lab.simulators.stripe_sim import DEFAULT_API_KEY, StripeSimulator
from effectgate_lab.simulators.stripe_wire import QueryError, parse_form, parse_search_query

AUTH = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}


def charge(action: str = "a1", **overrides: str) -> dict[str, str]:
    form = {
        "amount": "1500",
        "currency": "eur",
        "customer": "cus_42",
        "payment_method": "pm_card_visa",
        "confirm": "true",
        "metadata[effectgate_action_id]": action,
    }
    form.update(overrides)
    return form


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    server = StripeSimulator(search_lag=0.0, settle_seconds=0.3, visibility_lag=0.4)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class SimClock:
    """The simulator's clock, moved by the test: "not visible yet" holds however slow the machine."""

    def __init__(self) -> None:
        self.at = time.time()

    def __call__(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds


@pytest.fixture
def clock(sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch) -> SimClock:
    frozen = SimClock()
    monkeypatch.setattr(sim, "now", frozen)
    return frozen


@pytest.fixture
async def http(sim: StripeSimulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, headers=AUTH, timeout=5) as client:
        yield client


async def create(http: httpx.AsyncClient, key: str | None = "k1", **form: str) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return await http.post("/v1/payment_intents", data=charge(**form), headers=headers)


async def search(http: httpx.AsyncClient, action: str) -> list[dict[str, Any]]:
    response = await http.get(
        "/v1/payment_intents/search", params={"query": f"metadata['effectgate_action_id']:'{action}'"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "search_result" and body["url"] == "/v1/payment_intents/search"
    return list(body["data"])


async def test_create_confirm_and_retrieve(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    response = await create(http)
    assert response.status_code == 200
    assert response.headers["Request-Id"].startswith("req_")
    assert "Idempotent-Replayed" not in response.headers
    intent = response.json()
    assert intent["object"] == "payment_intent" and intent["id"].startswith("pi_")
    assert intent["status"] == "succeeded" and intent["latest_charge"].startswith("ch_")
    assert (intent["amount"], intent["currency"], intent["customer"]) == (1500, "eur", "cus_42")
    assert intent["metadata"] == {"effectgate_action_id": "a1"}
    fetched = await http.get(f"/v1/payment_intents/{intent['id']}")
    assert fetched.json() == intent
    [entry] = sim.ledger
    assert entry["kind"] == "payment_intent" and entry["id"] == intent["id"]
    assert entry["idempotency_key"] == "k1" and entry["metadata"] == {"effectgate_action_id": "a1"}
    assert entry["params"]["amount"] == "1500" and isinstance(entry["at"], float)
    missing = await http.get("/v1/payment_intents/pi_nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "resource_missing"


async def test_same_key_replays_the_first_answer(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    first = await create(http)
    second = await create(http)
    assert second.status_code == 200 and second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.headers["Request-Id"] != first.headers["Request-Id"]
    assert len(sim.ledger) == 1


async def test_same_key_other_parameters_is_idempotency_error(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    assert (await create(http)).status_code == 200
    response = await create(http, amount="1600")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "idempotency_error"
    assert len(sim.ledger) == 1


async def test_concurrent_request_with_key_in_flight_gets_409(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    sim.latency = 0.3
    first, second = await asyncio.gather(create(http), create(http))
    statuses = sorted([first.status_code, second.status_code])
    assert statuses == [200, 409]
    conflict = first if first.status_code == 409 else second
    assert conflict.json()["error"]["code"] == "idempotency_key_in_use"
    assert len(sim.ledger) == 1
    # Once the first answered, the key replays it.
    assert (await create(http)).headers["Idempotent-Replayed"] == "true"


async def test_api_key_is_required(sim: StripeSimulator) -> None:
    async with httpx.AsyncClient(base_url=sim.base_url) as anonymous:
        none = await anonymous.post("/v1/payment_intents", data=charge())
        wrong = await anonymous.post(
            "/v1/payment_intents", data=charge(), headers={"Authorization": "Bearer sk_test_wrong_key_1234"}
        )
        basic = await anonymous.get("/v1/payment_intents/pi_x", auth=(DEFAULT_API_KEY, ""))
        admin = await anonymous.get("/_sim/ledger")
    assert none.status_code == 401 and wrong.status_code == 401
    # Like Stripe, the answer echoes a masked key (adapters must not pass it on).
    assert wrong.json()["error"]["message"].endswith("1234")
    assert basic.status_code == 404  # authenticated, then no such intent
    assert admin.status_code == 200 and admin.json() == {"ledger": []}
    assert sim.ledger == []


async def test_declined_card_moves_no_money(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    response = await create(http, payment_method="pm_card_chargeDeclined")
    assert response.status_code == 402
    error = response.json()["error"]
    assert (error["type"], error["code"], error["decline_code"]) == (
        "card_error",
        "card_declined",
        "generic_decline",
    )
    intent = error["payment_intent"]
    assert intent["status"] == "requires_payment_method" and intent["last_payment_error"]
    assert sim.ledger == []
    # A 402 is an executed request's answer: stored and replayed.
    again = await create(http, payment_method="pm_card_chargeDeclined")
    assert again.status_code == 402 and again.headers["Idempotent-Replayed"] == "true"
    assert [i["status"] for i in await search(http, "a1")] == ["requires_payment_method"]


async def test_validation_errors_store_nothing(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    bad = await create(http, amount="0")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "amount"
    unknown_pm = await create(http, payment_method="pm_nope")
    assert unknown_pm.json()["error"]["code"] == "resource_missing"
    # The key was not used up by the invalid request.
    assert (await create(http)).status_code == 200


async def test_search_shows_an_intent_only_after_the_lag(
    sim: StripeSimulator, http: httpx.AsyncClient, clock: SimClock
) -> None:
    sim.search_lag = 0.3
    intent = (await create(http)).json()
    assert await search(http, "a1") == []
    assert (await http.get(f"/v1/payment_intents/{intent['id']}")).status_code == 200
    clock.advance(0.45)
    assert [i["id"] for i in await search(http, "a1")] == [intent["id"]]
    assert await search(http, "other") == []
    both = await http.get(
        "/v1/payment_intents/search",
        params={"query": "metadata['effectgate_action_id']:'a1' AND status:'succeeded' AND amount:1500"},
    )
    assert len(both.json()["data"]) == 1
    bad = await http.get("/v1/payment_intents/search", params={"query": "status:'a' OR status:'b'"})
    assert bad.status_code == 400


async def test_drop_after_commit_cuts_the_connection_but_keeps_the_effect(
    sim: StripeSimulator, http: httpx.AsyncClient
) -> None:
    sim.injector.script([Fault.DROP_AFTER_COMMIT])
    with pytest.raises(httpx.RemoteProtocolError):
        await create(http)
    assert len(sim.ledger) == 1 and sim.ledger[0]["fault"] == "drop_after_commit"
    # The stored answer is the success; the retry gets it, and no second effect.
    retry = await create(http)
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["id"] == sim.ledger[0]["id"]
    assert len(sim.ledger) == 1


async def test_error_after_commit_answers_500_and_replays_it(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    sim.injector.script(["error_after_commit"])
    response = await create(http)
    assert response.status_code == 500 and response.json()["error"]["type"] == "api_error"
    assert len(sim.ledger) == 1
    retry = await create(http)
    assert retry.status_code == 500 and retry.headers["Idempotent-Replayed"] == "true"
    assert len(sim.ledger) == 1


async def test_slow_answer_comes_after_the_commit(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    sim.injector.configure(FaultPlan(slow_seconds=0.4))
    sim.injector.script(["slow", "slow"])
    started = time.monotonic()
    assert (await create(http, key="slow-1")).status_code == 200
    assert time.monotonic() - started >= 0.4
    with pytest.raises(httpx.ReadTimeout):
        await http.post("/v1/payment_intents", data=charge("a2"), headers={"Idempotency-Key": "slow-2"}, timeout=0.1)
    assert len(sim.ledger) == 2  # the client gave up; the effect is there


async def test_conflict_is_409_without_effect(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    sim.injector.script(["conflict"])
    response = await create(http)
    assert response.status_code == 409 and response.json()["error"]["code"] == "lock_timeout"
    assert sim.ledger == []
    retry = await create(http)  # nothing was stored under the key
    assert retry.status_code == 200 and "Idempotent-Replayed" not in retry.headers
    assert len(sim.ledger) == 1


async def test_partial_is_processing_until_settled(
    sim: StripeSimulator, http: httpx.AsyncClient, clock: SimClock
) -> None:
    sim.injector.script(["partial"])
    intent = (await create(http)).json()
    assert intent["status"] == "processing" and intent["amount_received"] == 0
    assert sim.ledger[0]["status"] == "processing"  # money may still move: it counts
    assert (await http.get(f"/v1/payment_intents/{intent['id']}")).json()["status"] == "processing"
    clock.advance(0.45)
    settled = (await http.get(f"/v1/payment_intents/{intent['id']}")).json()
    assert settled["status"] == "succeeded" and settled["amount_received"] == 1500


async def test_delayed_visibility_hides_from_search_only(
    sim: StripeSimulator, http: httpx.AsyncClient, clock: SimClock
) -> None:
    sim.injector.script(["delayed_visibility", None])
    hidden = (await create(http, key="k1", action="a1")).json()
    shown = (await create(http, key="k2", action="a2")).json()
    clock.advance(0.1)
    assert await search(http, "a1") == []
    assert [i["id"] for i in await search(http, "a2")] == [shown["id"]]
    assert (await http.get(f"/v1/payment_intents/{hidden['id']}")).status_code == 200
    clock.advance(0.45)
    assert [i["id"] for i in await search(http, "a1")] == [hidden["id"]]


async def test_random_faults_are_deterministic_by_seed(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    plan = {"error_after_commit": 0.3, "conflict": 0.3, "seed": 7}

    async def run() -> list[int]:
        assert (await http.post("/_sim/reset")).status_code == 200
        assert (await http.post("/_sim/faults", json=plan)).status_code == 200
        return [(await create(http, key=f"k{i}", action=f"a{i}")).status_code for i in range(20)]

    first, second = await run(), await run()
    assert first == second
    assert {200, 409, 500} <= set(first)
    other = FaultInjector(FaultPlan(error_after_commit=0.3, conflict=0.3, seed=8))
    mine = FaultInjector(FaultPlan(error_after_commit=0.3, conflict=0.3, seed=7))
    assert [mine.decide() for _ in range(20)] != [other.decide() for _ in range(20)]


async def test_admin_endpoints(sim: StripeSimulator, http: httpx.AsyncClient) -> None:
    scripted = await http.post("/_sim/script", json=["conflict", None])
    assert scripted.json()["scripted"] == ["conflict", None]
    assert (await create(http)).status_code == 409
    assert (await create(http)).status_code == 200
    ledger = (await http.get("/_sim/ledger")).json()["ledger"]
    assert len(ledger) == 1 and ledger[0]["idempotency_key"] == "k1"
    assert (await http.post("/_sim/script", json=["explode"])).status_code == 400
    assert (await http.post("/_sim/faults", json={"conflict": 0.9, "slow": 0.9})).status_code == 400
    assert (await http.post("/_sim/faults", json={"nope": 1})).status_code == 400
    level = await http.post("/_sim/faults", json={"level": "high", "seed": 3})
    assert level.json()["plan"]["drop_after_commit"] == 0.35 and level.json()["plan"]["seed"] == 3
    assert (await http.post("/_sim/faults", json={})).json()["plan"]["drop_after_commit"] == 0.0
    assert (await http.post("/_sim/reset")).json() == {"reset": True}
    assert sim.ledger == [] and sim.intents == {}
    assert (await create(http)).headers.get("Idempotent-Replayed") is None  # keys were cleared


def test_fault_injector_takes_the_script_first() -> None:
    injector = FaultInjector(FaultPlan(slow=1.0))
    injector.script(["partial", None])
    assert [injector.decide() for _ in range(3)] == [Fault.PARTIAL, None, Fault.SLOW]
    assert injector.decisions == [Fault.PARTIAL, None, Fault.SLOW]
    with pytest.raises(ValueError):
        injector.script(["timeout"])
    with pytest.raises(ValueError):
        FaultPlan(conflict=1.5)
    assert FaultPlan.study_level("medium").partial == 0.10


def test_wire_formats() -> None:
    form = parse_form([("metadata[a]", "x"), ("metadata[0]", "y"), ("types[0]", "card"), ("t[]", "p")])
    assert form == {"metadata": {"a": "x", "0": "y"}, "types": ["card"], "t": ["p"]}
    [clause] = parse_search_query("metadata['k']:'it\\'s'")
    assert (clause.field, clause.key, clause.value) == ("metadata", "k", "it's")
    with pytest.raises(QueryError):
        parse_search_query("metadata['k']:'v' AND")


async def test_module_entry_runs_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "effectgate_lab.simulators",
        "stripe",
        "--port",
        "0",
        "--seed",
        "1",
        "--search-lag",
        "1.5",
        "--fault-timeout",
        "0.2",
        "--script",
        "conflict",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
            assert (await create(client)).status_code == 409
            faults = (await client.get("/_sim/faults")).json()
            assert faults["plan"]["drop_after_commit"] == 0.2 and faults["plan"]["seed"] == 1
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
