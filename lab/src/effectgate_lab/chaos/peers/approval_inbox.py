"""The person's inbox for the engines' native approvals: where a waiting handler or workflow
asks for approval (what an email or a Slack message with an "Approve" button would carry).

The engine's worker posts {action, token} from inside a durable step (Restate's `ctx.run`, a
DBOS step) before it waits: `token` is the awakeable's id for Restate, the workflow id for DBOS.
The person's clicks read the latest token for their action (`asked`) and answer through the
engine's own API. A step that re-runs after a crash asks again; the newest token wins.
"""

from __future__ import annotations

import asyncio

import httpx
from aiohttp import web

# How long a handler or workflow waits for the person: DBOS's default for `recv`, which its docs
# advise keeping ("a timeout is recommended"); the Restate handler is given the same.
APPROVAL_WAIT = 60.0


async def ask(url: str, action: str, token: str) -> None:
    """The engine's side: deliver the approval request (run inside the engine's durable step)."""
    async with httpx.AsyncClient(timeout=5.0) as http:
        reply = await http.post(url, json={"action": action, "token": token})
        reply.raise_for_status()


class ApprovalInbox:
    """An HTTP endpoint on loopback, one per cell: `start()`, `asked(action)`, `stop()`."""

    def __init__(self) -> None:
        self.port = 0
        self._tokens: dict[str, str] = {}
        self._asked: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ask"

    def _event(self, action: str) -> asyncio.Event:
        return self._asked.setdefault(action, asyncio.Event())

    async def _ask(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._tokens[body["action"]] = str(body["token"])
        self._event(body["action"]).set()
        return web.json_response({})

    async def asked(self, action: str) -> str:
        """Waits until the engine asked for approval of `action`; its token."""
        await self._event(action).wait()
        return self._tokens[action]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/ask", self._ask)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
