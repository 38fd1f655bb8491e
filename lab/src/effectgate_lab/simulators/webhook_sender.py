"""Signed webhooks from a simulator to a URL, after a delay (so a test can have an event arrive
before the gateway's next scheduled read-back).

Three signature schemes: Stripe's (`Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`),
Square's (`x-square-hmacsha256-signature: <base64 HMAC-SHA256 of "notification URL + body">`) and
a plain one for the generic HTTP adapter (`X-Signature: sha256=<hex HMAC-SHA256 of the body>`,
or of "timestamp.body" with an `X-Signature-Timestamp`). Deliveries and their answers are kept
in `sent`, so a test can see what the receiver said.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

JsonDict = dict[str, Any]


def stripe_signature(body: bytes, secret: str, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def square_signature(body: bytes, key: str, notification_url: str) -> str:
    mac = hmac.new(key.encode(), notification_url.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def hmac_signature(body: bytes, secret: str, timestamp: int | None = None) -> str:
    signed = body if timestamp is None else f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


@dataclass
class Delivery:
    event_id: str
    status: int  # 0: no answer (connection failed)
    answer: JsonDict


@dataclass
class WebhookSender:
    """Sends events to `url`, `delay` seconds after they happen; `scheme` "stripe", "square" or
    "hmac". Square signs `signed_url` (the URL the subscription names) when set, else `url`."""

    url: str = ""
    secret: str = ""
    delay: float = 0.0
    scheme: str = "stripe"
    signed_url: str = ""
    sent: list[Delivery] = field(default_factory=list)
    # When set, a scheduled delivery also waits for this event after its delay: a test releases
    # the provider's event once it has seen what must come first, instead of racing a clock.
    hold: asyncio.Event | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.secret)

    def stripe_event(self, event_type: str, obj: JsonDict) -> JsonDict:
        return {
            "id": "evt_" + secrets.token_hex(12),
            "object": "event",
            "type": event_type,
            "created": int(time.time()),
            "livemode": False,
            "api_version": "2024-06-20",
            "data": {"object": obj},
        }

    def square_event(self, event_type: str, name: str, obj: JsonDict) -> JsonDict:
        return {
            "merchant_id": "MLSIM",
            "type": event_type,
            "event_id": str(uuid.uuid4()),
            "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "data": {"type": name, "id": obj.get("id", ""), "object": {name: obj}},
        }

    def emit(self, event: JsonDict, delay: float | None = None) -> None:
        """Schedules the delivery of `event` (no-op unless a URL and a secret are set)."""
        if not self.enabled:
            return
        task = asyncio.get_running_loop().create_task(self._later(event, self.delay if delay is None else delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _later(self, event: JsonDict, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        if self.hold is not None:
            await self.hold.wait()
        await self.deliver(json.dumps(event).encode(), str(event.get("id") or event.get("event_id") or ""))

    def headers(self, body: bytes, *, timestamp: int | None = None, secret: str | None = None) -> dict[str, str]:
        key = self.secret if secret is None else secret
        if self.scheme == "stripe":
            return {"Stripe-Signature": stripe_signature(body, key, timestamp), "Content-Type": "application/json"}
        if self.scheme == "square":
            signed = square_signature(body, key, self.signed_url or self.url)
            return {"x-square-hmacsha256-signature": signed, "Content-Type": "application/json"}
        ts = int(time.time()) if timestamp is None else timestamp
        return {
            "X-Signature": hmac_signature(body, key, ts),
            "X-Signature-Timestamp": str(ts),
            "Content-Type": "application/json",
        }

    async def deliver(self, body: bytes, event_id: str = "", headers: dict[str, str] | None = None) -> Delivery:
        """One POST of `body` (signed now unless `headers` are given); returns the answer."""
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                reply = await client.post(self.url, content=body, headers=headers or self.headers(body))
            try:
                answer = reply.json()
            except ValueError:
                answer = {}
            delivery = Delivery(event_id, reply.status_code, answer if isinstance(answer, dict) else {})
        except httpx.HTTPError:
            delivery = Delivery(event_id, 0, {})
        self.sent.append(delivery)
        return delivery

    async def drain(self) -> None:
        """Waits for the scheduled deliveries (releasing any held)."""
        if self.hold is not None:
            self.hold.set()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
