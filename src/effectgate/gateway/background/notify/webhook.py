"""A signed outbound webhook in the Standard Webhooks format (standardwebhooks.com).

`POST <url>` with the notification as JSON (`type`, `timestamp`, `data`) and the three headers the
spec names: `webhook-id` (the event id: the same on every retry, the receiver's dedup key),
`webhook-timestamp` (seconds, when this attempt was signed) and `webhook-signature`
(`v1,<base64 HMAC-SHA256 of "id.timestamp.body">` with the `whsec_` secret), signed by the
`standardwebhooks` library, whose `Webhook.verify` is what a receiver calls. A 2xx is taken.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import httpx
from standardwebhooks import Webhook

from effectgate.adapters.base import ConfigError
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink, secret
from effectgate.gateway.config import NotifySink


class WebhookSink(Sink):
    def __init__(self, config: NotifySink) -> None:
        super().__init__(config)
        key = secret(config, "secret")
        try:
            self._signer = Webhook(key)
        except Exception:  # never echo the secret
            raise ConfigError("is not a Standard Webhooks secret (whsec_ and base64)", key="secret_env") from None
        self._client = httpx.AsyncClient(timeout=config.timeout, follow_redirects=False)

    async def send(self, event_id: str, note: Mapping[str, Any], body: str) -> None:
        now = datetime.datetime.now(datetime.UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": event_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer.sign(event_id, now, body),
            "user-agent": "effectgate-notify",
        }
        try:
            answer = await self._client.post(self.config.url, content=body.encode(), headers=headers)
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
        if not answer.is_success:
            raise DeliveryFailed(f"HTTP {answer.status_code}")

    async def close(self) -> None:
        await self._client.aclose()
