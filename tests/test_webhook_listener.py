"""The webhook listener as the internet meets it (docs/webhooks.md, "The listener"): a real gateway
with a Stripe and a Square route. A corpus of malformed requests, signed and unsigned, on both
routes (not UTF-8, 200 000-deep JSON, too large, arrays and scalars, empty, wrong or no content
type, chunked, broken HTTP): each is answered 4xx, with at most one WARNING line and no traceback
in the log, and nothing reaches the store. A client that never finishes its request head is cut
off; HTTPS and mTLS serve from the configured certificates."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from effectgate.gateway.intake import server as intake_server
from effectgate_lab.simulators.webhook_sender import WebhookSender
from tests.harness import API_KEY_ENV, LiveGateway, config_doc, start_gateway
from tests.tls_certs import Pki, make_pki

STRIPE_SECRET, SQUARE_KEY = "whsec_listener_test", "sq_listener_key"
SQUARE_URL = "https://hooks.example/square"
MAX_BODY = 1 << 20  # the default: deep bodies below fit in it


def listener_doc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **webhooks: Any) -> dict[str, Any]:
    monkeypatch.setenv("EG_TEST_LISTENER_STRIPE", STRIPE_SECRET)
    monkeypatch.setenv("EG_TEST_LISTENER_SQUARE", SQUARE_KEY)
    monkeypatch.setenv("EG_TEST_LISTENER_SQUARE_TOKEN", "EAAA_listener")
    nowhere = "http://127.0.0.1:9"  # no provider is read: nothing here gets that far
    adapters = {
        "stripe": {"api_base": nowhere, "api_key_env": API_KEY_ENV, "webhook_secret_env": "EG_TEST_LISTENER_STRIPE"},
        "square": {
            "kind": "square",
            "base_url": nowhere,
            "access_token_env": "EG_TEST_LISTENER_SQUARE_TOKEN",
            "webhook_signature_key_env": "EG_TEST_LISTENER_SQUARE",
            "webhook_url": SQUARE_URL,
        },
    }
    tool = {"attempt_timeout": "1s"}
    tools = {"charge_card": {"adapter": "stripe", **tool}, "charge_square": {"adapter": "square", **tool}}
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", adapters=adapters, tools=tools)
    doc["webhooks"] = {"listen": "127.0.0.1:0", "max_body_bytes": MAX_BODY, **webhooks}
    return doc


@pytest.fixture
async def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LiveGateway]:
    gateway = await start_gateway(listener_doc(tmp_path, monkeypatch))
    yield gateway
    await gateway.close()


def _stripe(body: bytes, **headers: str) -> dict[str, str]:
    sender = WebhookSender(secret=STRIPE_SECRET, scheme="stripe")
    return {**sender.headers(body), **headers}


def _square(body: bytes, **headers: str) -> dict[str, str]:
    sender = WebhookSender(secret=SQUARE_KEY, scheme="square", signed_url=SQUARE_URL)
    return {**sender.headers(body), **headers}


DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_OBJECT = b'{"data": ' * 100_000 + b"1" + b"}" * 100_000
NOT_UTF8 = b'{"id": "evt_\xff\xfe", "data": {}}'
JSON = {"Content-Type": "application/json"}


def corpus() -> list[tuple[str, str, bytes, dict[str, str], int]]:
    """(name, route, body, headers, status): what a stranger (or a broken provider) may send."""
    big = b'{"data": {}, "pad": "' + b"x" * MAX_BODY + b'"}'
    stripe_event = json.dumps({"id": "evt_1", "type": "payment_intent.succeeded", "data": "nope"}).encode()
    # PostgreSQL text cannot hold a NUL: an event carrying one is refused alike on every store.
    square_nul = json.dumps({"event_id": "ev\x00", "type": "payment.updated", "data": {"object": {}}}).encode()
    return [
        ("stripe, not UTF-8, unsigned", "stripe", NOT_UTF8, JSON, 400),
        ("stripe, not UTF-8, signed", "stripe", NOT_UTF8, _stripe(NOT_UTF8), 400),
        ("square, not UTF-8, signed", "square", NOT_UTF8, _square(NOT_UTF8), 400),
        ("stripe, deep JSON, signed", "stripe", DEEP, _stripe(DEEP), 400),
        ("square, deep JSON, signed", "square", DEEP, _square(DEEP), 400),
        ("stripe, deep object, signed", "stripe", DEEP_OBJECT, _stripe(DEEP_OBJECT), 400),
        ("square, deep object, signed", "square", DEEP_OBJECT, _square(DEEP_OBJECT), 400),
        ("square, deep JSON, unsigned", "square", DEEP, JSON, 400),
        ("stripe, too large", "stripe", big, _stripe(big), 413),
        ("square, too large", "square", big, _square(big), 413),
        ("stripe, an array, signed", "stripe", b"[1, 2]", _stripe(b"[1, 2]"), 400),
        ("square, an array, signed", "square", b"[1, 2]", _square(b"[1, 2]"), 400),
        ("stripe, a string, signed", "stripe", b'"evt"', _stripe(b'"evt"'), 400),
        ("square, null, signed", "square", b"null", _square(b"null"), 400),
        ("stripe, data not an object, signed", "stripe", stripe_event, _stripe(stripe_event), 400),
        ("square, no event_id, signed", "square", b'{"data": {}}', _square(b'{"data": {}}'), 400),
        ("square, NUL in the event id, signed", "square", square_nul, _square(square_nul), 400),
        ("stripe, empty", "stripe", b"", _stripe(b""), 400),
        ("square, empty", "square", b"", _square(b""), 400),
        ("stripe, text/plain", "stripe", b"{}", _stripe(b"{}", **{"Content-Type": "text/plain"}), 415),
        ("square, form encoded", "square", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ("stripe, no content type", "stripe", b"{}", {"Stripe-Signature": "t=1,v1=00"}, 415),
        ("stripe, garbage signature", "stripe", b"{}", {**JSON, "Stripe-Signature": "t=abc,v1=zz,,="}, 400),
        ("square, garbage signature", "square", b"{}", {**JSON, "x-square-hmacsha256-signature": "%%%"}, 400),
    ]


async def raw(port: int, data: bytes) -> bytes:
    """Sends `data` as is and reads until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        async with asyncio.timeout(30):
            return await reader.read(-1)
    finally:
        writer.close()


async def test_malformed_requests_are_4xx_with_one_line_and_no_traceback(
    live: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    port = live.gateway.webhook_port
    base = f"http://127.0.0.1:{port}/webhooks/"
    cases = corpus()
    caplog.set_level(logging.INFO)
    caplog.clear()
    async with httpx.AsyncClient(timeout=60) as client:
        answers = [
            (await client.post(base + route, content=body, headers=headers)).status_code
            for _, route, body, headers, _ in cases
        ]

        async def chunks() -> AsyncIterator[bytes]:
            yield b"{}"

        chunked = await client.post(base + "stripe", content=chunks(), headers=_stripe(b"{}"))
        wrong_method = await client.get(base + "square")
        no_route = await client.post(base + "nosuch", content=b"{}", headers=JSON)
    assert [(c[0], a) for c, a in zip(cases, answers, strict=True)] == [(c[0], c[4]) for c in cases]
    assert (chunked.status_code, wrong_method.status_code, no_route.status_code) == (411, 405, 404)
    head = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    broken = [
        b"GARBAGE\r\n\r\n",
        head + b"Content-Length: ten\r\n\r\n{}",
        head + b"Content-Length: 2\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n{}",
        head + b"Content-Length: -1\r\n\r\n",
    ]
    for data in broken:
        reply = await raw(port, data)
        assert reply.startswith(b"HTTP/1.1 4"), (data[:40], reply[:80])
    requests = len(cases) + 3 + len(broken)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], "no traceback, no error"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) <= requests, [r.getMessage() for r in warnings]
    assert all("\n" not in r.getMessage() for r in warnings), "one line each"


async def test_a_request_head_that_never_ends_is_cut_off(live: LiveGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake_server, "HEADER_TIMEOUT", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", live.gateway.webhook_port)
    writer.write(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n")  # and then nothing
    await writer.drain()
    async with asyncio.timeout(30):
        assert await reader.read(-1) == b"", "closed without an answer"
    writer.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def test_https_and_mtls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pki: Pki) -> None:
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key), "client_ca_file": str(pki.ca)}
    live = await start_gateway(listener_doc(tmp_path, monkeypatch, tls=tls))
    try:
        url = f"https://127.0.0.1:{live.gateway.webhook_port}/webhooks/stripe"
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        async with httpx.AsyncClient(verify=context, timeout=30) as client:
            unsigned = await client.post(url, content=b"{}", headers=JSON)
        assert (unsigned.status_code, unsigned.json()) == (400, {"error": "forged"})
        anonymous = ssl.create_default_context(cafile=str(pki.ca))  # no client certificate
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            async with httpx.AsyncClient(verify=anonymous, timeout=30) as client:
                await client.post(url, content=b"{}", headers=JSON)
        reader, writer = await asyncio.open_connection("127.0.0.1", live.gateway.webhook_port)
        writer.write(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        writer.write_eof()
        async with asyncio.timeout(30):
            assert not (await reader.read(-1)).startswith(b"HTTP/1.1"), "no plaintext answer on the TLS port"
        writer.close()
    finally:
        await live.close()
