"""The inbox's live feed: server-sent events fed by the gateway's WatchActions. The watch's start
sends a `ready` event ("live"), each change of any of the tenant's actions a bare `inbox` event:
no action data, the page then asks for its rows, rendered and escaped on the server like every
page. While the gateway cannot be reached the feed stays open, says `offline` ("offline —
reconnecting") and opens the watch again by itself; the outage is logged once (console/link.py),
not once per stream or retry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from effectgate.client import EffectGateClient
from effectgate.console.link import GatewayLink, is_down
from effectgate.console.people import Person
from effectgate.console.web import parts, signed_in

log = logging.getLogger("effectgate.console")
OFFLINE = {"event": "offline", "data": "offline — reconnecting"}
LIVE = {"event": "ready", "data": "live"}
# Between two tries to open the watch again: from FIRST, doubling to LAST.
FIRST, LAST = 0.5, 5.0


async def changes(client: EffectGateClient, link: GatewayLink) -> AsyncIterator[dict[str, str]]:
    # No state filter: a watch's filter sees actions arrive in a state, not leave it, and the
    # inbox must also drop what was decided.
    # The first message says the watch has started: from then on no change is missed, so the
    # page reloads its rows once (what changed before) and shows "live".
    pause = FIRST
    while True:
        try:
            async for message in client.watch():
                if message.HasField("action"):
                    yield {"event": "inbox", "data": "changed"}
                else:
                    link.reachable()
                    pause = FIRST
                    yield LIVE
        except grpc.aio.AioRpcError as error:
            if not is_down(error):  # refused (a revoked token): the page's next request says why
                log.warning("live inbox ended: %s", error.code().name)
                yield {"event": "offline", "data": f"off ({error.code().name})"}
                return
            link.outage(error)
            yield OFFLINE
        await asyncio.sleep(pause)  # a watch that ended (the gateway restarting) is opened again
        pause = min(pause * 2, LAST)


@signed_in
async def inbox_events(request: Request, person: Person, client: EffectGateClient) -> Response:
    return EventSourceResponse(changes(client, parts(request).link), ping=15)
