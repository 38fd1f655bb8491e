"""The Stripe adapter's create (`adapters/stripe/create.Create`) sends what the SDK's
`raw_request_async` sends, and fails as it fails: the same headers and form body on the wire,
the same answer, the same error class and fields from the same error body, the same connection
error. A real aiohttp server on loopback records what arrives and answers what it is told to."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import stripe
from aiohttp import web

from effectgate.adapters.stripe.create import PATH, Create
from tests.ports import closed_port

API_KEY = "sk_test_create_0123456789"
PARAMS: dict[str, Any] = {
    "amount": 500,
    "currency": "usd",
    "customer": "cus_1",
    "confirm": True,
    "off_session": True,
    "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
    "metadata": {"effectgate_action_id": "act_1 & ü"},
    "payment_method": "pm_card_visa",
}


@dataclass
class Recorder:
    """Every request's method, path, headers and body; answers `status` with `body`."""

    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    peers: list[object] = field(default_factory=list)
    delay: float = 0.0
    status: int = 200
    body: dict[str, Any] = field(default_factory=lambda: {"id": "pi_1", "object": "payment_intent"})

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path, dict(request.headers), await request.read()))
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        if self.delay:
            await asyncio.sleep(self.delay)  # longer than the client's timeout: the answer is late
        return web.json_response(self.body, status=self.status, headers={"Request-Id": "req_1"})


@pytest.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_post(PATH, recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield recorder, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def clients(base: str, timeout: float = 5.0) -> tuple[stripe.StripeClient, stripe.AIOHTTPClient, Create]:
    stripe.enable_telemetry = False
    http = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=timeout))
    client = stripe.StripeClient(API_KEY, base_addresses={"api": base}, max_network_retries=0, http_client=http)
    return client, http, Create(client, http)


async def both(base: str, key: str, timeout: float = 5.0) -> list[object]:
    """The SDK's answer (or error) and the fast path's, for the same request."""
    client, http, create = clients(base, timeout)
    out: list[object] = []
    try:
        for call in (
            lambda: client.raw_request_async("post", PATH, idempotency_key=key, **PARAMS),
            lambda: create(key, PARAMS),
        ):
            try:
                out.append(await call())
            except stripe.StripeError as exc:
                out.append(exc)
    finally:
        await http.close_async()  # type: ignore[no-untyped-call]
    return out


def comparable(headers: dict[str, str]) -> dict[str, str]:
    # Set by aiohttp per connection / request, not by either path.
    return {k: v for k, v in headers.items() if k not in ("Host", "Content-Length")}


async def test_the_same_request_on_the_wire_and_the_same_answer(server: tuple[Recorder, str]) -> None:
    recorder, base = server
    sdk, fast = await both(base, "key-1")
    assert len(recorder.seen) == 2
    (m1, p1, h1, b1), (m2, p2, h2, b2) = recorder.seen
    assert (m1, p1, b1) == (m2, p2, b2) == ("POST", PATH, b1)
    assert comparable(h1) == comparable(h2)
    assert h2["Idempotency-Key"] == "key-1" and h2["Authorization"] == f"Bearer {API_KEY}"
    assert b"metadata[effectgate_action_id]=act_1+%26+%C3%BC" in b1 and b"confirm=true" in b1
    assert isinstance(sdk, stripe.StripeResponse) and isinstance(fast, stripe.StripeResponse)
    assert (
        (sdk.data, sdk.code, sdk.request_id)
        == (fast.data, fast.code, fast.request_id)
        == (
            recorder.body,
            200,
            "req_1",
        )
    )


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (402, {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}),
        (400, {"type": "invalid_request_error", "code": "parameter_invalid", "param": "amount"}),
        (400, {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used once"}),
        (401, {"type": "invalid_request_error", "message": "Invalid API Key provided"}),
        (429, {"type": "invalid_request_error", "code": "rate_limit"}),
        (500, {"type": "api_error"}),
    ],
)
async def test_the_same_error_from_the_same_body(
    server: tuple[Recorder, str], status: int, error: dict[str, str]
) -> None:
    recorder, base = server
    recorder.status, recorder.body = status, {"error": error}
    sdk, fast = await both(base, "key-2")
    assert isinstance(sdk, stripe.StripeError) and type(fast) is type(sdk)
    assert isinstance(fast, stripe.StripeError)
    for attr in ("http_status", "code", "request_id", "json_body", "user_message"):
        assert getattr(fast, attr) == getattr(sdk, attr), attr
    assert json.loads(fast.http_body or "") == recorder.body


async def test_the_same_connection_error_when_nothing_listens() -> None:
    with closed_port() as nothing:  # held: nobody else listens there meanwhile
        sdk, fast = await both(f"http://127.0.0.1:{nothing}", "key-3")
    assert isinstance(sdk, stripe.APIConnectionError) and isinstance(fast, stripe.APIConnectionError)
    assert type(fast.__cause__) is type(sdk.__cause__)
    assert isinstance(fast.__cause__, aiohttp.ClientConnectorError)
    assert fast.user_message == sdk.user_message


async def test_the_same_timeout_when_the_answer_is_late(server: tuple[Recorder, str]) -> None:
    recorder, base = server
    recorder.delay = 1.0
    sdk, fast = await both(base, "key-4", timeout=0.2)
    assert isinstance(sdk, stripe.APIConnectionError) and isinstance(fast, stripe.APIConnectionError)
    assert type(fast.__cause__) is type(sdk.__cause__)
    assert isinstance(fast.__cause__, TimeoutError)


async def test_one_kept_alive_connection_for_consecutive_creates(server: tuple[Recorder, str]) -> None:
    recorder, base = server
    _, http, create = clients(base)
    try:
        for i in range(3):
            await create(f"key-5-{i}", PARAMS)
    finally:
        await http.close_async()  # type: ignore[no-untyped-call]
    assert len(recorder.peers) == 3 and len(set(recorder.peers)) == 1
