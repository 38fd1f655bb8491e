"""The inbox's live feed: server-sent events fed by the gateway's WatchActions. The watch's start
sends a `ready` event, each change of any of the tenant's actions a bare `inbox` event: no action
data, the page then asks for its rows, rendered and escaped on the server like every page."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from effectgate.client import EffectGateClient
from effectgate.console.people import Person
from effectgate.console.web import signed_in


async def changes(client: EffectGateClient) -> AsyncIterator[dict[str, str]]:
    # No state filter: a watch's filter sees actions arrive in a state, not leave it, and the
    # inbox must also drop what was decided.
    # The first message says the watch has started: from then on no change is missed, so the
    # page reloads its rows once (what changed before) and shows "live".
    async for message in client.watch():
        yield (
            {"event": "inbox", "data": "changed"} if message.HasField("action") else {"event": "ready", "data": "live"}
        )


@signed_in
async def inbox_events(request: Request, person: Person, client: EffectGateClient) -> Response:
    return EventSourceResponse(changes(client), ping=15)
