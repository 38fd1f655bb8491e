"""Receivers of notifications on loopback for tests/test_notify*.py: an HTTP receiver (a Standard
Webhooks endpoint, or a Slack incoming webhook) that can be down for a while, and the sinks'
config tables."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

SECRET = "whsec_" + base64.b64encode(b"notify-test-secret-0123456789ab").decode()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """POST / on 127.0.0.1; `status` answers each request (503: "down"); while `hold` is an unset
    event, requests hang (a sink that accepts and never answers), counted in `holding`."""

    status: int = 200
    hold: asyncio.Event | None = None
    holding: int = 0
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self, port: int = 0) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port or self.port)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.hold is not None:
            self.holding += 1
            await self.hold.wait()
        if self.status >= 300:
            return web.Response(status=self.status, text="down")
        self.received.append(Received({k.lower(): v for k, v in request.headers.items()}, body))
        self._arrived.set()
        return web.Response(status=self.status, text="ok")

    async def until(self, check: Callable[[list[Received]], bool], what: str, timeout: float = 30.0) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not check(self.received):
            if loop.time() > end:
                raise AssertionError(f"timed out waiting for {what}; received {len(self.received)}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), 0.2)


def webhook_sink(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "ops-hook",
        "kind": "webhook",
        "url": url,
        "secret_env": "EG_NOTIFY_SECRET",
        "console_url": "https://console.example.test",
        "backoff": "0.2s",
        "backoff_max": "0.5s",
        "timeout": "2s",
        **extra,
    }


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        found = check()
        if found:
            return found
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def until_async(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await check():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
