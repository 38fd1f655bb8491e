"""The provider call inside an engine's durable step, shared by the Restate and DBOS workers.

A 2xx is the step's result; a definitive refusal (4xx) is a result too, never retried; anything
ambiguous (no answer, a 5xx, a 409 or 429) raises, so the engine's own retry policy decides what
happens next. There is no read-back: neither engine's docs add one around a step.
"""

from __future__ import annotations

from typing import Any

import httpx

from effectgate_lab.chaos.methods.method import DEFINITIVE, ok
from effectgate_lab.chaos.scenarios import SCENARIOS, Scenario

JsonDict = dict[str, Any]


class AmbiguousAnswer(Exception):
    """The provider's answer does not say whether the effect happened: the engine retries."""


class Providers:
    """One HTTP client per simulator the worker was asked to reach (kept for the worker's life)."""

    def __init__(self) -> None:
        self._clients: dict[str, httpx.AsyncClient] = {}

    def client(self, scenario: Scenario, base_url: str, auth: str = "") -> httpx.AsyncClient:
        if base_url not in self._clients:
            headers = {"Authorization": f"Bearer {auth}"} if auth else scenario.headers()
            self._clients[base_url] = httpx.AsyncClient(
                base_url=base_url, timeout=scenario.call_timeout, headers=headers
            )
        return self._clients[base_url]

    async def call(self, request: JsonDict, key: str) -> JsonDict:
        """One provider write for `request` ({scenario, base_url, typed}, and the bench's own
        provider secret as `auth`) with idempotency `key`."""
        scenario = SCENARIOS[request["scenario"]]
        client = self.client(scenario, request["base_url"], request.get("auth", ""))
        reply = await scenario.send(client, request["typed"], key=key, tag=key)
        if ok(reply.status):
            return {"told": "success", "detail": ""}
        if reply.status in DEFINITIVE:
            return {"told": "failure", "detail": f"HTTP {reply.status}"}
        raise AmbiguousAnswer(f"HTTP {reply.status or 'no answer'}")

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()
