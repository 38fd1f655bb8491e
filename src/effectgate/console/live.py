"""The inbox's live feed: server-sent events fed by the gateway's WatchActions. Each change of
any of the tenant's actions sends one bare `inbox` event (no action data: the page then asks for
its rows, rendered and escaped on the server like every page)."""

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
    async for message in client.watch():
        if message.HasField("action"):
            yield {"event": "inbox", "data": "changed"}


@signed_in
async def inbox_events(request: Request, person: Person, client: EffectGateClient) -> Response:
    return EventSourceResponse(changes(client), ping=15)
