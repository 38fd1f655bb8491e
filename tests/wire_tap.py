"""A recording HTTP proxy on loopback: the adapter talks to it as to its provider, it forwards each
request to the simulator unchanged and keeps both sides of every exchange as bytes, for
tests/openapi_check.py to judge. A connection the simulator drops is dropped here too."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from tests.openapi_check import Exchange

# Hop-by-hop headers, and the ones the client session sets again or already decoded.
_SKIPPED = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"})


class WireTap:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.base_url = ""

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(auto_decompress=True)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIPPED}
        try:
            async with self._session.request(
                request.method, self.upstream + request.path_qs, headers=headers, data=body, allow_redirects=False
            ) as answer:
                answered = await answer.read()
                status, answer_headers = answer.status, answer.headers
        except aiohttp.ClientError:
            if request.transport is not None:
                request.transport.close()
            raise
        self.exchanges.append(
            Exchange(
                method=request.method,
                path=request.path,
                query=list(request.query.items()),
                request_type=request.headers.get("Content-Type", ""),
                request_body=body,
                status=status,
                response_type=answer_headers.get("Content-Type", ""),
                response_body=answered,
            )
        )
        kept = {k: v for k, v in answer_headers.items() if k.lower() not in _SKIPPED}
        return web.Response(status=status, body=answered, headers=kept)
