"""A Slack incoming webhook: `POST` of `{"text": ..., "blocks": [...]}` to the webhook's URL (its
secret, read from `url_env` / `url_file`). Slack answers 200 `ok`; it has no dedup key, so a
redelivery after a crash may show twice (the event id is in the message's context line)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from effectgate.adapters.base import ConfigError
from effectgate.gateway.background.notify import message
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink, secret
from effectgate.gateway.config import NotifySink


def slack_message(note: Mapping[str, Any]) -> dict[str, Any]:
    data = note["data"]
    head = message.summary(note)
    link = str(data.get("link", ""))
    details = message.lines(note)[1:-3]
    text = f"*{head}*" + (f"\n<{link}|Open in the console>" if link else "")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if details:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(details)}})
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"{note['timestamp']} · {data['event_id']}"}]}
    )
    return {"text": f"{head} {link}".strip(), "blocks": blocks}


class SlackSink(Sink):
    def __init__(self, config: NotifySink) -> None:
        super().__init__(config)
        self._url = secret(config, "url")
        if not self._url.startswith(("http://", "https://")):
            raise ConfigError("the Slack webhook URL it names is not an http(s) URL", key="url_env")
        self._client = httpx.AsyncClient(timeout=config.timeout, follow_redirects=False)

    async def send(self, event_id: str, note: Mapping[str, Any], body: str) -> None:
        payload = json.dumps(slack_message(note), ensure_ascii=False).encode()
        headers = {"content-type": "application/json", "x-effectgate-event-id": event_id}
        try:
            answer = await self._client.post(self._url, content=payload, headers=headers)
        except httpx.HTTPError as exc:
            # The URL is a secret: name the error's kind only.
            raise DeliveryFailed(type(exc).__name__) from None
        if not answer.is_success:
            raise DeliveryFailed(f"HTTP {answer.status_code}")

    async def close(self) -> None:
        await self._client.aclose()
